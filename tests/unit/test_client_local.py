"""The Session client API end to end over the in-process runtime (the same code the Ray runtime uses)."""

from __future__ import annotations

import asyncio
import copy
import itertools
import pickle
import weakref
from collections.abc import Mapping
from functools import partial
from typing import Any

import pytest
from pydantic import BaseModel

from actors.local import LocalRuntime
from actors.mutation import Mutation
from orchestrator.core.contract import Contract, Reducer
from orchestrator.core.errors import UsageError
from orchestrator.core.events import Event
from orchestrator.core.mutations import ClientView
from orchestrator.core.parts import ToolPart
from orchestrator.run.agent import Agent
from orchestrator.testing import ScriptedModel
from tools import tool

TIMEOUT = 10


@tool(needs_approval=True)
async def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


class Flagged(BaseModel):
    ticket: str


def flags(state: Mapping[str, Any], event: Event) -> Mapping[str, Any]:
    if event.type == "ticket.flagged":
        return {**state, "flagged": [*state["flagged"], event.payload["ticket"]]}
    return state


def agent(*steps: list[dict[str, Any]], per_turn: bool = True, **options: Any) -> Agent:
    return Agent("a", "x", ScriptedModel(list(steps), per_turn=per_turn), **options)


async def test_prompt_resolves_with_the_final_text_and_live_mirrors_the_state(rt: LocalRuntime) -> None:
    session = rt.session("s-1", agent=agent([{"text": "Hello there.", "chunk": 2}]))
    live = await session.live()
    turn = await session.prompt("hi")
    result = await asyncio.wait_for(turn.finished, TIMEOUT)
    assert (result.success, result.text, result.turn_id) == (True, "Hello there.", "t1")
    await live.wait_for(lambda v: v.index >= result.index, TIMEOUT)
    snapshot = await session.state()
    assert live.view.state == snapshot.state.session
    assert [m.text for m in await session.messages()] == ["hi", "Hello there."]
    await live.close()


async def test_subscribe_then_snapshot_drops_what_the_snapshot_holds(rt: LocalRuntime) -> None:
    session = rt.session("s-1", agent=agent([{"text": "one"}]))
    assert (await (await session.prompt("first")).finished).success
    subscription = session.subscribe()
    start = await subscription.ready()
    snapshot = await session.state()
    assert snapshot.index >= start
    view = ClientView.of(snapshot.state.session, snapshot.index)
    result = await (await session.prompt("second")).finished
    async for mutation in subscription:
        view.apply(mutation)
        if view.index >= result.index:
            break
    subscription.close()
    assert [m.text for m in view.state.messages] == ["first", "one", "second", "one"]


async def test_send_queues_behind_the_active_turn_and_info_shows_it(rt: LocalRuntime) -> None:
    session = rt.session(
        "s-1", agent=agent([{"tool": "delete_file", "input": {"path": "a"}}], [{"text": "ok"}], tools=[delete_file])
    )
    first = await session.prompt("delete a")
    await session.send("and b", id="u-2")
    info = await session.info()
    assert [q["id"] for q in info["queued"]] == ["u-2"]
    assert info["executing"] is True
    edit = await session.queue.edit("u-2", "and c")
    assert edit.outcome == "applied"
    assert (await session.queue.remove("nope")).reason == "not-pending"
    stopped = await session.stop(cancel_queued=True)
    assert stopped.cancelled_queued_prompts == 1
    assert (await first.finished).outcome == "stopped"


async def test_approve_and_deny_through_respond(rt: LocalRuntime) -> None:
    session = rt.session(
        "s-1", agent=agent([{"tool": "delete_file", "input": {"path": "a"}}], [{"text": "done"}], tools=[delete_file])
    )
    turn = await session.prompt("delete a")
    live = await session.live()
    await live.wait_for(
        lambda v: any(
            isinstance(p, ToolPart) and p.state == "awaiting-confirmation" for m in v.state.messages for p in m.parts
        ),
        TIMEOUT,
    )
    interactions = (await session.state()).state.interactions
    (pending,) = [i for i in interactions.values() if i.status == "pending"]
    assert (await session.respond(pending.id, True)).outcome == "applied"
    assert (await turn.finished).text == "done"
    await live.close()


async def test_steer_hands_off_and_retry_resumes(rt: LocalRuntime) -> None:
    session = rt.session(
        "s-1",
        agent=agent([{"tool": "delete_file", "input": {"path": "a"}}], [{"text": "steered"}], tools=[delete_file]),
    )
    turn = await session.prompt("delete a")
    live = await session.live()
    await live.wait_for(lambda v: any(isinstance(p, ToolPart) for m in v.state.messages for p in m.parts), TIMEOUT)
    receipt = await session.steer("never mind")
    assert receipt.outcome == "applied"
    assert (await turn.finished).outcome == "handed-off"
    await live.close()


