"""A parent session's inbox for its sub-agents' batches: reordered, deduplicated, written together.

A sub-agent (a child session) reports what its conversation did as ``ChildBatch``es, each
applied under the parent's delegate call as one ``ai.nested`` event. Batches may arrive out of
order (async Ray calls) and more than once (a retry, a snapshot after a failover), so the inbox
holds each call's batches by the ``seq`` they follow and releases only the next in line. A batch
waits ``delay`` (longer while the process has many steps streaming: the pace of its stream
writes, ``StreamPacer``) so that several go out in one write, as one event, and any write that
happens meanwhile takes them along; except a call's first visible part (text, reasoning, a tool
call), which is written at once: the child already held it for its own first flush, and it is
what a client following the parent waits for (``troupe bench actors``, a pooled child streaming a
part every 5 ms: its first text reached the parent's log 15.0 ms after the delegate call started
with the wait, 8.1-9.2 ms without it).

Answers to a sub-agent's approval (``respond_nested``) go the other way, to the child session.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from typing import Protocol

from orchestrator.core import event_types as ai
from orchestrator.core._json import JsonObject
from orchestrator.core.aistate import AIState, Receipt, ToolRecord
from orchestrator.core.approvals import split_nested
from orchestrator.core.commands import Decision, Respond
from orchestrator.core.events import Event
from orchestrator.core.ids import child_session_id
from orchestrator.core.payloads import Nested
from orchestrator.run.agent import Agent
from orchestrator.run.children import ChildBatch, Children
from orchestrator.run.log import SessionLog
from orchestrator.run.pacing import StreamPacer

__all__ = ["InboxHost", "NestedInbox", "respond_nested"]


class InboxHost(Protocol):
    """What a nested inbox needs from its session (``SessionRunner`` is one)."""

    log: SessionLog
    """The session's log: its tool records say what each call has applied (``child_seq``)."""
    nested_delay: float
    """How long the first held batch waits for company before it asks for a write."""
    pacer: StreamPacer
    """The process's stream-write budget: under load the wait grows to its pace."""
    _draining: bool
    """Whether a write is being assembled or in flight (it takes the held batches along)."""

    def _request_drain(self) -> None:
        """Ask the session for its next write (which calls ``take``)."""
        ...


