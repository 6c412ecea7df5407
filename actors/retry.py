"""One retry loop for calls to actors that may be restarting or moving, each caller naming its schedule.

A call to a host that died raises one of ``ACTOR_ERRORS``; Ray restarts the host (or the
supervisor moves it), and every call Troupe makes to a host is idempotent, so the caller waits
and calls again. How long it waits between attempts, and how many it makes, depends on who is
waiting: a client's call gives a restarting host longer than a parent waiting on its sub-agent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from actors.options import ACTOR_ERRORS
from actors.schedules import CHILD_CALL, HOST_READY, MCP_RESTART, SESSION_CALL, Schedule

__all__ = ["CHILD_CALL", "HOST_READY", "MCP_RESTART", "SESSION_CALL", "RetriesExhausted", "Schedule", "retry"]

T = TypeVar("T")


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
