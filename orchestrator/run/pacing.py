"""How often a process writes its streams: a budget of stream writes per second, shared.

Every stream write (an ``ai.stream`` event) costs far more than the parts it carries: a fold, a
store row, the mutations for subscribers, and, for a sub-agent, a batch to its parent. A step
waits at most ``flush_every`` between two writes, which under light load keeps text moving
smoothly; but with hundreds of steps streaming in one process, writes at that pace would cost
more than the streams themselves. So the sessions of a process share a budget: with ``n`` steps
streaming and a budget of ``b`` writes per second, each step writes at most every ``n / b``
seconds. A step's first text still goes out after ``flush_interval``.
"""

from __future__ import annotations

__all__ = ["StreamPacer"]


class StreamPacer:
    """The stream-write budget of one process (a session host)."""

    def __init__(self, budget: float = 1000.0) -> None:
        if budget <= 0:
            raise ValueError(f"the stream write budget must be positive (writes per second), not {budget}")
        self.budget = budget
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
