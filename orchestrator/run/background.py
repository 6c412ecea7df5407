"""``run_kept``: work started on its own, held until it is done.

The event loop keeps only a weak reference to a task, so a task nobody holds may be collected
before it finishes (asyncio's documentation says to keep a reference). The engine and the actors
start such work in several places (a session's background steps, a host's deactivations, the
supervisor's requests for spare workers, a host's first call to a host it meets): each holds its
tasks in a set of its own, and a task leaves the set as it ends, so a finished task is not kept.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

__all__ = ["run_kept"]

T = TypeVar("T")


def run_kept(tasks: set[asyncio.Future[Any]], work: Awaitable[T]) -> asyncio.Future[T]:
    """``work`` as a task (a future stays as it is) held in ``tasks`` until it is done."""
    task = asyncio.ensure_future(work)
    tasks.add(task)
    task.add_done_callback(tasks.discard)
    return task
