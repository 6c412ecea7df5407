"""Optimistic display in ``LiveView``: what it sends shows at once and gives way to the confirmed state.

Each test makes the view lag the server (``Lag``: a listener that holds the view's batches at a
gate), so what the view shows after a call returns is its optimistic copy, not yet the server's
state; then it lets the view catch up and checks the copy was replaced without a duplicate.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from pydantic import BaseModel

from actors.client import LiveView, Mutation, Session
from actors.local import LocalRuntime
from orchestrator.core.aistate import AIState
from orchestrator.core.commands import (
    EditInput,
    MoveInput,
    PauseSession,
    RemoveInput,
    SendInput,
    SendNow,
    StopTurn,
)
from orchestrator.core.contract import Contract, Reducer
from orchestrator.core.events import Event
from orchestrator.core.optimistic import optimistic, settled
from orchestrator.core.stream import TextDelta, ToolCall
from orchestrator.run.agent import Agent
from orchestrator.testing import Gate, ScriptedModel
from tests.fixtures.agents import GatedModel
from tools import tool

from .driver import Driver

TIMEOUT = 10


class Noted(BaseModel):
    text: str


def notes(state: Mapping[str, Any], event: Event) -> Mapping[str, Any]:
    if event.type == "note.added":
        return {**state, "notes": [*state["notes"], event.payload["text"]]}
    return state


NOTES = Contract("notes", {"note.added": Noted}, Reducer("notes.v1", {"notes": []}, notes))
"""An app event gives the view a batch to be held on that changes nothing else."""


GATES: list[Gate] = []
"""Every gate a test made: opened after it, so a failing test's held work cannot hang the teardown."""

VIEWS: list[LiveView] = []


@pytest.fixture(autouse=True)
async def _release(rt: LocalRuntime) -> AsyncIterator[None]:
    yield
    for gate in GATES:
        gate.open()
    for view in VIEWS:
        await view.close()
    GATES.clear()
    VIEWS.clear()


async def live_view(session: Session) -> LiveView:
    view = await session.live()
    VIEWS.append(view)
    return view


class Lag:
    """Holds the view's next batch (and every later one) until ``gate.open()``: the view lags."""

    def __init__(self, live: LiveView) -> None:
        self.gate = Gate()
        GATES.append(self.gate)
        live.listeners.append(self.hold)

    async def hold(self, batch: list[Mutation]) -> None:
        await self.gate.wait()


async def lagging(live: LiveView) -> Lag:
    """A lag the view is held in now (an app event's batch is the one it holds)."""
    lag = Lag(live)
    await live.session.push(("note.added", {"text": "hold here"}))
    await lag.gate.reached(TIMEOUT)
    return lag


def ids(state: AIState) -> list[str]:
    return [m.id for m in state.messages]


def queued(state: AIState) -> list[str]:
    return [i.id for i in state.inbox.items]


async def running(rt: LocalRuntime, name: str) -> tuple[LiveView, GatedModel]:
    """A live view on a session whose turn t1 is generating, held by its model."""
    model = GatedModel("Working.")
    GATES.append(model.gate)
    session = rt.session(name, agent=Agent("a", "x", model, contract=NOTES))
    live = await live_view(session)
    await session.send("hi", id="u-1")
    await model.gate.reached(TIMEOUT)
    await live.wait_state(lambda s: s.active is not None and s.active.phase == "generating", TIMEOUT)
    return live, model


# -- sends ---------------------------------------------------------------------------------------------


async def test_an_idle_send_shows_at_once_as_starting_and_the_real_turn_replaces_it(rt: LocalRuntime) -> None:
    session = rt.session("s-1", agent=Agent("a", "x", ScriptedModel([[{"text": "Hello."}]]), contract=NOTES))
    live = await live_view(session)
    lag = await lagging(live)

    receipt = await live.send("hi", id="u-1")

    assert receipt.outcome == "applied"
    assert ids(live.state) == ["u-1"] and live.state.starting
    assert live.state.active is not None and live.state.inbox.items == ()
    assert ids(live.confirmed) == [] and not live.confirmed.starting  # the server's turn is not seen yet
    assert [c.id for c in live.pending] == ["u-1"]
    lag.gate.open()
    state = await live.wait_state(lambda s: s.last_turn is not None and not live.pending, TIMEOUT)
    assert ids(state)[0] == "u-1" and ids(state).count("u-1") == 1
    assert [m.text for m in state.messages] == ["hi", "Hello."]
    assert not state.starting and state.last_turn == ("t1", "completed")


