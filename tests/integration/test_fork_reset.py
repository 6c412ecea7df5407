"""``Session.fork`` and ``Session.reset`` on the Ray runtime (hosts in their own processes)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from actors.client import Turn
from actors.runtime import Runtime
from orchestrator.core import event_types as ai
from orchestrator.core.fold import INTERRUPTED
from orchestrator.core.ids import child_session_id
from orchestrator.core.parts import ToolPart
from orchestrator.run.agent import Agent
from orchestrator.testing import ScriptedModel
from tests.fixtures.agents import delegating

from .helpers import Gate, count_lines, crashing_tool

TIMEOUT = 60


def calls(messages: Any) -> list[ToolPart]:
    return [p for m in messages for p in m.parts if isinstance(p, ToolPart)]


async def test_a_fork_mid_report_tool_recovers_without_running_it_again_and_reset_stops_the_source(
    runtime: Runtime, tmp_path: Path, store_url: str
) -> None:
    gate, marker = Gate.remote(), tmp_path / "runs"
    charge = crashing_tool("charge_card", str(marker), recovery="report", mode="gate", store_url=store_url, gate=gate)
    agent = Agent(
        "a", "x", ScriptedModel([[{"tool": "charge_card", "input": {}}], [{"text": "Done."}]]), tools=[charge]
    )
    source = runtime.session("pay", agent=agent)
    turn = await source.prompt("pay")
    await asyncio.wait_for(gate.wait_reached.remote(), TIMEOUT)
    at = (await source.state()).index  # the call has started and not finished

    fork = await source.fork(at=at, id="pay-fork")

    recovered = await asyncio.wait_for(Turn(fork, turn.id, None).finished, TIMEOUT)
    assert (recovered.outcome, recovered.text) == ("completed", "Done.")
    part = calls((await fork.state()).state.messages)[0]
    assert (part.state, part.error) == ("error", INTERRUPTED)

    await source.reset()
    assert (await asyncio.wait_for(turn.finished, TIMEOUT)).outcome == "stopped"
    assert list((await source.state()).state.messages) == []
    await gate.open.remote()
    assert count_lines(marker) == 1  # ran once, in the source, across the fork and the reset
    assert [e.type for e in await runtime.store.read("pay")].count(ai.SESSION_RESET) == 1


async def test_a_fork_of_a_delegating_session_carries_its_sub_agents(runtime: Runtime) -> None:
    source = runtime.session("shop", agent=delegating())
    assert (await asyncio.wait_for((await source.prompt("compare")).finished, TIMEOUT)).success
    at = (await source.state()).index

    fork = await source.fork(at=at, id="shop-fork")

    assert (await fork.state()).state == (await source.state(through=at)).state
    research = next(p for p in calls((await fork.state()).state.messages) if p.name == "delegate_to_researcher")
    child = child_session_id("shop-fork", research.id)
    assert await runtime.store.last_index(child) == await runtime.store.last_index(
        child_session_id("shop", research.id)
    )
    assert [s.session_id for s in await runtime.store.list_sessions(prefix=f"{child}/")]  # the grandchild too
    result = await asyncio.wait_for((await fork.prompt("again")).finished, TIMEOUT)
    assert result.success and result.turn_id == "t2"
