"""The optimistic ``LiveView`` on Ray: a send shows at once while the view lags its host, then the
accepted turn replaces it once (the same client code as on ``LocalRuntime``, over the poller)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from actors.client import Mutation
from actors.runtime import Runtime
from orchestrator.core.contract import Contract, Reducer
from orchestrator.core.events import Event
from orchestrator.run.agent import Agent
from orchestrator.testing import ScriptedModel

TIMEOUT = 60


class Noted(BaseModel):
    text: str


def notes(state: Mapping[str, Any], event: Event) -> Mapping[str, Any]:
    if event.type == "note.added":
        return {**state, "notes": [*state["notes"], event.payload["text"]]}
    return state


NOTES = Contract("notes-ray", {"note.added": Noted}, Reducer("notes-ray.v1", {"notes": []}, notes))


async def test_an_idle_send_shows_at_once_then_the_real_turn_replaces_it_on_ray(runtime: Runtime) -> None:
    session = runtime.session("live-1", agent=Agent("a", "x", ScriptedModel([[{"text": "Hello."}]]), contract=NOTES))
    live = await session.live()
    held, release = asyncio.Event(), asyncio.Event()

    async def hold(batch: list[Mutation]) -> None:  # the view lags its host until released
        held.set()
        await release.wait()

    live.listeners.append(hold)
    try:
        await session.push(("note.added", {"text": "hold here"}))
        await asyncio.wait_for(held.wait(), TIMEOUT)

        receipt = await live.send("hi", id="live-u-1")

        assert receipt.outcome == "applied"
        assert [m.id for m in live.state.messages] == ["live-u-1"] and live.state.starting
        assert [m.id for m in live.confirmed.messages] == []  # the host's turn is not seen yet
        live.listeners.remove(hold)
        release.set()
        state = await live.wait_state(lambda s: s.last_turn is not None and not live.pending, TIMEOUT)
        assert [m.text for m in state.messages] == ["hi", "Hello."]
        assert [m.id for m in state.messages].count("live-u-1") == 1 and not state.starting
    finally:
        release.set()
        await live.close()