async def test_a_send_behind_an_active_turn_waits_in_the_inbox(rt: LocalRuntime) -> None:
    live, model = await running(rt, "s-1")
    lag = await lagging(live)

    await live.send("later", id="u-2")

    assert queued(live.state) == ["u-2"] and "u-2" not in ids(live.state)
    assert queued(live.confirmed) == []
    lag.gate.open()
    await live.wait_state(lambda s: not live.pending, TIMEOUT)
    assert queued(live.state) == queued(live.confirmed) == ["u-2"]
    model.gate.open()


async def test_a_send_while_paused_waits_in_the_inbox(rt: LocalRuntime) -> None:
    session = rt.session("s-1", agent=Agent("a", "x", ScriptedModel([]), contract=NOTES))
    live = await live_view(session)
    await session.pause()
    await live.wait_state(lambda s: s.inbox.paused, TIMEOUT)
    lag = await lagging(live)

    turn = await live.prompt("while paused", id="u-1")

    assert turn.receipt is not None and turn.receipt.outcome == "applied"
    assert queued(live.state) == ["u-1"] and ids(live.state) == [] and not live.state.starting
    assert live.state.active is None
    lag.gate.open()
    await live.wait_state(lambda s: not live.pending, TIMEOUT)
    assert queued(live.state) == ["u-1"] and ids(live.state) == []


# -- steering and send-now -----------------------------------------------------------------------------


async def test_steering_shows_after_the_current_response_and_stays_there_until_it_hands_off(
    rt: LocalRuntime,
) -> None:
    live, model = await running(rt, "s-1")
    reply = ids(live.state)[-1]
    lag = await lagging(live)

    await live.steer("faster", id="s-1")

    assert ids(live.state) == ["u-1", reply, "s-1"] and queued(live.state) == []
    assert ids(live.confirmed) == ["u-1", reply]
    lag.gate.open()
    await live.wait_state(lambda s: not live.pending, TIMEOUT)
    # Confirmed: waiting in the inbox for the handoff, and still drawn after the response.
    assert [(i.id, i.after_step_of) for i in live.confirmed.inbox.items] == [("s-1", "t1")]
    assert ids(live.state) == ["u-1", reply, "s-1"] and queued(live.state) == []
    model.gate.open()  # t1 finishes its response; the steering hands off as t2
    state = await live.wait_state(lambda s: s.last_turn == ("t2", "completed"), TIMEOUT)
    assert ids(state)[:3] == ["u-1", reply, "s-1"] and ids(state).count("s-1") == 1


async def test_send_now_shows_a_queued_input_after_the_current_response(rt: LocalRuntime) -> None:
    live, model = await running(rt, "s-1")
    reply = ids(live.state)[-1]
    await live.session.send("next", id="u-2")
    await live.wait_state(lambda s: queued(s) == ["u-2"], TIMEOUT)
    lag = await lagging(live)

    receipt = await live.queue.send_now("u-2")

    assert receipt.outcome == "applied"
    assert ids(live.state) == ["u-1", reply, "u-2"] and queued(live.state) == []
    assert queued(live.confirmed) == ["u-2"]  # still queued as the view last saw it
    lag.gate.open()
    await live.wait_state(lambda s: not live.pending, TIMEOUT)
    assert ids(live.state) == ["u-1", reply, "u-2"]
    assert [(i.id, i.after_step_of) for i in live.confirmed.inbox.items] == [("u-2", "t1")]
    model.gate.open()


# -- stop ------------------------------------------------------------------------------------------------


async def test_a_pending_stop_clears_the_active_turn_at_once(rt: LocalRuntime) -> None:
    live, _ = await running(rt, "s-1")
    lag = await lagging(live)

    result = await live.stop()

    assert result.receipt is not None and result.receipt.outcome == "applied"
    assert live.state.active is None
    assert live.confirmed.active is not None and live.confirmed.active.id == "t1"
    lag.gate.open()
    state = await live.wait_state(lambda s: not live.pending, TIMEOUT)
    assert state.active is None and state.last_turn == ("t1", "stopped")


# -- rejection -------------------------------------------------------------------------------------------


