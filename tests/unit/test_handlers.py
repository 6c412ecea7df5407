"""App-event handlers: after the event is durable, at least once, never again once finished."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from actors.local import LocalRuntime
from orchestrator import HandlerContext
from orchestrator.core import event_types as ai
from orchestrator.core.contract import Contract, Reducer
from orchestrator.core.errors import ConfigError, UsageError
from orchestrator.core.events import Event
from orchestrator.core.ids import idempotent_id
from orchestrator.core.snapshot import decode_state, encode_state
from orchestrator.run.agent import Agent
from orchestrator.store.base import EventStore
from orchestrator.surfaces.config import load_agent
from orchestrator.testing import Gate, ScriptedModel, eventually

TIMEOUT = 10


class Flagged(BaseModel):
    ticket: str


def flags(state: Mapping[str, Any], event: Event) -> Mapping[str, Any]:
    if event.type == "ticket.flagged":
        return {**state, "flagged": [*state["flagged"], event.payload["ticket"]]}
    return state


DESK = Contract("desk", {"ticket.flagged": Flagged}, Reducer("desk.v1", {"flagged": []}, flags))


def desk_agent(handler: Any) -> Agent:
    model = ScriptedModel([[{"text": "On it."}]], per_turn=True)
    return Agent("desk", "x", model, contract=DESK, handlers={"ticket.flagged": handler})


async def finished(store: EventStore, session_id: str, count: int = 1) -> list[Event]:
    async def read() -> list[Event] | None:
        events = [e for e in await store.read(session_id) if e.type == ai.HANDLER_FINISHED]
        return events if len(events) >= count else None

    found: list[Event] | None = await eventually(read, TIMEOUT, what="ai.handler.finished")
    assert found is not None
    return found


async def test_a_handler_runs_once_after_the_event_is_durable_and_can_write_to_the_session(
    rt: LocalRuntime,
) -> None:
    seen: list[HandlerContext] = []

    async def on_flagged(context: HandlerContext) -> None:
        stored = await rt.store.read(context.session_id)
        assert any(e.id == context.event.id for e in stored)  # durable before the handler runs
        seen.append(context)
        message = idempotent_id("desk", context.session_id, context.event.id)
        await context.send(f"Ticket {context.event.payload['ticket']} was flagged.", id=message)

    session = rt.session("s-1", agent=desk_agent(on_flagged))
    await session.push(Event("evt-1", "ticket.flagged", {"ticket": "T-1"}))
    (done,) = await finished(rt.store, "s-1")
    assert done.payload == {"eventId": "evt-1", "outcome": "completed"}
    (context,) = seen
    assert (context.session_id, context.event.id, context.event.type) == ("s-1", "evt-1", "ticket.flagged")
    assert context.state.app["flagged"] == ["T-1"]

    async def answered() -> bool:
        return [m.text for m in await session.messages()] == ["Ticket T-1 was flagged.", "On it."]

    done_answering: bool = await eventually(answered, TIMEOUT, what="the handler's input was answered")
    assert done_answering
    assert (await session.state()).state.due_handlers == {}
    assert rt.host is not None
    await rt.host.deactivate_idle()  # activating again runs nothing that finished
    assert (await session.state()).state.due_handlers == {}
    assert len(seen) == 1


async def test_a_failing_handler_is_recorded_and_does_not_fail_the_turn(rt: LocalRuntime) -> None:
    async def broken(context: HandlerContext) -> None:
        raise RuntimeError("the pager is down")

    session = rt.session("s-1", agent=desk_agent(broken))
    turn = await session.prompt("hello")
    await session.push(("ticket.flagged", {"ticket": "T-1"}))
    assert (await asyncio.wait_for(turn.finished, TIMEOUT)).success
    (done,) = await finished(rt.store, "s-1")
    assert (done.payload["outcome"], done.payload["error"]) == ("failed", "the pager is down")
    assert (await session.state()).state.due_handlers == {}


async def test_a_crash_mid_handler_runs_it_again_with_the_same_event_id(tmp_path: Path) -> None:
    gate, runs = Gate(), list[str]()

    async def on_flagged(context: HandlerContext) -> None:
        runs.append(context.event.id)
        if len(runs) == 1:
            await gate.wait()  # the process dies here

    url = f"sqlite:///{tmp_path / 'troupe.db'}"
    first = LocalRuntime(url)
    await first.start()
    await first.session("s-1", agent=desk_agent(on_flagged)).push(Event("evt-1", "ticket.flagged", {"ticket": "T"}))
    await gate.reached()
    await first.close()
    for _ in range(2):  # the first activation runs it again; the second finds it finished
        again = LocalRuntime(url)
        await again.start()
        try:
            session = again.session("s-1", agent=desk_agent(on_flagged))
            await session.state()
            (done,) = await finished(again.store, "s-1")
            assert done.payload["outcome"] == "completed"
        finally:
            await again.close()
    assert runs == ["evt-1", "evt-1"]


def test_handlers_are_checked_when_the_agent_is_made() -> None:
    def sync(context: HandlerContext) -> None:
        return None

    async def fine(context: HandlerContext) -> None:
        return None

    model = ScriptedModel([[{"text": "x"}]])
    with pytest.raises(UsageError, match="must be an async function"):
        Agent("a", "x", model, handlers={"ticket.flagged": sync})  # type: ignore[dict-item]
    with pytest.raises(UsageError, match="never a built-in"):
        Agent("a", "x", model, handlers={"ai.turn.finished": fine})
    with pytest.raises(UsageError, match="no such event type"):
        Agent("a", "x", model, contract=DESK, handlers={"ticket.closed": fine})


async def notify(context: HandlerContext) -> None:
    """A handler a config names by import path."""


def sync_notify(context: HandlerContext) -> None:
    """Not a handler: handlers are async."""


def test_a_config_names_handlers_by_import_path(tmp_path: Path) -> None:
    def load(handlers: str) -> Agent:
        path = tmp_path / "troupe.yaml"
        path.write_text(f"agents:\n  desk:\n    model: {{scripted: [[{{text: Hi}}]]}}\n    handlers: {handlers}\n")
        return load_agent(path, env={})

    agent = load("{ticket.flagged: 'tests.unit.test_handlers:notify'}")
    assert agent.handlers == {"ticket.flagged": notify}
    with pytest.raises(ConfigError, match="must be an async function"):
        load("{ticket.flagged: 'tests.unit.test_handlers:sync_notify'}")
    with pytest.raises(ConfigError, match="has no attribute 'notfy'"):
        load("{ticket.flagged: 'tests.unit.test_handlers:notfy'}")
    with pytest.raises(ConfigError, match="handlers must map app event types"):
        load("[notify]")


async def test_a_running_handler_keeps_its_session_active_and_a_snapshot_keeps_it_due(rt: LocalRuntime) -> None:
    gate = Gate()

    async def slow(context: HandlerContext) -> None:
        await gate.wait()

    session = rt.session("s-1", agent=desk_agent(slow))
    await session.push(Event("evt-1", "ticket.flagged", {"ticket": "T-1"}))
    await gate.reached()
    assert rt.host is not None
    assert await rt.host.deactivate_idle() == 0  # idle would cut the handler off
    state = (await session.state()).state
    decoded = decode_state(encode_state(state))
    assert decoded is not None and decoded.due_handlers == state.due_handlers
    assert list(state.due_handlers) == ["evt-1"]
    gate.open()
    await finished(rt.store, "s-1")
    host = rt.host
    deactivated: int = await eventually(host.deactivate_idle, TIMEOUT, what="the session deactivated once idle")
    assert deactivated == 1
