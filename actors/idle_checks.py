"""``IdleChecks``: when a host next looks at each of its sessions for quiet, on one loop timer.

A host deactivates a session after ``idle_timeout`` of quiet (``SessionHost.touch``). A loop
timer per session is about 0.3 KB (a uvloop handle and its arguments), for each of the thousands
of sessions and sub-agents a host holds; here a host keeps one heap of (due, session id) and one
timer, for the earliest. An entry whose session has been rescheduled or has left since is skipped
when it comes due (``due`` no longer names it), and such entries are dropped in one pass once they
are most of the heap, as asyncio does with cancelled timers.
"""

from __future__ import annotations

import asyncio
import heapq
import math
from collections.abc import Callable

__all__ = ["EARLY", "IdleChecks"]

EARLY = 0.001
"""Seconds by which an entry may come due early (a loop's timers have a resolution of their own)."""


class IdleChecks:
    """Due idle checks of one host's sessions (see the module docstring)."""

    def __init__(self, check: Callable[[str], None], due: Callable[[str], float | None]) -> None:
        """``check(session_id)`` runs when a session's check is due; ``due(session_id)`` is its current one."""
        self._check = check
        self._due = due
        self._heap: list[tuple[float, str]] = []
        self._stale = 0
        """Entries known to be skipped when they come due."""
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    def __len__(self) -> int:
        return len(self._heap)

    def at(self, when: float, session_id: str) -> None:
        """Check ``session_id`` at ``when`` (the loop's clock); the caller records ``when`` as its due."""
        heapq.heappush(self._heap, (when, session_id))
        if when < self._timer_at:
            self._arm(when)

    def dropped(self) -> None:
        """An entry no longer counts (its session was rescheduled sooner, or left)."""
        self._stale += 1
        heap = self._heap
        if self._stale > 64 and 2 * self._stale > len(heap):
            due = self._due
            self._heap = [(when, sid) for when, sid in heap if due(sid) == when]
            heapq.heapify(self._heap)
            self._stale = 0

    def close(self) -> None:
        """Check nothing more."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, math.inf
        self._heap.clear()
        self._stale = 0

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_at(when, self._fire)
        self._timer_at = when

    def _fire(self) -> None:
        self._timer, self._timer_at = None, math.inf
        heap, due = self._heap, self._due
        now = asyncio.get_running_loop().time() + EARLY
        ready: list[str] = []
        while heap and heap[0][0] <= now:
            when, session_id = heapq.heappop(heap)
            if due(session_id) == when:
                ready.append(session_id)
            elif self._stale:
                self._stale -= 1
        for session_id in ready:  # a check may schedule again (``at``): for later, never this pass
            self._check(session_id)
        if heap and heap[0][0] < self._timer_at:
            self._arm(heap[0][0])
