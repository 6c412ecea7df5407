"""A parent's inbox writes the batches of one delegate call that are due together as one ``ai.nested`` event.

Folding that event is folding the batches one by one (the actions in order, then the last
``seq``), so the state is the same while a write costs one event instead of one per batch.
"""

from __future__ import annotations

import asyncio
import gc
import types
import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from actors.bench.shop import CHUNKS_PER_TURN, PROMPTS, shop_agent, verify_turn
from actors.local import LocalRuntime
from orchestrator.core.actions import ApplyPart, Send, SessionAction
from orchestrator.core.aistate import ToolRecord
from orchestrator.core.events import Event
from orchestrator.core.payloads import Nested
from orchestrator.core.stream import AgentStreamPart, MessageStart, StepFinish, TextDelta
from orchestrator.core.wire import action_to_wire
from orchestrator.models.base import CancelSignal, ModelRequest
from orchestrator.run.agent import Agent
from orchestrator.run.children import ChildBatch
from orchestrator.run.nested import NestedInbox
from orchestrator.run.pacing import StreamPacer
from orchestrator.testing import Gate, ScriptedModel, eventually
from tests.fixtures.agents import GatedModel

TIMEOUT = 30


class _Host:
    """The session side of an inbox (``InboxHost``): its tool records, and a pump that counts asks."""

    def __init__(self, tools: dict[str, ToolRecord], delay: float, *, draining: bool) -> None:
        self.log = SimpleNamespace(state=SimpleNamespace(tools=tools))
        self.nested_delay = delay
        self.pacer = StreamPacer()  # nothing streaming: a batch waits ``delay``
        self._draining = draining
        self.asked = 0

    def _request_drain(self) -> None:
        self.asked += 1


def _inbox(applied: int = 0) -> tuple[NestedInbox, dict[str, ToolRecord]]:
    tools = {"call-1": ToolRecord("call-1", "delegate_to_researcher", "turn-1", "running", child_seq=applied)}
    return NestedInbox(_Host(tools, 0.01, draining=True)), tools  # type: ignore[arg-type]  # a fake log


def _batch(seq: int, prev: int | None, *actions: SessionAction, wire: bool = False) -> ChildBatch:
    return ChildBatch("call-1", seq, prev, actions, tuple(action_to_wire(a) for a in actions) if wire else None)


START = ApplyPart(MessageStart("r-1"))
DELTAS = [ApplyPart(TextDelta(f"R00{i}", "r-1")) for i in range(4)]


async def test_consecutive_batches_of_a_call_go_out_as_one_event() -> None:
    inbox, _ = _inbox()
    inbox.deliver(_batch(3, 2, DELTAS[1]))  # out of order: held until 2 arrives
    inbox.deliver(_batch(2, 0, START, DELTAS[0]))
    inbox.deliver(_batch(5, 3, DELTAS[2], DELTAS[3]))
    events = inbox.take()
    assert len(events) == 1
    nested = events[0].data
    assert isinstance(nested, Nested)
    assert (nested.call_id, nested.seq) == ("call-1", 5)
    assert nested.actions == (START, DELTAS[0], DELTAS[1], DELTAS[2], DELTAS[3])
    assert inbox.take() == []  # nothing held


async def test_a_gap_holds_the_later_batches_and_applied_ones_are_dropped() -> None:
    inbox, _ = _inbox(applied=2)
    inbox.deliver(_batch(2, 0, START, DELTAS[0]))  # already applied (a repeat)
    inbox.deliver(_batch(3, 2, DELTAS[1]))
    inbox.deliver(_batch(6, 5, DELTAS[3]))  # 5 has not arrived
    events = inbox.take()
    assert [(e.data.seq, e.data.actions) for e in events if isinstance(e.data, Nested)] == [(3, (DELTAS[1],))]


async def test_a_snapshot_the_held_batches_already_reach_is_not_written() -> None:
    # The child's final snapshot behind its last batches (still held): the batches are the same
    # copy, and a fraction of the run to store and to send to subscribers.
    inbox, tools = _inbox(applied=2)
    inbox.deliver(_batch(3, 2, DELTAS[1]))
    inbox.deliver(_batch(5, 3, DELTAS[2], DELTAS[3]))
    inbox.deliver(_batch(5, None, ApplyPart(MessageStart("whole-run"))))
    events = inbox.take()
    assert [(e.data.seq, e.data.actions) for e in events if isinstance(e.data, Nested)] == [
        (5, (DELTAS[1], DELTAS[2], DELTAS[3]))
    ]
    # Once the write applied them, a late snapshot to the same point is not written either.
    tools["call-1"] = ToolRecord("call-1", "delegate_to_researcher", "turn-1", "running", child_seq=5)
    inbox.deliver(_batch(5, None, ApplyPart(MessageStart("whole-run"))))
    assert inbox.take() == []


