"""How often a process writes its streams: a budget of stream writes per second, shared.

Every stream write (an ``ai.stream`` event) costs far more than the parts it carries: a fold, a
store row, the mutations for subscribers, and, for a sub-agent, a batch to its parent. A step
waits at most ``flush_every`` between two writes, which under light load keeps text moving
smoothly; but with hundreds of steps streaming in one process, writes at that pace would cost
more than the streams themselves. So the sessions of a process share a budget: with ``n`` steps
streaming and a budget of ``b`` writes per second, each step writes at most every ``n / b``
seconds. A turn's first text still goes out after ``flush_interval`` (``FIRST_FLUSH``: at once,
queued with its part); a later step's text keeps the pace from its first batch.

The steps' flush timers run on the pacer's ``Clock``: the running event loop's by default, a fake
one in tests, so that a test counts the writes a pace makes exactly rather than by real time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final, Protocol

__all__ = ["DEFAULT_BUDGET", "FIRST_FLUSH", "NESTED_DELAY", "Clock", "LoopClock", "StreamPacer", "Timer"]

DEFAULT_BUDGET: Final = 500.0
"""Stream writes per second a process's streaming steps share, unless told otherwise. With 10
steps streaming or fewer each still writes every 20 ms (``flush_every``); with 50, every 0.1 s.
Measured on the shop workload at N=100 (two hosts, 50 steps each), against 1000: 1.3x the
sessions/s at 4/5 of the CPU per chunk, the first text as soon; 300 and 250 gained little more."""

FIRST_FLUSH: Final = 0.0
"""Seconds the first stream part of a turn's first step waits before its batch is written (``flush_interval``):
none. The batch is queued with that part, so it joins the session's next write, often the one
right after the input's (``StepStream.put``); a timer of 0 s fired a turn of the loop later, and
under load a turn of a busy host's loop is several milliseconds. On the shop workload at N=100,
ten alternating pairs against the timer, in one process: the first text p50 38.9 ms against
44.6 (medians; lower in 8 pairs); on Ray (``bench shop``, ten pairs) 50.1 against 48.0, inside
the machine's swings. The later batches are paced as before, so a step writes no more often."""


NESTED_DELAY: Final = 0.01
"""Seconds a sub-agent's batch waits at least for company before its parent writes it
(``nested_delay``; under load the stream pace, ``StreamPacer.interval``). A call's first visible
part does not wait (``run/nested.py``)."""


class Timer(Protocol):
    """A callback scheduled on a ``Clock`` (``asyncio.TimerHandle`` is one)."""

    def cancel(self) -> None:
        """Do not call it (a no-op once it ran)."""
        ...


class Clock(Protocol):
    """The time stream timers are scheduled in."""

    def now(self) -> float:
        """Seconds on this clock's own scale (only differences mean anything)."""
        ...

    def call_later(self, delay: float, fn: Callable[[], None]) -> Timer:
        """Call ``fn`` (from the event loop) once ``delay`` seconds have passed on this clock."""
        ...


class LoopClock:
    """The running event loop's clock: the one every process uses outside tests."""

    def now(self) -> float:
        """The loop's monotonic time."""
        return asyncio.get_running_loop().time()

    def call_later(self, delay: float, fn: Callable[[], None]) -> asyncio.TimerHandle:
        """``loop.call_later`` on the running loop."""
        return asyncio.get_running_loop().call_later(delay, fn)


class StreamPacer:
    """The stream-write budget of one process (a session host), and the clock its steps' timers use."""

    def __init__(self, budget: float = DEFAULT_BUDGET, *, clock: Clock | None = None) -> None:
        if budget <= 0:
            raise ValueError(f"the stream write budget must be positive (writes per second), not {budget}")
        self.budget = budget
        self.clock: Clock = clock if clock is not None else LoopClock()
        """Where the flush timers of the steps sharing this budget run."""
        self.streaming = 0
        """Steps streaming now."""

    def enter(self) -> None:
        """A step started streaming."""
        self.streaming += 1

    def leave(self) -> None:
        """A step stopped streaming."""
        self.streaming -= 1

    def interval(self, floor: float) -> float:
        """Seconds a step waits between two writes now (at least ``floor``)."""
        return max(floor, self.streaming / self.budget)
