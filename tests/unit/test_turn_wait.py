"""``Turn.finished`` rides the subscription polls: no long-held call per turn, and it follows restarts."""

from __future__ import annotations

import asyncio
from typing import Any

from actors.hub import MutationHub, WaitFailed
from actors.local import LocalRuntime
from orchestrator.run.agent import Agent
from orchestrator.testing import Gate, ScriptedModel, eventually

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


async def test_a_host_that_forgot_the_poller_gets_the_waits_again(rt: LocalRuntime) -> None:
    assert rt.host is not None
    host = rt.host
    gate = Gate()
    release = host.wait_input

    async def held(*args: Any) -> Any:
        await gate.wait()
        return await release(*args)

    host.wait_input = held  # type: ignore[method-assign,assignment]
    session = rt.session("forgot", agent=agent())
    turn = await session.prompt("hi")
    waiting = turn.finished
    await gate.reached(TIMEOUT)  # the host waits on the turn for the poller
    # As after a restart: the host knows neither the poller nor its waits. The next poll is
    # answered "unknown", and the client registers everything again, waits included.
    for task in host._turn_watches.values():
        task.cancel()
    poller = next(iter(rt._pollers.values()))
    forgotten = host.hub._pollers.pop(poller.id)
    gate.open()
    forgotten.event.set()  # the poll waiting on it returns; the next one is not recognised
    result = await asyncio.wait_for(waiting, TIMEOUT)
    assert result.success and result.text == "Done."


async def test_a_wait_the_host_cannot_serve_falls_back_to_asking_it_directly(rt: LocalRuntime) -> None:
    assert rt.host is not None
    host = rt.host
    calls = record_calls(rt)
    direct = host.wait_input
    failed: list[str] = []

    async def refuse_once(session_id: str, agent_key: str, input_id: str, timeout: float) -> Any:
        if not failed:
            failed.append(input_id)
            raise RuntimeError("this host cannot wait on it")
        return await direct(session_id, agent_key, input_id, timeout)

    host.wait_input = refuse_once  # type: ignore[method-assign]
    session = rt.session("moved", agent=agent())
    result = await asyncio.wait_for((await session.prompt("hi")).finished, TIMEOUT)
    assert result.success and failed and calls.count("wait_input") == 1


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
