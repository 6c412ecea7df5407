"""``troupe bench shop --profile``: where one text chunk's CPU goes, stage by stage.

One more run at each N, kept out of the figures, under py-spy: the driver, every host and the
supervisor are sampled (``--gil``: only while Python holds the interpreter lock, so a thread
waiting in C is not counted), and each stage's share of a process kind's samples, times that
kind's CPU µs per chunk in the same run (``ShopRun.cpu_split_us``, read from ``/proc``), is the
stage's µs per chunk. Ray's own processes (the raylet, the GCS: C++) are one row.

Ray's C++ threads inside the sampled processes (the core worker's I/O, gRPC's pollers) never
run Python, so py-spy never samples them; spread by the Python stages' shares, their CPU (a
quarter of the driver's) would land in the client's and the loop's rows. Their CPU is read apart,
thread by thread (``psutil``, from ``/proc``) over the profiled run (a thread is Python's if ``py-spy dump``
lists it at the start or the end), and is a row of its own: ``Ray: its threads in our processes``.

A sample counts to the innermost frame that belongs to a stage (``stage_of``): C code (uvloop,
SQLite, msgpack) counts to the Python frame that called it, and frames that belong to their
caller (dataclasses' generated ``__init__``, ``typing.cast``, ``functools.partial``) pass it on.
The two biases: C code that releases the lock (SQLite's statements) is not sampled, so its CPU
is spread over the stages by their shares; and py-spy itself takes CPU from the run (its
figures are not the bench's, only its shares are used).

py-spy comes with ``pip install -e '.[dev]'``; attaching to a process needs root or
``kernel.yama.ptrace_scope=0`` on Linux.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

import psutil

from orchestrator.core.errors import UsageError

__all__ = ["STAGES", "Profile", "Profiler", "format_profile", "stage_of", "stages_of"]

STAGES: Final[tuple[tuple[str, str], ...]] = (
    ("bench: sessions, checks, memory", r"actors/bench/"),
    ("client: live views", r"actors/(live|client|live_sessions|mutation)\.py"),
    ("mutation diff", r"orchestrator/core/mutations\.py"),
    (
        "sub-agent batches",
        r"orchestrator/run/(nested|children|inprocess)\.py|actors/(subagents|children|batch_sender)\.py",
    ),
    (
        "fold and reducer",
        r"orchestrator/run/log\.py|orchestrator/core/(fold/|reducer|_hotpath|_pvec|_rope|parts|aistate|state|actions"
        r"|plan|buffer|_fast|stream)",
    ),
    ("runner and steps", r"orchestrator/run/"),
    ("store append", r"orchestrator/store/|orchestrator/core/(wire|_wire_fields)\.py|^msgpack/|^zlib|^sqlite3/"),
    ("event payloads and ids", r"orchestrator/core/"),
    ("hub and long poll", r"actors/(hub|poller|transport|store_feed)\.py"),
    ("model (scripted)", r"orchestrator/models/"),
    ("tools", r"^tools/"),
    (
        "Ray: calls, (de)serialisation",
        r"^ray/|cloudpickle|pickle|actors/(ray_transport|ray_cluster|outbox|router|runtime|dedicated)\.py",
    ),
    ("host shell", r"^actors/"),
    ("event loop and threads", r"^asyncio/|^threading\.py|^concurrent/|^selectors\.py|^queue\.py|uvloop"),
)
"""Each stage and the source paths that belong to it; the first that matches wins."""

_RULES: Final = tuple((name, re.compile(pattern)) for name, pattern in STAGES)
_PASS: Final = re.compile(
    r"^<string>$|^typing\.py$|^dataclasses\.py$|^functools\.py$|^contextlib\.py$|^<frozen |^abc\.py$"
    r"|^_weakrefset\.py$|^weakref\.py$|^enum\.py$|^copy\.py$"
)
"""Frames that belong to their caller (generated dataclass code, typing, functools, ...)."""
_PATH: Final = re.compile(r"\(([^()]*):\d+\)$")
_CLIENT_SIDE: Final = "client: live views"
RAY_THREADS: Final = "Ray: its threads in our processes"
"""The row of the CPU that the sampled processes spent in threads that never run Python."""
_THREAD: Final = re.compile(r"^Thread (\d+)", re.MULTILINE)


def stage_of(frame: str, kind: str) -> str | None:
    """The stage of one py-spy frame (``function (path:line)``), or ``None`` to ask its caller.

    ``kind`` is the process's (``driver``, ``hosts``, ``supervisor``): the mutation code a host
    runs diffs states, the driver's applies them to its live views.
    """
    found = _PATH.search(frame)
    path = found.group(1) if found else frame
    if _PASS.search(path):
        return None
    for name, rule in _RULES:
        if rule.search(path):
            return _CLIENT_SIDE if name == "mutation diff" and kind == "driver" else name
    return None


def stages_of(raw: Iterable[str], kind: str) -> Counter[str]:
    """Samples by stage from py-spy's ``--format raw`` lines (``frame;frame;... count``).

    Samples taken while a module was being imported (start-up) are left out; a stack with no
    frame (C code of a thread, holding the lock) counts to the event loop and threads.
    """
    out: Counter[str] = Counter()
    for line in raw:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not count.isdigit() or "importlib" in stack:
            continue
        frames = stack.split(";")
        if frames == [""]:
            found: str | None = "event loop and threads"
        else:
            found = next((s for s in (stage_of(f, kind) for f in reversed(frames)) if s is not None), None)
        out[found or "other"] += int(count)
    return out


@dataclass(frozen=True)
class Profile:
    """One profiled run: where its CPU went, and its CPU with and without py-spy's own."""

    stages: dict[str, dict[str, float]]
    """CPU µs per chunk by stage, then process kind (``Profiler.table``)."""
    chunk_us: float
    """The run's CPU µs per chunk, py-spy's own left out."""
    spy_us: float
    """py-spy's own CPU µs per chunk."""


