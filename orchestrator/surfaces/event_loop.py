"""The event loop a command's process runs in: uvloop's when it is installed.

Every ``troupe`` command, the servers and the benchmarks' own processes start their loop here,
so a client, a server and a counted workload all run on the loop a host has.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["loop_runner", "run_async"]

_T = TypeVar("_T")


def loop_runner() -> asyncio.Runner:
    """Uvloop's loop when it is installed, else the default one (Windows).

    uvloop's sockets, timers and callbacks are C. A command's process is a client of the hosts
    (``troupe run``, the benchmarks) or a server: under 500 SSE streams the default loop spent a
    fifth of the server's time in its transports' ``write``.
    """
    try:
        import uvloop
    except ImportError:  # a platform without it (Windows): the default loop
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


def run_async(main: Coroutine[Any, Any, _T]) -> _T:
    """``asyncio.run`` on ``loop_runner``'s loop."""
    with loop_runner() as runner:
        return runner.run(main)