async def test_a_snapshot_that_came_during_a_write_yields_to_the_batches_that_reach_it() -> None:
    # 2..3 is in the write under way (taken, not yet applied) when 3..5 and the final snapshot
    # come: the held batches do not reach 5 from 2 yet. Once the write is done they do.
    inbox, tools = _inbox(applied=2)
    inbox.deliver(_batch(3, 2, DELTAS[1]))
    assert [e.data.seq for e in inbox.take() if isinstance(e.data, Nested)] == [3]
    inbox.deliver(_batch(5, 3, DELTAS[2], DELTAS[3]))
    inbox.deliver(_batch(5, None, ApplyPart(MessageStart("whole-run"))))
    tools["call-1"] = ToolRecord("call-1", "delegate_to_researcher", "turn-1", "running", child_seq=3)  # written
    events = inbox.take()
    assert [(e.data.seq, e.data.actions) for e in events if isinstance(e.data, Nested)] == [(5, (DELTAS[2], DELTAS[3]))]


async def test_a_snapshot_past_a_gap_replaces_the_batches_it_covers() -> None:
    inbox, _ = _inbox(applied=2)
    inbox.deliver(_batch(3, 2, DELTAS[1]))
    inbox.deliver(_batch(6, 5, DELTAS[3]))  # 4..5 lost on the way: the copy cannot get to 6
    whole = ApplyPart(MessageStart("whole-run"))
    inbox.deliver(_batch(6, None, whole))
    events = inbox.take()
    assert [(e.data.seq, e.data.actions) for e in events if isinstance(e.data, Nested)] == [(6, (whole,))]


async def test_typed_and_wire_batches_go_in_events_of_their_own_with_their_wire_form() -> None:
    inbox, _ = _inbox()
    inbox.deliver(_batch(2, 0, START, DELTAS[0], wire=True))
    inbox.deliver(_batch(3, 2, DELTAS[1], wire=True))
    inbox.deliver(_batch(4, 3, DELTAS[2]))
    first, second = inbox.take()
    assert first.payload == {
        "callId": "call-1",
        "seq": 3,
        "actions": [action_to_wire(a) for a in (START, DELTAS[0], DELTAS[1])],
    }
    assert isinstance(second.data, Nested) and (second.data.seq, second.data.actions) == (4, (DELTAS[2],))
    assert second.payload["seq"] == 4 and second.payload["callId"] == "call-1"  # made from the typed form


def _timed_inbox(delay: float = 60.0) -> tuple[NestedInbox, _Host]:
    tools = {"call-1": ToolRecord("call-1", "delegate_to_researcher", "turn-1", "running", child_seq=0)}
    pump = _Host(tools, delay, draining=False)
    return NestedInbox(pump), pump  # type: ignore[arg-type]  # a fake log


SEND = Send("task-1", "compare mug prices")


def _waiting(inbox: NestedInbox) -> bool:
    """Whether the inbox holds batches for a timed write (waiting for company)."""
    return inbox._timer is not None


async def test_a_calls_first_visible_part_is_written_at_once_and_later_parts_wait() -> None:
    inbox, pump = _timed_inbox()
    inbox.deliver(_batch(2, 0, SEND))  # the child's input: nothing a client waits for yet
    assert pump.asked == 0 and _waiting(inbox)  # waits for company
    inbox.deliver(_batch(4, 2, START, DELTAS[0]))  # the call's first text
    assert pump.asked == 1 and not _waiting(inbox)  # written now (the timer it replaced is gone)
    inbox.take()
    inbox.deliver(_batch(5, 4, DELTAS[1]))  # later text waits for company again
    assert pump.asked == 1 and _waiting(inbox)
    inbox.cancel_timer()


async def test_a_first_visible_part_held_behind_a_gap_goes_out_once_the_gap_fills() -> None:
    inbox, pump = _timed_inbox()
    inbox.deliver(_batch(4, 2, START, DELTAS[0]))  # out of order: 2 has not come
    assert pump.asked == 0
    inbox.deliver(_batch(2, 0, SEND))
    assert pump.asked == 1  # now the text is next in line
    events = inbox.take()
    assert [e.data.seq for e in events if isinstance(e.data, Nested)] == [4]
    inbox.cancel_timer()


