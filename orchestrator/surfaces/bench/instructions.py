"""``troupe bench instructions``: a shop session's CPU as instructions, which the machine's speed does not move.

These VMs change speed by up to 2x from one hour to the next, and a change that saves 3 % of a
session's CPU is lost in that: two timed runs of the same code differ by more. Instructions move
far less: ``valgrind --tool=callgrind`` counts every instruction the process executes (the loop,
the store's writes, the live views), and the same code on the same inputs gives nearly the same
count however busy or slow the machine is (round thirty-five: 4.794 and 4.761 G for one whole run
repeated, 5.068 and 5.072 G for another).

The workload is the shop's (``actors.bench.shop``), in one process (``LocalRuntime``, SQLite with
the writer on the loop as a host has it, uvloop, ``tune_gc``): a few sessions to warm up, then
``low`` sessions at once, each three turns watched by a live view and verified. The same is run
with ``high`` sessions, and the difference over ``high - low`` is what one session costs.

Counting starts after the warm-up. Callgrind starts with its instrumentation off
(``--instr-atstart=no``): the interpreter's start, the imports and the warm-up run about 10x
faster than counted code, and the counted process says when it is warm. ``callgrind_control``
then turns counting on. The runtime's close and the interpreter's exit are counted, but they are
the same in both runs and cancel. The two runs go side by side (a core each): callgrind runs
counted code ~50x slower, so ``20`` and ``60`` sessions take about two minutes. The per-session
figure of two runs of the same code differs by ~1-3 % (48.06 and 49.29 M; 45.20 and 47.59 M, at
20 and 40, when the start-up was counted too).

Each text is one chunk by default (``chunk`` 1000): what a turn costs, its events and writes, its
steps, tools, sub-agent and live view. At 4-character chunks the count measures the timers more
than the code: callgrind slows the program ~50x while a step's flush timers keep real time, so a
step writes its parts in far more, smaller writes than it would (194 M instructions a session
against 48 M with one chunk a text, where on Ray a session's CPU is ~1.3x). The chunks' own cost
is ``bench shop --chunk``'s to measure.

Instructions are not time: a cache miss or a system call costs more than its count says, and
code that waits costs nothing. They answer whether a change made a session do less work.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from orchestrator.core.errors import UsageError

__all__ = ["InstructionFigures", "bench_instructions", "format_instructions", "parse_total"]

WARMUP = 5
"""Sessions run first in every measured process, before the ``low`` or ``high`` ones."""
CONTROL_TIMEOUT = 120.0
"""Seconds ``callgrind_control`` may take to turn a counted run's counting on (it takes well under one)."""
_WARM = b"warm: turn counting on"
"""What the counted process prints when its warm-up is done."""
_TOTAL = re.compile(r"^(?:summary|totals):\s*(\d+)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class InstructionFigures:
    """What ``bench_instructions`` counted."""

    low: int
    """Sessions in the smaller run."""
    high: int
    """Sessions in the larger run."""
    chunk: int
    """Characters per text chunk (1000 by default: each text one chunk; 4 is the workload compared with LangGraph)."""
    low_total: int
    """Instructions of the smaller run, from the end of its warm-up to the process's exit."""
    high_total: int
    """Instructions of the larger run, counted the same way."""

    @property
    def per_session(self) -> float:
        """Instructions one session (three turns, its sub-agent and its live view) adds."""
        return (self.high_total - self.low_total) / (self.high - self.low)

    @property
    def per_turn(self) -> float:
        """``per_session`` over its three turns."""
        return self.per_session / 3


def parse_total(callgrind_out: str) -> int:
    """The instruction count of a callgrind output file's text (its ``summary:`` or ``totals:`` line).

    Raises:
        UsageError: the text holds neither (not a callgrind output).
    """
    found = _TOTAL.search(callgrind_out)
    if found is None:
        raise UsageError("the callgrind output has no summary line: was it written by valgrind --tool=callgrind?")
    return int(found.group(1))


def bench_instructions(*, low: int = 20, high: int = 60, chunk: int = 1000) -> InstructionFigures:
    """Count the instructions of ``low`` and of ``high`` shop sessions, side by side under callgrind.

    Raises:
        UsageError: bad sizes, or valgrind is missing (with the fix), or a run failed (with its output).
    """
    if not 0 < low < high:
        raise UsageError(f"the sizes must be 0 < low < high, got low={low} and high={high}: e.g. --low 20 --high 40")
    if chunk < 1:
        raise UsageError(f"--chunk must be at least 1 character, got {chunk}")
    valgrind, control = shutil.which("valgrind"), shutil.which("callgrind_control")
    if valgrind is None or control is None:
        raise UsageError("bench instructions needs valgrind: apt-get install valgrind (or your system's package)")
    with tempfile.TemporaryDirectory(prefix="troupe-instructions-") as scratch:
        runs = []
        for sessions in (low, high):
            out, go = Path(scratch) / f"callgrind.{sessions}", Path(scratch) / f"go.{sessions}"
            command = [valgrind, "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
            command += [sys.executable, "-m", __name__, "--sessions", str(sessions), "--chunk", str(chunk)]
            command += ["--dir", scratch, "--go", str(go)]
            runs.append((out, go, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
        try:
            for _, go, run in runs:
                _count_from_here(run, go, control)
            totals = [_total(out, run) for out, _, run in runs]
        finally:
            for _, _, run in runs:
                if run.poll() is None:  # another run failed, or this one was interrupted
                    run.kill()
                    run.communicate()
    return InstructionFigures(low, high, chunk, totals[0], totals[1])


def _count_from_here(run: subprocess.Popen[bytes], go: Path, control: str) -> None:
    """Wait until ``run`` is warm, turn its counting on, and let it go on."""
    assert run.stdout is not None
    seen: list[bytes] = []
    while (line := run.stdout.readline()) and line.strip() != _WARM:
        seen.append(line)
    if not line:
        rest, _ = run.communicate()  # it ended: what is left of its output (and the pipe closes)
        _failed(run, b"".join(seen) + rest)
    try:
        turned = subprocess.run(
            [control, "--instr=on", str(run.pid)], capture_output=True, text=True, timeout=CONTROL_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        raise UsageError(
            f"callgrind_control did not turn counting on within {CONTROL_TIMEOUT:g} s: is the counted run "
            "stopped, or another callgrind_control waiting on it? Run the bench again."
        ) from None
    if turned.returncode != 0:
        raise UsageError(f"callgrind_control could not turn counting on: {(turned.stdout + turned.stderr).strip()}")
    go.touch()


def _total(out: Path, run: subprocess.Popen[bytes]) -> int:
    output, _ = run.communicate()
    if run.returncode != 0 or not out.exists():
        _failed(run, output)
    return parse_total(out.read_text(errors="replace"))


def _failed(run: subprocess.Popen[bytes], output: bytes) -> NoReturn:
    tail = output.decode(errors="replace")[-2000:]
    raise UsageError(f"a counted run failed (exit {run.returncode}); its last output:\n{tail}")


def format_instructions(figures: InstructionFigures) -> str:
    """The per-session figure and what it came from."""
    return (
        f"shop session (three turns, a sub-agent, a live view; chunks of {figures.chunk}), in one process: "
        f"{figures.per_session / 1e6:.2f} M instructions ({figures.per_turn / 1e6:.2f} M a turn), "
        f"from {figures.low} sessions ({figures.low_total / 1e9:.3f} G in all) "
        f"and {figures.high} ({figures.high_total / 1e9:.3f} G)"
    )


async def _workload(sessions: int, chunk: int, directory: str, go: Path) -> None:
    from actors.bench.shop import shop_agent, shop_session
    from actors.local import LocalRuntime

    store = f"sqlite:///{Path(directory) / f'shop-{sessions}.db'}?writer=inline"
    async with LocalRuntime(store=store) as runtime:
        agent = shop_agent(chunk)
        warm = [runtime.session(f"warm-{i}", agent=agent) for i in range(WARMUP)]
        await asyncio.gather(*(shop_session(s, [], chunk) for s in warm))
        sys.stdout.buffer.write(_WARM + b"\n")
        sys.stdout.flush()
        # Polled, not awaited on a pipe: callgrind takes its commands while the program runs, never
        # while it blocks in a read, and the parent writes only once the command is taken.
        while not go.exists():  # noqa: ASYNC110, ASYNC240 (a stat every 10 ms of an idle loop)
            await asyncio.sleep(0.01)
        measured = [runtime.session(f"shop-{i}", agent=agent) for i in range(sessions)]
        await asyncio.gather(*(shop_session(s, [], chunk) for s in measured))


def _main() -> None:
    """The counted process: ``python -m orchestrator.surfaces.bench.instructions --sessions N``."""
    from orchestrator.run.gc_tuning import tune_gc
    from orchestrator.surfaces.event_loop import run_async

    parser = argparse.ArgumentParser(description="The shop workload in one process, for callgrind to count.")
    parser.add_argument("--sessions", type=int, required=True)
    parser.add_argument("--chunk", type=int, required=True)  # bench_instructions always passes its own
    parser.add_argument("--dir", required=True)
    parser.add_argument("--go", type=Path, required=True, help="the file whose existence says counting is on")
    args = parser.parse_args()
    tune_gc()
    run_async(_workload(args.sessions, args.chunk, args.dir, args.go))  # on a host's loop (uvloop)


if __name__ == "__main__":
    _main()
