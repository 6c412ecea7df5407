"""``troupe bench long``: the CPU a turn costs as one conversation grows to thousands of turns.

An agent that works for hours (a coding agent, a research loop) runs thousands of turns and tool
calls in one session. Whatever a turn does once per message or once per tool call of the whole
conversation makes each turn dearer than the last, and such costs hide in benchmarks of short
sessions. This runs ``sessions`` conversations of ``turns`` turns each in this process, on the
embedded SQLite store (where the log and its snapshots really are written), and reports the CPU
per turn in windows of ``window`` turns: flat is the goal; ``growth`` is the last window over the
first (target at most 1.5x, as ``bench reducer``'s 10,000-message slowdown). Beside it, the longest
the event loop stood still in each window: every session of a process waits while one callback
runs, and what a long conversation does in one piece (its snapshot, once encoded on the loop) grows
with it.

Each turn is the same scripted exchange: a text and a tool call, then a text, so every turn adds
two messages and one tool record. At the end it also encodes one session's state once more, the
work a snapshot does (``SessionLog.snapshot_gap`` spaces them; a state this large is encoded on the
off-loop thread, ``orchestrator.run.off_loop``), and times that session's deactivation and
reopening (an idle session's next command waits for it).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.client import Session
from actors.local import LocalRuntime
from orchestrator.core.snapshot import encode_state
from orchestrator.models.scripted import ScriptedModel
from orchestrator.run.agent import Agent
from orchestrator.run.gc_tuning import tune_gc
from tools.builtin import add_to_cart

__all__ = ["GROWTH_TARGET", "LongFigures", "bench_long", "format_long_bench"]

GROWTH_TARGET = 1.5
"""The last window's CPU per turn over the first's, at most."""


@dataclass(frozen=True, slots=True)
class LongFigures:
    """What ``bench_long`` measured."""

    sessions: int
    """Conversations run side by side."""
    turns: int
    """Turns in each."""
    window: int
    """Turns per window."""
    ms_per_turn: list[float] = field(default_factory=list)
    """CPU ms per turn (this process, every thread: the loop and the store's writer), by window."""
    stall_ms: list[float] = field(default_factory=list)
    """The longest the event loop went without a turn, by window, in ms: while one callback runs
    (a snapshot encoded on the loop, say), every session of the process waits."""
    messages: int = 0
    """Messages in one conversation at the end."""
    snapshot_kb: float = 0.0
    """One conversation's state at the end, encoded as a snapshot, in KB."""
    snapshot_ms: float = 0.0
    """The time that encoding took, in ms (measured here on the loop; a session does it off the loop)."""
    reopen_ms: float = 0.0
    """One conversation deactivated (as an idle one is) and opened again: its snapshot read and
    decoded, the events after it folded, in ms."""

    @property
    def growth(self) -> float:
        """The last window's CPU per turn over the first's."""
        first, last = self.ms_per_turn[0], self.ms_per_turn[-1]
        return last / first if first > 0 else 0.0


def _agent() -> Agent:
    script: list[list[dict[str, Any]]] = [
        [{"text": "Adding it to your cart now.", "chunk": 4}, {"tool": "add_to_cart", "input": {"slug": "mug"}}],
        [{"text": "Done: one more mug in your cart.", "chunk": 4}, {"finish": "stop"}],
    ]
    return Agent("long", "You keep a cart.", ScriptedModel(script, per_turn=True), tools=[add_to_cart])


class _Stalls:
    """The longest gap between two turns of the loop, measured by a task that wakes every ``TICK``."""

    TICK = 0.001

    def __init__(self) -> None:
        self.longest = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(self.TICK)
            now = loop.time()
            self.longest = max(self.longest, now - last - self.TICK)
            last = now

    def __enter__(self) -> _Stalls:
        self._task = asyncio.get_running_loop().create_task(self._watch())
        return self

    def __exit__(self, *_: object) -> None:
        if self._task is not None:
            self._task.cancel()

    def take(self) -> float:
        """The longest gap since the last ``take``, in ms."""
        longest, self.longest = self.longest, 0.0
        return round(longest * 1e3, 1)


async def _run(directory: Path, sessions: int, turns: int, window: int) -> LongFigures:
    tune_gc()  # as a host does: a full collection of a large heap is a cost of its own, not the turn's
    agent = _agent()
    async with LocalRuntime(store=f"sqlite:///{directory / 'long.db'}") as runtime:
        warm = runtime.session("long-warm", agent=agent)
        for i in range(5):
            await (await warm.prompt(f"warm {i}")).finished
        handles = [runtime.session(f"long-{i}", agent=agent) for i in range(sessions)]

        async def turn(handle: Session, k: int) -> None:
            reply = await (await handle.prompt(f"one more mug ({k})")).finished
            if not reply.success:
                raise AssertionError(f"turn {k} of {handle.id} failed: {reply}")

        per_window, stalls = [], []
        with _Stalls() as watch:
            for start in range(0, turns, window):
                count = min(window, turns - start)
                cpu = time.process_time()
                watch.take()
                for k in range(start, start + count):
                    await asyncio.gather(*(turn(h, k) for h in handles))
                per_window.append(round((time.process_time() - cpu) / count / sessions * 1e3, 3))
                stalls.append(watch.take())
        state = (await handles[0].state()).state
        began = time.perf_counter()
        blob = encode_state(state)
        encode_ms = (time.perf_counter() - began) * 1e3
        host = runtime.host
        assert host is not None
        await host.deactivate(handles[0].id)
        began = time.perf_counter()
        reopened = (await handles[0].state()).state
        reopen_ms = (time.perf_counter() - began) * 1e3
        if reopened != state:
            raise AssertionError(f"{handles[0].id} reopened to another state than it closed with")
    return LongFigures(
        sessions,
        turns,
        window,
        per_window,
        stalls,
        len(state.messages),
        round(len(blob) / 1024, 1),
        round(encode_ms, 2),
        round(reopen_ms, 2),
    )


def bench_long(*, sessions: int = 4, turns: int = 2000, window: int = 250) -> LongFigures:
    """Run ``sessions`` conversations of ``turns`` turns; CPU per turn by windows of ``window``."""
    with tempfile.TemporaryDirectory(prefix="troupe-long-") as directory:
        return asyncio.run(_run(Path(directory), sessions, turns, max(1, min(window, turns))))


def format_long_bench(figures: LongFigures) -> str:
    """The windows as a table, then the growth against its target and the final snapshot."""
    lines = [
        f"{figures.sessions} conversations of {figures.turns} turns (a text and a tool call, then a text), "
        "SQLite, this process",
        f"{'turns':>13} {'CPU ms/turn':>12} {'longest loop stall ms':>22}",
    ]
    for i, (ms, stall) in enumerate(zip(figures.ms_per_turn, figures.stall_ms, strict=True)):
        first = i * figures.window
        last = min(first + figures.window, figures.turns)
        lines.append(f"{f'{first + 1}-{last}':>13} {ms:>12.2f} {stall:>22.1f}")
    verdict = "met" if figures.growth <= GROWTH_TARGET else "NOT met"
    lines.append(f"growth, last window / first: {figures.growth:.2f}x (target <= {GROWTH_TARGET}x: {verdict})")
    lines.append(
        f"at the end: {figures.messages:,} messages in a conversation; its snapshot "
        f"{figures.snapshot_kb:,.1f} KB, encoded in {figures.snapshot_ms:.1f} ms; "
        f"closed and opened again in {figures.reopen_ms:.1f} ms"
    )
    return "\n".join(lines)