async def test_a_write_already_running_takes_the_first_visible_part_along() -> None:
    inbox, pump = _timed_inbox()
    pump._draining = True
    inbox.deliver(_batch(3, 0, START, DELTAS[0]))
    assert pump.asked == 0  # the running write's pump takes what is ready
    inbox.take()
    pump._draining = False
    inbox.deliver(_batch(4, 3, DELTAS[1]))
    assert pump.asked == 0 and _waiting(inbox)  # no leftover hurry: this one waits
    inbox.cancel_timer()


async def test_only_a_first_visible_part_or_a_batch_that_waited_is_due() -> None:
    inbox, pump = _timed_inbox(delay=0.0)
    pump._draining = True
    inbox.deliver(_batch(2, 0, SEND))  # during a write: held, not due, and no timer yet
    assert inbox.ready() and not inbox.due() and not _waiting(inbox)
    pump._draining = False
    inbox.wait()  # the session's writes ended: it waits for the delay
    assert _waiting(inbox)
    await eventually(lambda: pump.asked == 1, TIMEOUT, what="the delay's end asks for a write")
    assert inbox.due()  # that write takes it
    inbox.take()
    pump.log.state.tools["call-1"] = ToolRecord("call-1", "delegate_to_researcher", "turn-1", "running", child_seq=2)
    assert not inbox.due()
    inbox.deliver(_batch(4, 2, START, DELTAS[0]))  # the first text: due at once
    assert inbox.due() and pump.asked == 2
    inbox.take()
    assert not inbox.due()


async def test_only_a_session_that_delegates_has_an_inbox_and_only_from_its_first_child_batch(tmp_path: Path) -> None:
    # An inbox is a few fields (it was three closures too, ~0.6 KB): a sub-agent never delegates, and at
    # a thousand sessions with a sub-agent each that was a megabyte for nothing.
    async with LocalRuntime(store=f"sqlite:///{tmp_path / 's.db'}") as rt:
        shop = rt.session("shop-1", agent=shop_agent())
        assert rt.host is not None
        result = await asyncio.wait_for((await shop.prompt(PROMPTS[0])).finished, TIMEOUT)
        assert result.success
        runners = {sid: hosted.runner for sid, hosted in rt.host.hosted.items()}
        inbox = runners["shop-1"]._nested
        assert inbox is not None  # it took its researcher's batches
        # It reaches its session through one weak proxy, not a closure per need (~0.5 KB each
        # session that delegates, for the session's life).
        assert type(inbox.host) is weakref.ProxyType and inbox.host.session_id == "shop-1"
        assert not [o for o in gc.get_referents(*gc.get_referents(inbox)) if isinstance(o, types.FunctionType)]
        children = [runner for sid, runner in runners.items() if sid != "shop-1"]
        assert children and all(runner._nested is None for runner in children)
        plain = rt.session("plain-1", agent=Agent("plain", "x", ScriptedModel([[{"text": "hi"}]])))
        assert (await asyncio.wait_for((await plain.prompt("hello")).finished, TIMEOUT)).success
        assert rt.host.hosted["plain-1"].runner._nested is None


async def test_a_delegate_calls_nested_copy_is_written_once(tmp_path: Path) -> None:
    # The child's result carries its run as it ended (a snapshot); its last batches, still held by
    # the parent when the result came, bring the copy to the same point: only they are written.
    async with LocalRuntime(store=f"sqlite:///{tmp_path / 's.db'}") as rt:
        shop = rt.session("shop-1", agent=shop_agent())
        result = await asyncio.wait_for((await shop.prompt(PROMPTS[0])).finished, TIMEOUT)
        assert result.success
        assert rt.host is not None
        parent = rt.host.hosted["shop-1"].runner
        nested = [e.data for e in await rt.store.read("shop-1") if isinstance(e.data, Nested)]
        runs = [n for n in nested if any(isinstance(a, ApplyPart) and a.part.type == "nested-run" for a in n.actions)]
        assert nested and runs == nested[:1]  # the child's first batch is its run so far; no other
        child_id = next(sid for sid in rt.host.hosted if sid.startswith("shop-1/"))
        child = await rt.store.read(child_id)
        record = next(r for r in parent.state.tools.values() if r.name == "delegate_to_researcher")
        assert record.child_seq == child[-1].index  # the copy got to the child's last event
        assert verify_turn(parent.state.messages[-1]) == CHUNKS_PER_TURN  # the nested copy is whole


