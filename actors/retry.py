"""One retry loop for calls to actors that may be restarting or moving, each caller naming its schedule.

A call to a host that died raises one of ``ACTOR_ERRORS``; Ray restarts the host (or the
supervisor moves it), and every call Troupe makes to a host is idempotent, so the caller waits
and calls again. How long it waits between attempts, and how many it makes, depends on who is
waiting: a client's call gives a restarting host longer than a parent waiting on its sub-agent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from actors.options import ACTOR_ERRORS

__all__ = ["CHILD_CALL", "HOST_READY", "SESSION_CALL", "RetriesExhausted", "Schedule", "retry"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Schedule:
    """How many attempts, and the wait after a failed one: ``min(step * (offset + n // every), cap)``."""

    name: str
    """What is retried (for the error when the attempts run out)."""
    attempts: int
    """Attempts before giving up."""
    step: float
    """Seconds the wait grows by."""
    cap: float = 0.5
    """The longest wait, seconds."""
    every: int = 1
    """Attempts between two steps of the wait."""
    offset: int = 0
    """Steps the first wait already has."""

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (from 0)."""
        return min(self.step * (self.offset + attempt // self.every), self.cap)


SESSION_CALL = Schedule("a client's call to a session's host", attempts=200, step=0.02)
"""A client's call (``RayTransport.call``): up to 200 attempts, 20 ms more each time, at most 0.5 s."""
CHILD_CALL = Schedule("a parent's call to its sub-agent's host", attempts=100, step=0.05)
"""A parent's host calling its sub-agent's (``RayChildren``): 100 attempts, 50 ms more each time."""
HOST_READY = Schedule("waiting for a host to answer", attempts=400, step=0.05, every=20, offset=1)
"""Waiting for a restarting host (``Router.wait_ready``): 400 attempts, 50 ms more every 20, from 50 ms."""


class RetriesExhausted(Exception):
    """Every attempt of a schedule failed (the callers turn this into their own answer)."""

    def __init__(self, schedule: Schedule) -> None:
        super().__init__(schedule)
        self.schedule = schedule

    def __str__(self) -> str:
        return f"{self.schedule.name}: {self.schedule.attempts} attempts failed"


async def retry(
    attempt: Callable[[], Awaitable[T]],
    schedule: Schedule,
    *,
    recover: Callable[[Exception], Awaitable[bool]],
    also: tuple[type[Exception], ...] = (),
) -> T:
    """``attempt()`` until it returns, across actor failures (``ACTOR_ERRORS``) and ``also``.

    After a failure, ``recover(error)`` readies the next attempt (forget a placement, wait for a
    restart) and says whether to wait the schedule's delay first (``False``: call again at once,
    e.g. the session moved and the next attempt asks where it is now). Only for idempotent calls.

    Raises:
        RetriesExhausted: after ``schedule.attempts`` failed attempts.
    """
    for number in range(schedule.attempts):
        try:
            return await attempt()
        except (*ACTOR_ERRORS, *also) as error:
            if await recover(error):
                await asyncio.sleep(schedule.delay(number))
    raise RetriesExhausted(schedule)
