"""``BatchSender``: a child's batches to a parent on another host, one call in flight, the rest joined.

The joining is ``ChildBatch.then``: applying the joined batch is applying both in order. The
sender's calls here are coroutines that take a while, as a Ray call to a busy host does; the
last test runs a real delegate call through a sender whose calls pickle the batch and land late.
"""

from __future__ import annotations

import asyncio
import pickle

from actors.batch_sender import BatchSender
from orchestrator.core.actions import ApplyPart
from orchestrator.core.fold import fold_events
from orchestrator.core.stream import MessageStart, TextDelta
from orchestrator.run.children import ChildBatch, ChildRequest, ChildResult, Deliver
from orchestrator.run.inprocess import LocalChildren
from orchestrator.run.runner import SessionRunner
from orchestrator.store import open_store
from orchestrator.store.base import EventStore
from orchestrator.testing import eventually
from tests.unit.test_runner import call, delegating_agents, turn


def part(text: str) -> ApplyPart:
    return ApplyPart(TextDelta(text))


def batch(seq: int, prev: int | None, *texts: str, call_id: str = "c1") -> ChildBatch:
    return ChildBatch(call_id, seq, prev, tuple(part(t) for t in texts))


def test_a_batch_that_follows_is_appended_and_a_snapshot_replaces() -> None:
    first, second = batch(3, 2, "a"), batch(5, 3, "b", "c")
    joined = first.then(second)
    assert joined == ChildBatch("c1", 5, 2, (part("a"), part("b"), part("c")))
    snapshot = batch(6, None, "whole run")
    assert joined.then(snapshot) == snapshot  # it covers everything before it
    assert first.then(batch(9, 7, "gap")) is None  # does not follow: kept apart
    assert first.then(batch(4, 3, "x", call_id="c2")) is None  # another call's
    assert batch(6, None, "new").then(batch(4, None, "old")) is None  # an older snapshot does not replace
    wired = pickle.loads(pickle.dumps(first)).then(pickle.loads(pickle.dumps(second)))
    assert wired is not None and wired.wire is not None and len(wired.wire) == 3  # the wire form joins too


class SlowCalls:
    """Calls that each take until ``release``; records what each carried."""

    def __init__(self) -> None:
        self.sent: list[ChildBatch] = []
        self.gates: list[asyncio.Future[None]] = []

    def __call__(self, sent: ChildBatch) -> asyncio.Future[None]:
        self.sent.append(sent)
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.gates.append(gate)
        return gate

    async def release(self, error: Exception | None = None) -> None:
        gate = self.gates[len(self.sent) - 1]
        if error is None:
            gate.set_result(None)
        else:
            gate.set_exception(error)
        await asyncio.sleep(0)


async def test_one_call_is_in_flight_and_the_batches_made_meanwhile_go_joined() -> None:
    calls = SlowCalls()
    send = BatchSender(calls)
    await send(batch(1, None, "snapshot"))
    assert calls.sent == [batch(1, None, "snapshot")]  # a quiet child's batch goes at once
    for seq in (2, 3, 4):
        await send(batch(seq, seq - 1, f"t{seq}"))
    assert len(calls.sent) == 1  # waiting for the call in flight
    await calls.release()
    assert calls.sent[1] == ChildBatch("c1", 4, 1, (part("t2"), part("t3"), part("t4")))
    await calls.release()
    await send(batch(5, 4, "t5"))
    assert calls.sent[2] == batch(5, 4, "t5")  # nothing in flight: at once again


def start(seq: int, prev: int | None, message_id: str) -> ChildBatch:
    """A batch with nothing a client shows (a message starting)."""
    return ChildBatch("c1", seq, prev, (ApplyPart(MessageStart(message_id)),))


async def test_what_comes_before_the_first_visible_part_waits_for_it_and_goes_in_its_call() -> None:
    calls = SlowCalls()
    send = BatchSender(calls)
    await send(start(1, None, "m1"))
    await send(start(2, 1, "m2"))
    assert calls.sent == []  # held for the first text
    await send(batch(3, 2, "Hello"))
    assert calls.sent == [
        ChildBatch("c1", 3, None, (*start(1, None, "m1").actions, *start(2, 1, "m2").actions, part("Hello")))
    ]
    await send(start(4, 3, "m3"))
    await send(batch(5, 4, " world"))
    assert len(calls.sent) == 1  # after the first text, batches wait for the call in flight, visible or not
    await calls.release()
    assert calls.sent[1] == ChildBatch("c1", 5, 3, (*start(4, 3, "m3").actions, part(" world")))