class _Talker:
    """A child's model: its first text, two more batches' worth (each after a flush), then ``gate``."""

    def __init__(self) -> None:
        self.gate = Gate()

    @property
    def name(self) -> str:
        return "talker"

    async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        for text in ("one ", "two ", "three "):
            yield TextDelta(text)
            await asyncio.sleep(0.05)  # past the child's flush: each text is a batch to the parent
        await self.gate.wait()
        yield StepFinish(finish_reason="stop")


async def test_batches_that_come_during_a_write_wait_for_the_delay_not_for_the_write_to_end(tmp_path: Path) -> None:
    # A child's later batches are not on the latency path: one that comes while the parent is
    # writing waits for the nested delay like any other, rather than making a write of its own
    # the moment that write ends (under load, that was one parent write after another for the
    # whole of the child's run: 2.25 nested writes a turn on the shop workload, in one process).
    talker = _Talker()
    child = Agent("talker", "Talk.", talker)
    parent = Agent(
        "boss",
        "Delegate.",
        ScriptedModel([[{"tool": "delegate_to_talker", "input": {"task": "talk"}}], [{"text": "Done."}]]),
        agents=[child],
    )
    async with LocalRuntime(store=f"sqlite:///{tmp_path / 's.db'}", nested_delay=60.0) as rt:
        session = rt.session("boss-1", agent=parent)
        await session.state()  # active: its runner is there to watch
        assert rt.host is not None
        runner = rt.host.hosted["boss-1"].runner
        commit, held = runner.log.commit, Gate()

        async def slow_nested(stamped: list[Event], applied: Any) -> Any:
            if any(e.type == "ai.nested" for e in stamped) and not held.count:
                await held.wait()  # the first text's write: the child's next batches come meanwhile
            return await commit(stamped, applied)

        runner.log.commit = slow_nested
        turn = await session.prompt("go")
        await held.reached(TIMEOUT)
        inbox = runner._nested
        assert inbox is not None
        await eventually(lambda: sum(map(len, inbox._held.values())) >= 2, TIMEOUT, what="two batches held")
        held.open()
        await eventually(lambda: not runner._draining, TIMEOUT, what="the first text's write is done")
        nested = [e for e in await rt.store.read("boss-1") if e.type == "ai.nested"]
        assert len(nested) == 1 and inbox._timer is not None  # the rest waits for the delay (60 s)
        talker.gate.open()
        assert (await asyncio.wait_for(turn.finished, TIMEOUT)).success
        nested = [e for e in await rt.store.read("boss-1") if e.type == "ai.nested"]
        assert len(nested) == 2  # the rest went with the call's end
        assert runner.state.messages[-1].parts[0].agent.messages[-1].text == "one two three "


async def test_a_planning_pass_leaves_the_held_batches_for_the_first_visible_part(tmp_path: Path) -> None:
    # A pass that only plans (a step or a tool ended) wrote whatever the inbox held: the child's
    # first snapshot, on its own, as the parent's step ended beside its delegate call's start. It
    # is no part a client waits for: it goes with the call's first visible part.
    quiet = GatedModel(after="found it", name="quiet")
    parent = Agent(
        "boss",
        "Delegate.",
        ScriptedModel([[{"tool": "delegate_to_quiet", "input": {"task": "look"}}], [{"text": "Done."}]]),
        agents=[Agent("quiet", "Look.", quiet)],
    )
    async with LocalRuntime(store=f"sqlite:///{tmp_path / 's.db'}", nested_delay=60.0) as rt:
        session = rt.session("boss-1", agent=parent)
        turn = await session.prompt("go")
        await quiet.gate.reached(TIMEOUT)
        assert rt.host is not None
        runner = rt.host.hosted["boss-1"].runner
        await eventually(lambda: runner._nested is not None and runner._nested._held, TIMEOUT, what="the first batch")
        runner._kick()  # a planning pass
        await eventually(lambda: not runner._draining and not runner._plan, TIMEOUT, what="the pass is over")
        assert [e for e in await rt.store.read("boss-1") if e.type == "ai.nested"] == []
        quiet.gate.open()
        assert (await asyncio.wait_for(turn.finished, TIMEOUT)).success
        nested = [e.data for e in await rt.store.read("boss-1") if isinstance(e.data, Nested)]
        kinds = [a.part.type for a in nested[0].actions if isinstance(a, ApplyPart)]
        assert kinds[:2] == ["nested-run", "text-delta"]  # the snapshot went with the first text