async def test_pause_after_turn_and_resume(rt: LocalRuntime) -> None:
    session = rt.session("s-1", agent=agent([{"text": "hi"}]))
    await session.pause("after-turn")
    turn = await session.prompt("hello")
    info = await session.info()
    assert info["paused"] is True and [q["text"] for q in info["queued"]] == ["hello"]
    await session.resume()
    assert (await asyncio.wait_for(turn.finished, TIMEOUT)).success


async def test_push_app_events_and_read_the_merged_state(rt: LocalRuntime) -> None:
    contract = Contract("desk", {"ticket.flagged": Flagged}, Reducer("desk.v1", {"flagged": []}, flags))
    session = rt.session("s-1", agent=agent([{"text": "hi"}], contract=contract))
    index = await session.push(("ticket.flagged", {"ticket": "T-1"}))
    snapshot = await session.state()
    assert snapshot.index == index and snapshot.state.flagged == ["T-1"]
    with pytest.raises(UsageError, match="built-in"):
        await session.push(("ai.turn.stop", {}))


async def test_an_identical_resubmission_replays_its_receipt(rt: LocalRuntime) -> None:
    session = rt.session("s-1", agent=agent([{"text": "hi"}]))
    first = await session.send("hello", id="u-1")
    again = await session.send("hello", id="u-1")
    assert first == again
    assert [m.text for m in await session.messages()].count("hello") == 1


def test_session_ids_with_a_slash_are_refused() -> None:
    with pytest.raises(UsageError, match="'/'"):
        LocalRuntime().session("a/b", agent=agent([{"text": "x"}]))


async def test_a_turn_awaited_after_the_session_was_deactivated_still_resolves(rt: LocalRuntime) -> None:
    session = rt.session("s-1", agent=agent([{"text": "hi"}]))
    turn = await session.prompt("hello")
    other = await session.prompt("again")
    assert (await other.finished).success
    assert rt.host is not None
    await rt.host.deactivate_idle()
    result = await asyncio.wait_for(turn.finished, TIMEOUT)  # looked up in the log
    assert (result.success, result.text, result.turn_id) == (True, "hi", "t1")


async def test_a_view_subscribes_with_its_snapshot_in_one_call_once_the_poller_is_known(rt: LocalRuntime) -> None:
    model = agent([{"text": "one"}], [{"text": "two", "chunk": 1}])
    first, second = rt.session("s-1", agent=model), rt.session("s-2", agent=model)
    # The first subscription of this process registers its poller with the host through a poll.
    subscription, snapshot = await first.subscribe_and_snapshot()
    assert snapshot is None
    await subscription.ready(TIMEOUT)
    assert (await (await second.prompt("b")).finished).success
    # Then the host registers a subscription together with the snapshot it starts after.
    follow, at = await second.subscribe_and_snapshot()
    assert at is not None and at.index == (await second.state()).index > 0
    turn = await second.prompt("c")
    result = await asyncio.wait_for(turn.finished, TIMEOUT)
    view = ClientView.of(at.state.session, at.index)
    while view.index < result.index:
        for mutation in await asyncio.wait_for(follow.next_batch(), TIMEOUT) or []:
            assert mutation.index > at.index  # nothing the snapshot already holds
            view.apply(mutation)
    assert view.state == (await second.state()).state.session
    # A session this process already follows subscribes through the poll, as before.
    again, none = await second.subscribe_and_snapshot()
    assert none is None and await again.ready(TIMEOUT) >= result.index
    for sub in (subscription, follow, again):
        sub.close()


async def test_a_view_keeps_no_batch_once_it_has_applied_it(rt: LocalRuntime) -> None:
    # Held while the view waits for the next one, each session's last batch (a turn's end is a
    # few KB) would stay in memory as long as the view is open: thousands of views, megabytes.
    agent = Agent("batches", "x", ScriptedModel([[{"text": "hello there", "chunk": 2}]], per_turn=True))
    session = rt.session("s-batches", agent=agent)
    view = await session.live()
    taken: list[weakref.ref[list[Mutation]]] = []

    def take(batch: list[Mutation]) -> None:
        taken.append(weakref.ref(batch))

    view.listeners.append(take)
    for prompt in ("hi", "again"):
        result = await (await session.prompt(prompt)).finished
        await view.wait_for(partial(reached, index=result.index), timeout=TIMEOUT)
    assert view.state.messages[-1].text == "hello there"
    assert len(taken) >= 2 and [ref() for ref in taken] == [None] * len(taken)
    await view.close()


def reached(view: Any, index: int) -> bool:
    return bool(view.index >= index)


