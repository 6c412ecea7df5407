"""Dedicated placement under more sessions than the pool may hold: they wait their turn, never overflow it."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.errors import DedicatedFull
from actors.runtime import Runtime
from orchestrator.run.agent import Agent
from tests.fixtures.agents import delegating

from .helpers import Gate, gated_model
from .test_runtime import assert_nested_two_levels

TIMEOUT = 120


def dedicated_actors(namespace: str) -> int:
    """The dedicated host actors alive in ``namespace`` now, as Ray's registry of named actors lists them."""
    named: list[dict[str, str]] = ray.util.list_named_actors(all_namespaces=True)
    return sum(1 for a in named if a["namespace"] == namespace and a["name"].startswith("troupe-dedicated-"))


@pytest.mark.slow
async def test_more_sessions_than_the_pool_holds_all_finish_and_the_pool_never_overflows(tmp_path: Path) -> None:
    namespace = f"ded-{uuid.uuid4().hex[:8]}"
    rt = Runtime(store=f"sqlite:///{tmp_path / 'd.db'}", namespace=namespace, placement="dedicated", max_dedicated=3)
    await rt.start()
    seen: list[int] = []
    done = asyncio.Event()

    async def watch() -> None:  # Ray's own count of the actors, all along (the pool keeps its exact peak)
        while not done.is_set():
            seen.append(dedicated_actors(namespace))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), 0.05)

    watcher = asyncio.ensure_future(watch())
    try:
        agent = delegating()  # every session delegates two levels deep: sub-agents need actors too
        sessions = [rt.session(f"many-{i}", agent=agent) for i in range(8)]

        async def one(session: Any) -> Any:
            return await asyncio.wait_for((await session.prompt("compare")).finished, TIMEOUT)

        results = await asyncio.gather(*(one(s) for s in sessions))
        assert all(r.success for r in results), [r.error for r in results if not r.success]
        for s in sessions:
            assert_nested_two_levels((await s.state()).state.messages)
        info: dict[str, Any] = await rt.supervisor.info.remote()
        stats = info["dedicated"]
        assert stats["max"] == 3 and stats["peak"] <= 3, stats
        assert stats["waited"] >= 5, stats  # 8 sessions, 3 actors: the rest waited their turn
        assert stats["refused"] == 0 and stats["waiting"] == 0, stats
        done.set()
        await watcher
        assert seen and max(seen) <= 3, max(seen)
    finally:
        done.set()
        await watcher
        await rt.close()


@pytest.mark.slow
async def test_a_session_that_waits_past_the_limit_gets_one_clear_error(tmp_path: Path) -> None:
    rt = Runtime(
        store=f"sqlite:///{tmp_path / 'd.db'}",
        namespace=f"ded-{uuid.uuid4().hex[:8]}",
        placement="dedicated",
        max_dedicated=1,
        dedicated_wait=0.5,
        warm=0,
    )
    await rt.start()
    gate = Gate.remote()
    try:
        busy = rt.session("busy", agent=Agent("a", "x", gated_model(gate, "released")))
        turn = await busy.prompt("hold the only actor")
        await asyncio.wait_for(gate.wait_reached.remote(), TIMEOUT)
        other = rt.session("other", agent=delegating())
        with pytest.raises(DedicatedFull) as caught:
            await other.prompt("no room")
        error = caught.value
        assert type(error) is DedicatedFull  # not Ray's wrapper with the supervisor's traceback
        assert "Traceback" not in str(error)
        for named in ("'other'", "max_dedicated", "dedicated_wait", "placement='pooled'"):
            assert named in str(error)
        assert await rt.store.read("other", after=0) == []  # nothing was written for it
        await gate.open.remote()
        assert (await asyncio.wait_for(turn.finished, TIMEOUT)).success
        info: dict[str, Any] = await rt.supervisor.info.remote()
        assert info["dedicated"]["refused"] == 1
    finally:
        await rt.close()