class NestedInbox:
    """The held batches of every delegate call of one session, and the timer that writes them."""

    def __init__(self, host: InboxHost) -> None:
        """Hold nothing yet; ``host`` is the session whose writes carry the batches.

        A session passes itself as a weak proxy: its inbox does not keep it alive. One reference,
        not a closure per need: every session that delegates has an inbox for its life.
        """
        self.host = host
        self._held: dict[str, dict[int, ChildBatch]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._shown: set[str] | None = None
        """Calls whose first visible part has come (made on first use: most sessions delegate nothing)."""
        self._hurry = False
        """A call's first visible part is held, or the wait is over: write what is next in line."""

    def deliver(self, batch: ChildBatch) -> None:
        """Hold ``batch`` until it is next in its call's sequence (see ``SessionRunner.deliver``)."""
        held = self._held.setdefault(batch.call_id, {})
        snapshot = held.get(-1)
        if snapshot is not None and batch.seq <= snapshot.seq:
            return  # older than a snapshot already waiting (a late first snapshot, say): covered
        if batch.prev is None and self._reaches(batch.call_id, held) >= batch.seq:
            # The batches applied and held already bring the copy there, with no gap: the child's
            # final snapshot, say, behind its last batches. Writing it would store the whole run
            # again and send it again to every subscriber. (One the held batches do not reach yet
            # is held beside them: the next write decides, ``take``.)
            return
        held[batch.prev if batch.prev is not None else -1] = batch
        if self._first_visible(batch):
            self._hurry = True
        host = self.host
        if self._hurry and not host._draining and self.ready():
            self.cancel_timer()  # the write's ``take`` clears the hurry
            host._request_drain()
            return
        # Later batches are not on the latency path: wait a moment so several go out in one
        # write (a write that happens meanwhile takes them along anyway). One that comes while
        # a write is under way waits too: the session arms the wait when its writes end (``wait``).
        if not host._draining:
            self.wait()

    def wait(self) -> None:
        """Write the held batches after the nested delay (at the process's pace), unless a write takes them first."""
        if self._timer is None:
            delay = self.host.pacer.interval(self.host.nested_delay)
            self._timer = asyncio.get_running_loop().call_later(delay, self._due)

    def _reaches(self, call_id: str, held: dict[int, ChildBatch]) -> int:
        """How far the call's copy gets with what is applied and the batches held after it, without a gap."""
        return _chain_end(held, _applied(self.host.log.state.tools, call_id))

    def _first_visible(self, batch: ChildBatch) -> bool:
        """Whether ``batch`` brings its call's first visible part (and remember that it has come)."""
        shown = self._shown
        if shown is not None and batch.call_id in shown:
            return False
        if not batch.visible():
            return False
        if shown is None:
            shown = self._shown = set()
        shown.add(batch.call_id)
        return True

    def cancel_timer(self) -> None:
        """A write is starting: it takes the held batches along, so the timer is not needed."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _due(self) -> None:
        self._timer = None
        self._hurry = True
        self.host._request_drain()

    def due(self) -> bool:
        """Whether a held batch must be written now: a call's first visible part, or one that waited."""
        return self._hurry and self.ready()

    def ready(self) -> bool:
        """Whether some held batch is next in its call's sequence (a write would carry it)."""
        tools = self.host.log.state.tools
        for call_id, held in self._held.items():
            applied = _applied(tools, call_id)
            if -1 in held or applied in held:
                return True
        return False

    def take(self) -> list[Event]:
        """NESTED events for the held batches that are next in their call's sequence.

        The batches of one call that are due together go out as one event (their actions in
        order, the last one's ``seq``): folding it is folding them one by one, and a write
        costs per event (a fold, a store row, the mutations for subscribers).
        """
        events: list[Event] = []
        self._hurry = False  # this write takes whatever is next in line, a first visible part too
        tools = self.host.log.state.tools
        for call_id, held in list(self._held.items()):
            applied = _applied(tools, call_id)
            snapshot = held.get(-1)
            if snapshot is not None and _chain_end(held, applied) >= snapshot.seq:
                # The batches held reach it now (some were in the write before this one when it
                # came): they go instead, a fraction of the run.
                del held[-1]
            run: list[ChildBatch] = []
            while True:
                ready = held.pop(-1, None) or held.pop(applied, None)
                if ready is None:
                    break
                if ready.seq > applied:
                    if run and (ready.wire is None) != (run[-1].wire is None):
                        events.append(_nested_event(run))  # typed and wire forms go in events of their own
                        run = []
                    run.append(ready)
                    applied = ready.seq
            if run:
                events.append(_nested_event(run))
            for key in [k for k in held if k != -1 and held[k].seq <= applied]:
                del held[key]
            if not held:
                del self._held[call_id]
        return events


def _applied(tools: Mapping[str, ToolRecord], call_id: str) -> int:
    """The last seq of the call's batches its session has applied (0: none, or a call it does not know)."""
    record = tools.get(call_id)
    return record.child_seq if record is not None else 0


def _chain_end(held: dict[int, ChildBatch], start: int) -> int:
    """The seq the held batches bring a copy at ``start`` to, following them without a gap."""
    reached = start
    while (following := held.get(reached)) is not None and following.seq > reached:
        reached = following.seq
    return reached


def _nested_event(run: list[ChildBatch]) -> Event:
    """One NESTED event for consecutive batches of one call (all typed, or all with their wire form)."""
    last = run[-1]
    actions = last.actions if len(run) == 1 else tuple(a for batch in run for a in batch.actions)
    # Typed, folded as they are; the event makes the wire form once, for the store (or reuses
    # it, when the batches came in that form from another process).
    nested = Nested(last.call_id, last.seq, actions)
    payload: JsonObject = {}
    if last.wire is not None:
        payload = {"callId": last.call_id, "seq": last.seq, "actions": [w for batch in run for w in batch.wire or ()]}
    return Event("", ai.NESTED, payload, data=nested)


async def respond_nested(
    state: AIState, session_id: str, agent: Agent, children: Children | None, command: Respond
) -> Decision:
    """Answer a sub-agent's approval: the child session (named by the call) decides it."""
    split = split_nested(command.interaction_id)
    assert split is not None
    call_id, rest = split
    record = state.tools.get(call_id)
    sub = agent.sub_agent(record.name) if record is not None else None
    if children is None or record is None or sub is None or record.final:
        return Decision((), Receipt(command.id, "rejected", "not-pending"))
    child_id = child_session_id(session_id, call_id)
    receipt = await children.respond(child_id, sub, replace(command, interaction_id=rest))
    return Decision((), receipt)
