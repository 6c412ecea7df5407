"""A contract's reducer sees every event, live and replayed alike (seed: "fold sees ... every event")."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from actors.local import LocalRuntime
from orchestrator.core.contract import Contract, Reducer
from orchestrator.core.events import Event
from orchestrator.core.fold import fold_events
from orchestrator.run.agent import Agent
from orchestrator.testing import ScriptedModel, eventually
from tools import tool

TIMEOUT = 10


class Flagged(BaseModel):
    ticket: str


def count_every_type(state: Mapping[str, Any], event: Event) -> Mapping[str, Any]:
    counts = dict(state["counts"])
    counts[event.type] = counts.get(event.type, 0) + 1
    return {**state, "counts": counts}


COUNTER = Contract("counter", {"ticket.flagged": Flagged}, Reducer("counter.v1", {"counts": {}}, count_every_type))


@tool
async def look(query: str) -> str:
    """Look something up."""
    return f"found {query}"


async def test_a_reducer_counting_every_event_type_agrees_live_replayed_and_refolded(rt: LocalRuntime) -> None:
    model = ScriptedModel([[{"tool": "look", "input": {"query": "mugs"}}], [{"text": "Two mugs.", "chunk": 3}]])
    session = rt.session("s-1", agent=Agent("a", "x", model, tools=[look], contract=COUNTER))
    seen: list[Mapping[str, Any]] = []
    subscription = session.subscribe()
    await subscription.ready()

    async def follow() -> None:
        async for mutation in subscription:
            if mutation.type == "app":
                seen.append(mutation["app"])

    follower = asyncio.ensure_future(follow())
    try:
        turn = await session.prompt("find mugs")
        result = await asyncio.wait_for(turn.finished, TIMEOUT)
        assert result.success
        await session.push(("ticket.flagged", {"ticket": "T-1"}))

        live = await session.state()
        replayed = await session.state(COUNTER.reducer)
        events = await rt.store.read("s-1")
        cold = fold_events(events, None, COUNTER).app
        counts = live.state.app["counts"]
        assert counts["ai.stream"] > 1 and counts["ai.turn.finished"] == 1 and counts["ticket.flagged"] == 1
        assert sum(counts.values()) == len(events) == live.index
        assert counts == replayed.state["counts"] == cold["counts"]
        await eventually(lambda: bool(seen) and seen[-1]["counts"] == counts, TIMEOUT, what="the app mutation")
    finally:
        subscription.close()
        await follower
