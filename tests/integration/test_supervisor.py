"""The supervisor: rebuilding its directory after it dies, and dedicated placement's warm pool."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.runtime import Runtime
from orchestrator.run.agent import Agent
from orchestrator.testing import eventually
from tests.fixtures.agents import delegating

from .conftest import ON_EVERY_STORE
from .helpers import Gate, gated_model
from .test_runtime import assert_nested_two_levels

TIMEOUT = 60


@pytest.mark.slow
async def test_a_restarted_supervisor_rebuilds_its_directory_from_the_hosts(runtime: Runtime) -> None:
    gate = Gate.remote()
    agent = delegating(pricer_model=gated_model(gate, "Mugs cost 4.99."))
    session = runtime.session("tree", agent=agent)
    turn = await session.prompt("compare")
    await asyncio.wait_for(gate.wait_reached.remote(), TIMEOUT)

    async def whole_tree() -> list[str] | None:  # the hosts report activations in debounced writes
        tree: list[str] = await runtime.supervisor.tree.remote(session.id)
        return tree if len(tree) == 3 else None

    before = await eventually(whole_tree, TIMEOUT, interval=0.05, what="the supervisor knows the tree of three")
    ray.kill(runtime.supervisor, no_restart=False)

    async def rebuilt() -> bool:  # calls made while it restarts wait for it; then it rebuilds by itself
        try:
            return bool(await runtime.supervisor.tree.remote(session.id) == before)
        except ray.exceptions.RayActorError:
            return False

    await eventually(rebuilt, TIMEOUT, interval=0.05, what="the restarted supervisor rebuilt its directory")
    # It still works the tree: pause now reaches the sub-agents it rediscovered.
    await session.pause("now")
    await gate.open.remote()
    await session.resume()
    assert (await asyncio.wait_for(turn.finished, TIMEOUT)).success


@ON_EVERY_STORE
@pytest.mark.slow
async def test_a_killed_host_is_recovered_and_its_session_streams_again(runtime: Runtime) -> None:
    gate = Gate.remote()
    agent = Agent("a", "x", gated_model(gate, "after the crash"))
    session = runtime.session("recovered", agent=agent)
    turn = await session.prompt("go")
    await asyncio.wait_for(gate.wait_reached.remote(), TIMEOUT)
    host = runtime.router.host(await runtime.router.place(session.id))
    await gate.open.remote()
    ray.kill(host, no_restart=False)
    result = await asyncio.wait_for(turn.finished, TIMEOUT)
    assert result.success and result.text.endswith("after the crash")

    async def recovered() -> dict[str, Any] | None:  # the supervisor saw it too
        info: dict[str, Any] = await runtime.supervisor.info.remote()
        return info if info["recoveries"] else None

    info = await eventually(recovered, TIMEOUT, interval=0.05, what="the supervisor noticed the host's death")
    assert info["recoveries"][-1]["seconds"] < 10


@pytest.mark.slow
async def test_dedicated_placement_gives_every_session_its_own_actor(tmp_path: Path) -> None:
    rt = Runtime(store=f"sqlite:///{tmp_path / 'd.db'}", namespace=f"d-{uuid.uuid4().hex[:8]}", placement="dedicated")
    await rt.start()
    try:
        agent = delegating()
        sessions = [rt.session(f"ded-{i}", agent=agent) for i in range(3)]
        results = await asyncio.gather(*[(await s.prompt("compare")).finished for s in sessions])
        assert all(r.success for r in results)
        for s in sessions:
            assert_nested_two_levels((await s.state()).state.messages)
        owners = {s.id: await rt.router.place(s.id) for s in sessions}
        assert len(set(owners.values())) == 3  # one actor each

        async def refilled() -> dict[str, Any] | None:
            info: dict[str, Any] = await rt.supervisor.info.remote()
            return info if info["pool"] >= 1 else None

        info = await eventually(refilled, TIMEOUT, interval=0.05, what="the warm pool refilled")
        assert info["placement"] == "dedicated"
        # A second turn on the same session goes to the same actor.
        again = await (await sessions[0].prompt("and again")).finished
        assert again.success and await rt.router.place(sessions[0].id) == owners[sessions[0].id]
    finally:
        await rt.close()
