"""``Turn.finished`` rides the subscription polls: no long-held call per turn, and it follows restarts."""

from __future__ import annotations

import asyncio
from typing import Any

from actors.hub import MutationHub, WaitFailed
from actors.local import LocalRuntime
from orchestrator.run.agent import Agent
from orchestrator.testing import ScriptedModel, eventually
from tests.fixtures.agents import GatedModel

TIMEOUT = 10


def agent() -> Agent:
    return Agent("a", "x", ScriptedModel([[{"text": "Done.", "chunk": 2}]], per_turn=True))


def record_calls(rt: LocalRuntime) -> list[str]:
    """The transport methods the client calls (polls are counted apart)."""
    calls: list[str] = []
    transport = rt.transport
    call, poll = transport.call, transport.poll

    async def counted_call(session_id: str, method: str, *args: Any) -> Any:
        calls.append(method)
        return await call(session_id, method, *args)

    async def counted_poll(*args: Any) -> Any:
        calls.append("poll")
        return await poll(*args)

    transport.call = counted_call  # type: ignore[method-assign]
    transport.poll = counted_poll  # type: ignore[method-assign,assignment]
    return calls


async def test_many_turns_finish_through_the_polls_without_a_call_each(rt: LocalRuntime) -> None:
    calls = record_calls(rt)
    sessions = [rt.session(f"s-{i}", agent=agent()) for i in range(20)]
    turns = [await s.prompt("hi") for s in sessions]
    results = await asyncio.wait_for(asyncio.gather(*(t.finished for t in turns)), TIMEOUT)
    assert all(r.success and r.text == "Done." for r in results)
    assert "wait_input" not in calls
    assert calls.count("command") == 20
    assert calls.count("poll") < 20  # the waits shared polls
    assert rt.host is not None and rt.host.held()["turn_watches"] == 0  # nothing left waiting on the host


async def test_a_late_waiter_still_learns_how_the_turn_ended(rt: LocalRuntime) -> None:
    session = rt.session("late", agent=agent())
    turn = await session.prompt("hi")
    assert rt.host is not None
    await rt.host.hosted["late"].runner.wait_for(lambda s: s.last_turn is not None, TIMEOUT)
    result = await asyncio.wait_for(turn.finished, TIMEOUT)
    assert (result.outcome, result.text) == ("completed", "Done.")


async def held_turn(rt: LocalRuntime, session_id: str) -> tuple[GatedModel, asyncio.Future[Any]]:
    """A turn that runs until the test opens its model's gate, and a client waiting on it through the polls."""
    assert rt.host is not None
    model = GatedModel(after="Held.", first_only=True, name="held")
    session = rt.session(session_id, agent=Agent("held", "x", model))
    waiting = (await session.prompt("hi")).finished
    await model.gate.reached(TIMEOUT)
    await eventually(lambda: rt.host is not None and rt.host.held()["turn_watches"] == 1, TIMEOUT, what="a watch")
    return model, waiting


async def test_a_waited_turn_keeps_its_session_active_and_costs_no_task(rt: LocalRuntime) -> None:
    assert rt.host is not None
    host = rt.host
    model, waiting = await held_turn(rt, "kept")
    hosted = host.hosted["kept"]
    assert hosted.busy == 1  # the idle timer leaves the session in memory while a client waits on it
    assert hosted.runner._waiters == 0  # a callback on the ledger: nothing woken by each write
    assert await host.deactivate_idle() == 0
    model.gate.open()
    result = await asyncio.wait_for(waiting, TIMEOUT)
    assert (result.outcome, result.text) == ("completed", "Held.")
    assert hosted.busy == 0 and host.held()["turn_watches"] == 0


async def test_a_host_that_forgot_the_poller_gets_the_waits_again(rt: LocalRuntime) -> None:
    assert rt.host is not None
    host = rt.host
    model, waiting = await held_turn(rt, "forgot")
    # As after a restart: the host knows neither the poller nor its waits. The next poll is
    # answered "unknown", and the client registers everything again, waits included.
    host.turn_watches.close()
    assert host.hosted["forgot"].busy == 0
    poller = next(iter(rt._pollers.values()))
    forgotten = host.hub._pollers.pop(poller.id)
    forgotten.event.set()  # the poll waiting on it returns; the next one is not recognised
    await eventually(lambda: host.held()["turn_watches"] == 1, TIMEOUT, what="the wait registered again")
    model.gate.open()
    result = await asyncio.wait_for(waiting, TIMEOUT)
    assert result.success and result.text == "Held."


