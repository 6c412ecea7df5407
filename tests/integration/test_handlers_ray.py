"""App-event handlers on Ray: a host killed mid-handler runs it again, once more, and records it once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import ray

from actors.runtime import Runtime
from orchestrator import HandlerContext
from orchestrator.core import event_types as ai
from orchestrator.core.events import Event
from orchestrator.run.agent import Agent
from orchestrator.testing import ScriptedModel, eventually

from .conftest import ON_EVERY_STORE
from .helpers import Gate

TIMEOUT = 30


def handled_agent(gate: Any) -> Agent:
    async def on_flagged(context: HandlerContext) -> None:
        await gate.arrive.remote()  # the first run waits here while its host is killed

    return Agent("desk", "x", ScriptedModel([[{"text": "ok"}]], per_turn=True), handlers={"ticket.flagged": on_flagged})


@ON_EVERY_STORE
@pytest.mark.slow
async def test_a_host_killed_mid_handler_runs_it_again_and_records_it_once(runtime: Runtime) -> None:
    gate = Gate.remote()
    session = runtime.session("handled", agent=handled_agent(gate))
    await session.push(Event("evt-1", "ticket.flagged", {"ticket": "T-1"}))
    assert await asyncio.wait_for(gate.wait_reached.remote(), TIMEOUT) == 1
    host = runtime.router.host(await runtime.router.place(session.id))
    ray.kill(host, no_restart=False)

    async def ran_again() -> bool:
        count: int = await gate.count.remote()
        return count >= 2

    again: bool = await eventually(ran_again, TIMEOUT, what="the handler ran again after the host restarted")
    assert again
    await gate.open.remote()

    async def finished() -> list[Event]:
        return [e for e in await runtime.store.read(session.id) if e.type == ai.HANDLER_FINISHED]

    records: list[Event] = await eventually(finished, TIMEOUT, what="ai.handler.finished")
    (done,) = records
    assert done.payload == {"eventId": "evt-1", "outcome": "completed"}
    assert (await session.state()).state.due_handlers == {}
    assert await gate.count.remote() == 2