class Profiler:
    """py-spy on a set of processes, from ``start`` until ``stop`` (see the module docstring)."""

    def __init__(self, pids: Mapping[str, Sequence[int]], rate: int = 1000) -> None:
        """``pids``: the processes to sample, by kind (``driver``, ``hosts``, ``supervisor``)."""
        self.pids = pids
        self.rate = rate
        self._dir = Path(tempfile.mkdtemp(prefix="troupe-profile-"))
        self._spies: list[subprocess.Popen[bytes]] = []
        self._logs: list[IO[bytes]] = []
        self.samples: dict[str, Counter[str]] = {}
        self.native: dict[str, float] = {}
        """Per kind: the share of its CPU spent in threads that never run Python (``RAY_THREADS``)."""
        self._python: dict[int, set[int]] = {}
        self._cpu: dict[int, dict[int, float]] = {}
        self._spy = ""

    @staticmethod
    def executable() -> str:
        """The py-spy to run (beside this Python first).

        Raises:
            UsageError: there is none, with the fix.
        """
        beside = Path(sys.executable).parent / "py-spy"  # the venv's bin, not the interpreter it links to
        if beside.is_file():
            return str(beside)
        found = shutil.which("py-spy")
        if found is None:
            raise UsageError("--profile needs py-spy: pip install -e '.[dev]' (or pip install py-spy)")
        return found

    def start(self) -> None:
        """Start one sampler per process (after noting its threads)."""
        spy = self._spy = self.executable()
        for kind, pids in self.pids.items():
            for pid in pids:
                self._python[pid] = python_threads(spy, pid)
                self._cpu[pid] = thread_cpu(pid)
                out = self._dir / f"{kind}-{pid}.txt"
                command = [spy, "record", "--pid", str(pid), "--gil", "--nonblocking", "--rate", str(self.rate)]
                command += ["--format", "raw", "--output", str(out)]
                log = (self._dir / f"{kind}-{pid}.log").open("wb")
                self._logs.append(log)
                self._spies.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))

    def stop(self, timeout: float = 30.0) -> dict[str, Counter[str]]:
        """Stop the samplers (each writes its samples on SIGINT); samples by kind, then stage.

        Raises:
            UsageError: no sampler wrote anything (py-spy could not attach), with its message.
        """
        self.native = self._native_shares()
        for spy in self._spies:
            if spy.poll() is None:
                spy.send_signal(signal.SIGINT)
        for spy in self._spies:
            try:
                spy.wait(timeout)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait(timeout)
        for log in self._logs:
            log.close()
        try:
            for kind in self.pids:
                counts: Counter[str] = Counter()
                for path in self._dir.glob(f"{kind}-*.txt"):
                    with path.open() as raw:
                        counts += stages_of(raw, kind)
                self.samples[kind] = counts
            if not any(self.samples.values()):
                logs = " ".join(p.read_text(errors="replace")[-300:] for p in self._dir.glob("*.log"))
                raise UsageError(
                    "py-spy wrote no samples; attaching needs root or kernel.yama.ptrace_scope=0 "
                    f"(py-spy said: {logs.strip() or 'nothing'})"
                )
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)
        return self.samples

    def _native_shares(self) -> dict[str, float]:
        """Per kind, the share of its threads' CPU since ``start`` that went to threads without Python."""
        shares: dict[str, float] = {}
        for kind, pids in self.pids.items():
            native = every = 0.0
            for pid in pids:
                python = self._python.get(pid, set()) | python_threads(self._spy, pid)
                before = self._cpu.get(pid, {})
                for tid, cpu in thread_cpu(pid).items():
                    spent = cpu - before.get(tid, 0.0)
                    every += spent
                    if python and tid not in python:  # no thread list (py-spy could not attach): all Python
                        native += spent
            shares[kind] = native / every if every > 0 else 0.0
        return shares

    def table(self, split: Mapping[str, float]) -> dict[str, dict[str, float]]:
        """µs per chunk by stage, then process kind: each kind's CPU split by its samples' stages.

        ``split``: the run's CPU µs per chunk by process kind (``ShopRun.cpu_split_us``); Ray's own
        processes (``ray``, ``other``) are not sampled and count to Ray's row, a sampled kind's
        threads without Python (``native``) to ``RAY_THREADS``, a sampled kind with no sample to
        ``other``, and py-spy's own (``profiler``) to none: the rows add up to the run's CPU
        without py-spy.
        """
        out: dict[str, dict[str, float]] = {}
        for kind, counts in self.samples.items():
            cpu = split.get(kind, 0.0)
            native = cpu * self.native.get(kind, 0.0)
            if native:
                out.setdefault(RAY_THREADS, {})[kind] = native
            python = cpu - native
            total = sum(counts.values())
            for stage, count in counts.items():
                out.setdefault(stage, {})[kind] = python * count / total
            if not total and python:  # never held the lock while sampled (an idle supervisor)
                out.setdefault("other", {})[kind] = python
        ray_own = split.get("ray", 0.0) + split.get("other", 0.0)
        if ray_own:
            out.setdefault("Ray: calls, (de)serialisation", {})["ray"] = ray_own
        return out


