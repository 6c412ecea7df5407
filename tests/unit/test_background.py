"""``run_kept``: a task is held until it is done, then let go."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from orchestrator.run.background import run_kept


async def test_a_task_is_held_until_it_ends_then_dropped() -> None:
    tasks: set[asyncio.Future[Any]] = set()
    release = asyncio.Event()

    async def work() -> str:
        await release.wait()
        return "done"

    task = run_kept(tasks, work())
    del task
    gc.collect()  # the loop's own reference is weak: only the set keeps it alive
    (held,) = tasks
    assert not held.done()
    release.set()
    assert await held == "done"
    await asyncio.sleep(0)  # the done callback runs on the next turn of the loop
    assert tasks == set()


async def test_a_failed_or_cancelled_task_leaves_the_set_too() -> None:
    tasks: set[asyncio.Future[Any]] = set()

    async def fail() -> None:
        raise ValueError("boom")

    failed = run_kept(tasks, fail())
    blocked = run_kept(tasks, asyncio.Event().wait())
    assert len(tasks) == 2
    blocked.cancel()
    with pytest.raises(ValueError, match="boom"):
        await failed
    with pytest.raises(asyncio.CancelledError):
        await blocked
    await asyncio.sleep(0)
    assert tasks == set()


async def test_a_future_is_held_as_it_is() -> None:
    tasks: set[asyncio.Future[Any]] = set()
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    assert run_kept(tasks, future) is future
    future.set_result(1)
    await asyncio.sleep(0)
    assert tasks == set()