async def test_a_turn_change_and_the_info_that_repeats_it_share_one_turn_on_the_wire(rt: LocalRuntime) -> None:
    session = rt.session("s-shared", agent=agent([{"text": "hi there", "chunk": 3}]))
    subscription = session.subscribe()
    await subscription.ready(TIMEOUT)
    result = await (await session.prompt("hi")).finished
    pairs = []
    while True:
        batch = await subscription.next_batch(timeout=TIMEOUT)
        assert batch is not None
        for turn, info in itertools.pairwise(batch):
            if turn.type == "turn" and info.type == "info":
                pairs.append((turn, info))
        if getattr(batch, "cursor", -1) >= result.index:
            break
    assert len(pairs) >= 2  # the turn started, and ended
    for turn, info in pairs:
        assert turn["turn"] == info["info"]["turn"] and turn["lastTurn"] == info["info"]["lastTurn"]
        assert turn["turn"] is info["info"]["turn"]  # one object: a poll reply pickles it once
        once = len(pickle.dumps([dict(turn), dict(info)]))
        twice = len(pickle.dumps([dict(turn), copy.deepcopy(dict(info))]))
        assert once < twice
    subscription.close()


async def test_a_view_whose_poller_was_not_seen_for_a_while_catches_up_through_the_snapshot(
    rt: LocalRuntime,
) -> None:
    # The host keeps a session's mutations only while a poller was seen within interest_seconds
    # (30 s). A client that stalled that long must not miss the appends made meanwhile: its
    # next poll brings a reset, and the view re-reads the snapshot.
    steps = ([{"text": "first answer", "chunk": 2}], [{"text": "second", "chunk": 2}])
    session = rt.session("s-stalled", agent=agent(*steps, per_turn=False))
    view = await session.live()
    first = await (await session.prompt("one")).finished
    await view.wait_for(partial(reached, index=first.index), timeout=TIMEOUT)
    assert rt.host is not None
    for poller in rt.host.hub._pollers.values():
        # As if this client had not polled for a minute (the sweep not yet run): no poll of it
        # waits at the host either (a waiting poll is interest, however old).
        poller.seen -= 60
        poller.waiting = False
    second = await (await session.prompt("two")).finished
    await view.wait_for(partial(reached, index=second.index), timeout=TIMEOUT)
    assert [m.text for m in view.state.messages] == ["one", "first answer", "two", "second"]
    assert view.view.state == (await session.state()).state.session
    await view.close()


async def test_a_live_view_applies_each_batch_as_it_comes_and_keeps_no_task(rt: LocalRuntime) -> None:
    # A view used to keep a task (and its coroutines, an async generator and a future) waiting on
    # its subscription's queue, where a batch waited until that task ran: about 1.4 KB per view,
    # and every view's last batch at a run's peak. The poller now hands it the batch.
    session = rt.session("s-pushed", agent=agent([{"text": "Pushed along.", "chunk": 3}]))
    view = await session.live()
    seen: list[int] = []
    view.listeners.append(lambda batch: seen.append(len(batch)))
    result = await (await session.prompt("go")).finished
    await view.wait_for(partial(reached, index=result.index), timeout=TIMEOUT)
    assert view.running and view._task is None and seen
    assert view._subscription is not None and view._subscription.queue.empty()  # type: ignore[attr-defined]
    assert [m.text for m in view.state.messages] == ["go", "Pushed along."]
    await view.close()
    assert (view.running, view.listeners) == (False, [])


async def test_batches_that_come_while_an_async_listener_awaits_are_applied_after_it_in_order(
    rt: LocalRuntime,
) -> None:
    session = rt.session("s-slow-listener", agent=agent([{"text": "One two three four.", "chunk": 2}]))
    view = await session.live()
    gate = asyncio.Event()
    told: list[tuple[str, int]] = []

    async def slow(batch: list[Mutation]) -> None:
        told.append(("slow", view.view.index))
        await gate.wait()

    view.listeners.append(slow)
    view.listeners.append(lambda batch: told.append(("after", view.view.index)))
    result = await (await session.prompt("go")).finished
    await asyncio.sleep(0.05)
    held = view.view.index
    assert held < result.index and told == [("slow", held)]  # the rest waits behind the slow listener
    gate.set()
    await view.wait_for(partial(reached, index=result.index), timeout=TIMEOUT)
    assert told[1] == ("after", held) and [kind for kind, _ in told[::2]] == ["slow"] * (len(told) // 2)
    indexes = [index for _, index in told]
    assert indexes == sorted(indexes)
    assert view.view.state == (await session.state()).state.session
    await view.close()


async def test_a_listener_that_raises_stops_its_view_only_and_close_raises_it(rt: LocalRuntime) -> None:
    session = rt.session("s-bad-listener", agent=agent([{"text": "Still here.", "chunk": 2}]))
    broken, healthy = await session.live(), await session.live()

    def bad(batch: list[Mutation]) -> None:
        raise RuntimeError("listener bug")

    broken.listeners.append(bad)
    result = await (await session.prompt("go")).finished
    await healthy.wait_for(partial(reached, index=result.index), timeout=TIMEOUT)
    assert not broken.running and healthy.running
    assert [m.text for m in healthy.state.messages] == ["go", "Still here."]
    with pytest.raises(RuntimeError, match="listener bug"):
        await broken.close()
    await healthy.close()