async def test_a_wait_the_host_cannot_serve_falls_back_to_asking_it_directly(rt: LocalRuntime) -> None:
    assert rt.host is not None
    host = rt.host
    calls = record_calls(rt)
    model, waiting = await held_turn(rt, "closed")
    # The session leaves this host's memory under the watch (as when it moves): the watch
    # settles "ask again", and the client asks the host directly, which recovers the turn.
    assert await host.deactivate("closed")
    result = await asyncio.wait_for(waiting, TIMEOUT)
    assert result.success and result.text == "Held." and len(model.requests) == 2
    assert calls.count("wait_input") == 1
    assert host.held()["turn_watches"] == 0


async def test_a_watch_past_its_limit_ends_and_the_client_asks_the_host_directly(rt: LocalRuntime) -> None:
    assert rt.host is not None
    host = rt.host
    host.turn_watches._limit = 0.2
    calls = record_calls(rt)
    model = GatedModel(after="Held.", first_only=True, name="held")
    session = rt.session("long", agent=Agent("held", "x", model))
    waiting = (await session.prompt("hi")).finished
    await model.gate.reached(TIMEOUT)
    await eventually(lambda: calls.count("wait_input") == 1, TIMEOUT, what="the watch expired; the client asked")
    assert host.held()["turn_watches"] == 0 and host.turn_watches._expiry is None
    assert host.hosted["long"].busy == 1  # the client's own wait now keeps the session active
    model.gate.open()
    result = await asyncio.wait_for(waiting, TIMEOUT)
    assert (result.outcome, result.text) == ("completed", "Held.")


async def test_a_wait_on_a_session_not_active_here_activates_it_and_reads_its_log(rt: LocalRuntime) -> None:
    assert rt.host is not None
    host = rt.host
    calls = record_calls(rt)
    session = rt.session("asleep", agent=agent())
    turn = await session.prompt("hi")
    await host.hosted["asleep"].runner.wait_for(lambda s: s.last_turn is not None, TIMEOUT)
    assert await host.deactivate("asleep")
    result = await asyncio.wait_for(turn.finished, TIMEOUT)  # waited on only now
    assert (result.outcome, result.text) == ("completed", "Done.")
    assert "wait_input" not in calls and "asleep" in host.hosted


async def test_a_wait_on_an_input_the_session_never_had_settles_ask_again(rt: LocalRuntime) -> None:
    assert rt.host is not None
    host = rt.host
    session = rt.session("known", agent=agent())
    assert (await asyncio.wait_for((await session.prompt("hi")).finished, TIMEOUT)).success
    assert await host.hub.poll("p-1", {}, [], 0, {}, full=True) == {}
    host.turn_watches.add("p-1", "no-such-input", "known", session.agent_key)  # not here, not in the log
    await eventually(lambda: host.held()["turn_watches"] == 0, TIMEOUT, what="the watch ended")
    (outcome,) = host.hub.take_outcomes("p-1").values()
    assert isinstance(outcome, WaitFailed) and "no-such-input" in outcome.reason
    assert host.hosted["known"].busy == 0  # the session is not held for a turn that will not come


async def test_a_settled_outcome_ends_a_waiting_poll_and_is_sent_once() -> None:
    hub = MutationHub(linger=0)
    assert await hub.poll("p", {}, [], 0, {}, full=True) == {}
    waiting = asyncio.ensure_future(hub.poll("p", {}, [], 5.0, {}))
    await eventually(lambda: hub.stats()["waiting"] == 1, 1, what="the poll waits")
    assert not waiting.done()
    hub.settle("p", "in-1", WaitFailed("moved"))
    assert await asyncio.wait_for(waiting, 1) == {}
    assert hub.take_outcomes("p") == {"in-1": WaitFailed("moved")}
    assert hub.take_outcomes("p") == {}
    hub.settle("gone", "in-2", "ignored")  # a poller this hub does not know: dropped
    assert not hub.knows("gone")


async def test_finished_is_a_future_fed_by_the_shared_wait_and_giving_up_leaves_it_to_the_others(
    rt: LocalRuntime,
) -> None:
    # Every prompt in flight holds its ``finished``: a task with two coroutine frames, a context
    # and a shield was ~1 KB of a client's memory per turn. It is a plain future now.
    model, waiting = await held_turn(rt, "given-up")
    assert not isinstance(waiting, asyncio.Task)
    session = rt.session("given-up", agent=Agent("held", "x", model))
    poller = next(iter(rt._pollers.values()))
    input_id = next(iter(poller.waits))
    other = rt.turn_finished(session, input_id)  # a second waiter on the same turn (an HTTP wait, say)
    waiting.cancel()  # the first gives up: the shared wait goes on
    assert not poller.waits[input_id][2].cancelled()
    model.gate.open()
    result = await asyncio.wait_for(other, TIMEOUT)
    assert (result.outcome, result.text) == ("completed", "Held.")
    assert waiting.cancelled()