def python_threads(spy: str, pid: int) -> set[int]:
    """The native ids of ``pid``'s threads that run Python (``py-spy dump``); empty if it cannot tell."""
    try:
        dump = subprocess.run(
            [spy, "dump", "--pid", str(pid), "--nonblocking"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return {int(tid) for tid in _THREAD.findall(dump.stdout)}


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user and system) of each live thread of ``pid`` by its native id; empty when it is gone."""
    try:
        threads = psutil.Process(pid).threads()
    except psutil.Error:
        return {}
    return {thread.id: thread.user_time + thread.system_time for thread in threads}


def format_profile(n: int, profile: Profile) -> str:
    """The profile as the README shows it: µs per chunk by stage and process kind, biggest first."""
    kinds = ("hosts", "driver", "supervisor", "ray")
    rows = sorted(profile.stages.items(), key=lambda item: -sum(item[1].values()))
    lines = [
        f"N={n}, one more run under py-spy --gil: {profile.chunk_us:.1f} CPU µs per text chunk (py-spy's own "
        f"{profile.spy_us:.1f} left out), by stage and process:",
        f"{'stage':34} " + " ".join(f"{k:>10}" for k in kinds) + f" {'all':>8}",
    ]
    totals = dict.fromkeys(kinds, 0.0)
    for stage, by_kind in rows:
        for k in kinds:
            totals[k] += by_kind.get(k, 0.0)
        cells = " ".join(f"{by_kind.get(k, 0.0):>10.1f}" for k in kinds)
        lines.append(f"{stage:34} {cells} {sum(by_kind.values()):>8.1f}")
    lines.append(f"{'total':34} " + " ".join(f"{totals[k]:>10.1f}" for k in kinds) + f" {sum(totals.values()):>8.1f}")
    return "\n".join(lines)
