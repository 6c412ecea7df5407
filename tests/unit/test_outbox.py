"""The outbox: the calls of one turn of the loop go to each host as one ``SessionHost.calls``.

The hosts here are real ``SessionHost``s (an in-process runtime's); only Ray's actor handle is
replaced, by one that runs the method on the host in this loop and records each call it sends.
The Ray path itself is tested in ``tests/integration/test_runtime.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any

import pytest

from actors.host import SessionHost
from actors.local import LocalRuntime
from actors.outbox import Outbox
from orchestrator.core.aistate import AIState
from orchestrator.core.errors import UsageError
from orchestrator.core.events import Event
from orchestrator.run.agent import Agent
from orchestrator.testing import ScriptedModel

TIMEOUT = 10


class _Method:
    def __init__(self, handle: Handle, name: str) -> None:
        self.handle, self.name = handle, name

    def remote(self, *args: Any) -> Any:
        self.handle.sent.append((self.name, args))
        coro: Coroutine[Any, Any, Any] = getattr(self.handle.host, self.name)(*args)
        return _Ref(asyncio.run_coroutine_threadsafe(coro, asyncio.get_running_loop()))


class _Ref:
    def __init__(self, future: Future[Any]) -> None:
        self._future = future

    def future(self) -> Future[Any]:
        return self._future


class Handle:
    """What ``Router.host`` returns, for a host in this process: ``handle.method.remote(...)``."""

    def __init__(self, host: SessionHost) -> None:
        self.host = host
        self.sent: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> _Method:
        return _Method(self, name)


@pytest.fixture
async def host(rt: LocalRuntime) -> SessionHost:
    assert rt.host is not None
    agent = Agent("a", "x", ScriptedModel([[{"text": "hi"}]], per_turn=True))
    await rt.session("warm", agent=agent).state()  # registers the agent under its key
    return rt.host


def _key(rt: LocalRuntime) -> str:
    return next(iter(rt._registered))


async def test_the_calls_of_one_turn_go_as_one_batch_and_each_caller_gets_its_own_answer(
    rt: LocalRuntime, host: SessionHost
) -> None:
    key, a, b = _key(rt), Handle(host), Handle(host)
    outbox = Outbox({"a": a, "b": b}.__getitem__)
    on_a = [outbox.call("a", "push", f"s-{i}", (key, [_note(i)], True)) for i in range(5)]
    bad = outbox.call("a", "push", "s-1", (key, [_note(float("nan"))], True))
    alone = outbox.call("b", "snapshot", "warm", (key,))
    results = await asyncio.wait_for(asyncio.gather(*on_a, bad, alone, return_exceptions=True), TIMEOUT)

    assert [name for name, _ in a.sent] == ["calls"] and len(a.sent[0][1][0]) == 6
    assert [name for name, _ in b.sent] == ["snapshot"]  # a call alone is sent as itself
    assert results[:5] == [1, 1, 1, 1, 1]
    assert isinstance(results[5], UsageError) and "JSON" in str(results[5])
    state, index = results[6]  # type: ignore[misc]
    assert isinstance(state, AIState) and index == host.hosted["warm"].runner.log.index
    assert host.batches == 1 and host.batched == 6


async def test_calls_in_later_turns_of_the_loop_go_in_later_batches(rt: LocalRuntime, host: SessionHost) -> None:
    key, handle = _key(rt), Handle(host)
    outbox = Outbox(lambda name: handle)
    first = [outbox.call("h", "snapshot", f"s-{i}", (key,)) for i in range(2)]
    await asyncio.sleep(0)
    second = [outbox.call("h", "snapshot", f"s-{i}", (key,)) for i in range(3)]
    await asyncio.wait_for(asyncio.gather(*first, *second), TIMEOUT)
    assert [len(args[0]) for _, args in handle.sent] == [2, 3]


async def test_a_caller_that_gives_up_leaves_the_others_their_answers(rt: LocalRuntime, host: SessionHost) -> None:
    key, handle = _key(rt), Handle(host)
    outbox = Outbox(lambda name: handle)
    calls = [outbox.call("h", "push", f"s-{i}", (key, [_note(i)], True)) for i in range(3)]
    calls[1].cancel()
    assert list(await asyncio.wait_for(asyncio.gather(calls[0], calls[2]), TIMEOUT)) == [1, 1]
    log = await rt.store.read("s-1")
    assert [e.payload for e in log] == [{"n": 1}]  # the call itself had gone: the host applied it


async def test_when_the_batch_fails_every_caller_gets_its_error(rt: LocalRuntime, host: SessionHost) -> None:
    class Dead:
        class calls:
            @staticmethod
            def remote(batch: Any) -> _Ref:
                future: Future[Any] = Future()
                future.set_exception(ConnectionError("the host died"))
                return _Ref(future)

    outbox = Outbox(lambda name: Dead)
    calls = [outbox.call("h", "snapshot", f"s-{i}", (_key(rt),)) for i in range(3)]
    results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), TIMEOUT)
    assert [type(r) for r in results] == [ConnectionError] * 3


async def test_a_host_runs_only_the_quick_calls_in_a_batch(rt: LocalRuntime, host: SessionHost) -> None:
    with pytest.raises(UsageError, match="'wait_input' is not a batched call; call it on its own"):
        await host.calls([("snapshot", "s-0", (_key(rt),)), ("wait_input", "s-0", (_key(rt), "u-1", 1.0))])
    assert host.batches == 0


def _note(n: float) -> Event:
    return Event(f"evt-{n}", "note.added", {"n": n})


async def test_a_host_that_cannot_be_found_fails_each_caller_with_that_error(rt: LocalRuntime) -> None:
    def lookup(name: str) -> Handle:
        raise LookupError(f"no host {name!r} now")

    outbox = Outbox(lookup)
    alone = outbox.call("a", "snapshot", "s-0", ("k",))
    await asyncio.sleep(0)
    together = [outbox.call("a", "snapshot", f"s-{i}", ("k",)) for i in range(2)]
    results = await asyncio.wait_for(asyncio.gather(alone, *together, return_exceptions=True), TIMEOUT)
    assert [str(r) for r in results] == ["no host 'a' now"] * 3


async def test_an_error_that_cannot_make_the_trip_reaches_its_caller_as_a_runtime_error(
    rt: LocalRuntime, host: SessionHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Odd(Exception):  # pickles, but its __init__ cannot be called again with what it passed on
        def __init__(self, a: str, b: str) -> None:
            super().__init__(f"{a} and {b}")

    async def snapshot(session_id: str, agent_key: str) -> Any:
        raise Odd("the card reader", "the network are down")

    monkeypatch.setattr(host, "snapshot", snapshot)
    results = await host.calls([("snapshot", "s-0", (_key(rt),)), ("turn_of", "s-1", (_key(rt), "u-1"))])
    (ok, error), second = results
    assert not ok and type(error) is RuntimeError and str(error) == "Odd: the card reader and the network are down"
    assert second == (True, None)  # the other call of the batch is answered