async def test_held_batches_go_after_the_hold_and_the_first_visible_part_overtakes_a_call_in_flight() -> None:
    calls = SlowCalls()
    send = BatchSender(calls, hold=0.01)
    await send(start(1, None, "m1"))
    assert calls.sent == []
    await eventually(lambda: calls.sent == [start(1, None, "m1")], 5, what="the held batch to go alone")
    await send(start(2, 1, "m2"))
    assert len(calls.sent) == 1  # held again (and a call is in flight)
    await send(batch(3, 2, "Hello"))
    assert calls.sent[1] == ChildBatch("c1", 3, 1, (*start(2, 1, "m2").actions, part("Hello")))  # not waiting
    await send(batch(4, 3, " world"))
    assert len(calls.sent) == 2  # later text waits its turn again
    calls.gates[0].set_result(None)
    await asyncio.sleep(0)
    assert len(calls.sent) == 2  # one call still in flight
    await calls.release()
    assert calls.sent[2] == batch(4, 3, " world")


async def test_a_run_that_shows_nothing_is_not_settled_while_its_batches_are_held() -> None:
    calls = SlowCalls()
    send = BatchSender(calls, hold=0.01)
    await send(start(1, None, "m1"))
    assert await send.settled(0) is False  # held: the result must carry the run
    waiting = asyncio.ensure_future(send.settled(5.0))
    await eventually(lambda: len(calls.sent) == 1, 5, what="the held batch to go")
    await calls.release()
    assert await asyncio.wait_for(waiting, 1.0) is True


async def test_a_failed_call_loses_its_batch_and_the_next_still_goes() -> None:
    calls = SlowCalls()
    send = BatchSender(calls)
    await send(batch(1, None, "a"))
    await send(batch(2, 1, "b"))
    await calls.release(RuntimeError("the parent's host died"))
    assert calls.sent[1] == batch(2, 1, "b")


async def test_a_send_that_raises_at_once_loses_only_that_batch() -> None:
    attempts: list[int] = []

    def send_or_fail(sent: ChildBatch) -> asyncio.Future[None]:
        attempts.append(sent.seq)
        if sent.seq == 1:
            raise ValueError("no host by that name")  # what a lookup of a host being re-created raises
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    send = BatchSender(send_or_fail)
    await send(batch(1, None, "a"))
    await send(batch(2, 1, "b"))
    assert attempts == [1, 2]


async def test_settled_waits_for_the_calls_on_their_way_and_says_whether_all_arrived() -> None:
    calls = SlowCalls()
    send = BatchSender(calls)
    assert await send.settled(1.0)  # nothing sent: nothing missing
    await send(batch(1, None, "a"))
    await send(batch(2, 1, "b"))  # pending behind the call in flight
    waiting = asyncio.ensure_future(send.settled(5.0))
    await calls.release()
    assert not waiting.done()  # the pending batch went next: still on its way
    await calls.release()
    assert await asyncio.wait_for(waiting, 1.0) is True


async def test_settled_is_false_after_a_lost_batch_a_refusal_or_past_its_limit() -> None:
    calls = SlowCalls()
    send = BatchSender(calls)
    await send(batch(1, None, "a"))
    await calls.release(RuntimeError("the parent's host died"))
    assert await send.settled(1.0) is False  # the child's result must carry its whole run

    refused = BatchSender(lambda sent: asyncio.sleep(0, result=False))  # the parent is not hosted there
    await refused(batch(1, None, "a"))
    assert await refused.settled(1.0) is False

    slow = SlowCalls()
    stalled = BatchSender(slow)
    await stalled(batch(1, None, "a"))
    assert await stalled.settled(0.05) is False  # a parent that does not answer: no waiting past the limit


class LateChildren(LocalChildren):
    """In-process sub-agents whose batches reach the parent through a ``BatchSender``, pickled, late."""

    def __init__(self, store: EventStore) -> None:
        super().__init__(store)
        self.made = 0
        self.sent = 0
        self.senders: list[BatchSender] = []

    async def run(self, request: ChildRequest, deliver: Deliver) -> ChildResult:
        async def land(sent: ChildBatch) -> None:
            self.sent += 1
            await asyncio.sleep(0.01)  # a busy parent host
            await deliver(pickle.loads(pickle.dumps(sent)))

        sender = BatchSender(land)
        self.senders.append(sender)

        async def made(made_batch: ChildBatch) -> None:
            self.made += 1
            await sender(made_batch)

        return await super().run(request, made)


async def test_a_parent_fed_by_a_sender_folds_the_same_conversation() -> None:
    store = open_store("memory://")
    children = LateChildren(store)
    runner = await SessionRunner.open(store, "s-1", delegating_agents(), children=children)
    try:
        assert await turn(runner, "u-1", "compare") == "completed"
        assert 0 < children.sent < children.made  # batches were joined while calls were in flight
        assert fold_events(await store.read("s-1")) == runner.state
        research = call(runner.state, "delegate_to_researcher")
        assert research.agent is not None and research.agent.messages[-1].text
        await eventually(lambda: not any(s.busy for s in children.senders), 5, what="the last calls to land")
    finally:
        await runner.close()
        await children.close()