async def test_a_rejected_command_rolls_its_optimistic_effect_back(rt: LocalRuntime) -> None:
    session = rt.session("s-1", agent=Agent("a", "x", ScriptedModel([]), contract=NOTES))
    live = await live_view(session)
    await session.pause()
    await session.send("draft", id="u-1")
    await live.wait_state(lambda s: queued(s) == ["u-1"], TIMEOUT)
    lag = await lagging(live)
    await session.queue.remove("u-1")  # by another client: the lagging view still shows it queued
    hold = Gate()
    GATES.append(hold)
    call = rt.transport.call

    async def held(session_id: str, method: str, *args: Any) -> Any:
        if method == "command" and isinstance(args[-1], EditInput):
            await hold.wait()
        return await call(session_id, method, *args)

    rt.transport.call = held  # type: ignore[method-assign]
    editing = asyncio.ensure_future(live.queue.edit("u-1", "edited"))
    await live.wait_state(lambda s: [i.text for i in s.inbox.items] == ["edited"], TIMEOUT)
    assert [type(c) for c in live.pending] == [EditInput]
    hold.open()
    receipt = await asyncio.wait_for(editing, TIMEOUT)

    assert (receipt.outcome, receipt.reason) == ("rejected", "not-pending")
    assert live.pending == ()
    assert [i.text for i in live.state.inbox.items] == ["draft"]  # rolled back to what the view knows
    lag.gate.open()
    await live.wait_state(lambda s: queued(s) == [], TIMEOUT)


# -- the pure rules ----------------------------------------------------------------------------------------


def test_a_pending_send_the_state_already_holds_is_not_shown_twice() -> None:
    d = Driver()
    d.submit(SendInput("u-1", "hi"))
    d.submit(SendInput("u-2", "next"))
    state = optimistic(d.state, [SendInput("u-1", "hi"), SendInput("u-2", "next")])
    assert [m.id for m in state.messages] == ["u-1"] and [i.id for i in state.inbox.items] == ["u-2"]


def test_confirmed_steering_is_drawn_after_the_current_response() -> None:
    d = Driver()
    d.submit(SendInput("u-1", "hi"))
    d.step(TextDelta("Working."), ToolCall("c-1", "t", {}))
    d.submit(SendInput("s-1", "faster", steer="t1"))
    assert [i.id for i in d.state.inbox.items] == ["s-1"]
    shown = optimistic(d.state, [])
    assert [m.id for m in shown.messages][-1] == "s-1" and shown.inbox.items == ()


def test_settled_says_when_the_confirmed_state_shows_a_command() -> None:
    d = Driver()
    d.submit(PauseSession("p-1"))
    assert not settled(d.state, SendInput("u-1", "a"))
    d.submit(SendInput("u-1", "a"))
    d.submit(SendInput("u-2", "b"))
    assert settled(d.state, SendInput("u-1", "a")) and settled(d.state, PauseSession("p-2"))
    assert not settled(d.state, MoveInput("m-1", "u-1"))  # not at the end yet
    d.submit(MoveInput("m-1", "u-1"))
    assert settled(d.state, MoveInput("m-1", "u-1")) and settled(d.state, MoveInput("m-2", "u-2", "u-1"))
    assert not settled(d.state, EditInput("e-1", "u-1", "c")) and settled(d.state, EditInput("e-1", "u-1", "a"))
    assert not settled(d.state, RemoveInput("r-1", "u-1"))
    assert not settled(d.state, SendNow("n-1", "u-1"))  # not promoted to the front
    d.submit(SendNow("n-1", "u-1"))
    assert settled(d.state, SendNow("n-1", "u-1"))
    assert not settled(d.state, SendNow("n-2", "u-1", "t1"))  # not waiting on turn t1
    assert settled(d.state, StopTurn("x-1", "t1"))  # no turn is active


async def test_the_view_sees_another_clients_changes_in_its_confirmed_state(rt: LocalRuntime) -> None:
    session = rt.session("s-1", agent=Agent("a", "x", ScriptedModel([]), contract=NOTES))
    live = await live_view(session)
    await session.pause()
    await session.send("one", id="u-1")
    await session.push(("note.added", {"text": "n"}))
    state = await live.wait_state(lambda s: s.notes == ["n"], TIMEOUT)
    assert state.inbox.paused and queued(state) == ["u-1"] and live.pending == ()


async def test_a_denial_keeps_its_reason_in_the_confirmed_state() -> None:
    @tool(needs_approval=True)
    def place_order(item: str) -> str:
        """Place an order (asks first)."""
        return f"ordered {item}"

    script = ScriptedModel([[{"tool": "place_order", "input": {"item": "mug"}}], [{"text": "Ok."}]])
    async with LocalRuntime() as runtime:
        live = await live_view(runtime.session("s-deny", agent=Agent("a", "x", script, tools=[place_order])))
        await live.session.send("a mug, please", id="u-1")
        state = await live.wait_state(lambda s: any(i.status == "pending" for i in s.interactions.values()), TIMEOUT)
        pending = next(iter(state.interactions.values()))
        await live.session.respond(pending.id, approved=False, reason="too pricey")
        done = await live.wait_state(lambda s: s.interactions[pending.id].status == "denied", TIMEOUT)
        assert done.interactions[pending.id].reason == "too pricey"
        await live.close()
