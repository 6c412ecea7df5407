"""Sub-agents: the port through which a session runs a delegate call's child session.

A delegate call ``delegate_to_<agent>`` runs the sub-agent as a session of its own, with id
``<parent>/<call id>`` and its own log. The child streams what happens to its conversation to
the parent in batches; the parent applies them under the call (``within=<call id>``). Each batch
carries the child's log index as its sequence number and the previous batch's, so the parent
drops duplicates and holds batches that arrive out of order (Ray delivers one caller's async
calls out of order). When a child (re)attaches, or rewinds a restarted step, it sends a snapshot
of its whole run instead, so the parent's copy converges whatever it missed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator.core import event_types as ai
from orchestrator.core._fast import fast_init
from orchestrator.core.actions import ApplyPart, SessionAction, ToolPhase
from orchestrator.core.aistate import AIState, Receipt
from orchestrator.core.commands import Respond
from orchestrator.core.parts import NestedRun
from orchestrator.core.stream import Reasoning, RunSnapshot, TextDelta, ToolCall
from orchestrator.core.wire import action_from_wire, action_to_wire
from orchestrator.run.agent import Agent
from orchestrator.run.log import Applied

__all__ = ["ChildBatch", "ChildRequest", "ChildResult", "Children", "NestedForwarder", "child_result"]


@dataclass(frozen=True, slots=True)
class ChildRequest:
    """Start (or re-attach to) the sub-agent behind a delegate call."""

    parent_id: str
    """The delegating session."""
    call_id: str
    """The delegate call."""
    child_id: str
    """The sub-agent's session id (``<parent>/<call id>``)."""
    agent: Agent
    """The sub-agent."""
    task: str
    """What it was asked to do (its first input)."""
    fresh: bool = False
    """The call has never started its child (its ``ai.child.started`` is in the write that starts
    the call), so the child's log is empty: opening it need not read the store. Only a first
    attempt on a first host says so; a retry or a re-attach reads."""


VISIBLE = (TextDelta, Reasoning, ToolCall)
"""The stream parts a client shows: a call's first one is on the latency path (``ChildBatch.visible``)."""


@fast_init
@dataclass(frozen=True, slots=True)
class ChildBatch:
    """What the child's conversation did, for the parent to apply under the call.

    The actions stay typed from the child's fold to the parent's: a parent in the same process
    (the default placement of a sub-agent) folds them as they are, and its store encodes them
    once. Between processes (a pickle: a Ray call) a batch travels in its wire form, and the
    receiving side keeps that form beside the typed actions, so its store does not encode them
    again (``wire``).
    """

    call_id: str
    """The parent's delegate call."""
    seq: int
    """The child's log index after the batch."""
    prev: int | None
    """The previous batch's ``seq`` (``None`` for a snapshot, which stands alone)."""
    actions: tuple[SessionAction, ...]
    """The child's session actions, relative to its own conversation."""
    wire: tuple[dict[str, Any], ...] | None = field(default=None, compare=False, repr=False)
    """``actions`` in their wire form, when this batch was decoded from it (else ``None``)."""

    def visible(self) -> bool:
        """Whether it brings a part a client shows (text, reasoning, a tool call)."""
        return any(isinstance(a, ApplyPart) and isinstance(a.part, VISIBLE) for a in self.actions)

    def then(self, later: ChildBatch) -> ChildBatch | None:
        """This batch and ``later`` as one (applying it is applying both, in order); ``None`` if they do not join.

        A snapshot (``prev`` is ``None``) covers everything before it, so it replaces this batch;
        a batch that follows this one (its ``prev`` is this ``seq``) is appended to it.
        """
        if later.call_id != self.call_id:
            return None
        if later.prev is None:
            return later if later.seq >= self.seq else None
        if later.prev != self.seq:
            return None
        wire = self.wire + later.wire if self.wire is not None and later.wire is not None else None
        return ChildBatch(self.call_id, later.seq, self.prev, self.actions + later.actions, wire)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as wire dicts: plain data, whatever the actions hold (ropes, shared vectors).
        wire = self.wire if self.wire is not None else tuple(action_to_wire(a) for a in self.actions)
        return (_batch_from_wire, (self.call_id, self.seq, self.prev, wire))


def _batch_from_wire(call_id: str, seq: int, prev: int | None, wire: tuple[dict[str, Any], ...]) -> ChildBatch:
    """A pickled batch, typed again (trusted: only a Troupe host sends batches)."""
    return ChildBatch(call_id, seq, prev, tuple(action_from_wire(a) for a in wire), wire)


@dataclass(frozen=True, slots=True)
class ChildResult:
    """How the child's run ended."""

    text: str | None
    """Its final text (the delegate call's result), when it succeeded."""
    error: str | None = None
    """Why it failed, otherwise."""
    code: str | None = None
    """``cancelled`` when it was stopped."""
    final: ChildBatch | None = None
    """A snapshot of the child's run as it ended (applied before the call's result)."""


Deliver = Callable[[ChildBatch], Awaitable[None]]


class Children(Protocol):
    """Runs sub-agent sessions (in-process, or on Ray session actors)."""

    async def run(self, request: ChildRequest, deliver: Deliver) -> ChildResult:
        """Start or re-attach to the child, stream its batches to ``deliver``, return its result.

        Idempotent: a second call for the same child re-attaches (and resumes it when paused).
        """
        ...

    async def stop(self, child_id: str) -> None:
        """Stop the child's running turn (a parent's stop cascades)."""
        ...

    async def pause(self, child_id: str, when: str) -> None:
        """Pause the child (a parent's pause cascades)."""
        ...

    async def resume(self, child_id: str) -> None:
        """Resume the child."""
        ...

    async def respond(self, child_id: str, agent: Agent, command: Respond) -> Receipt | None:
        """Answer an approval the child (or one of its own sub-agents) is waiting on."""
        ...


def _forwardable(action: SessionAction) -> bool:
    return isinstance(action, ApplyPart | ToolPhase)


def run_snapshot(state: AIState) -> RunSnapshot:
    """The child's whole run, as the parent's nested copy should be."""
    session = state.session
    status = "streaming" if state.active is not None else session.status
    return RunSnapshot(NestedRun(session.messages, status, session.error))


class NestedForwarder:
    """Child side: turns each append of the child's log into a batch for the parent."""

    def __init__(self, call_id: str, deliver: Deliver) -> None:
        self.call_id = call_id
        self.deliver = deliver
        self.last: int | None = None

    def snapshot_batch(self, state: AIState, index: int) -> ChildBatch:
        """The whole run as one batch."""
        return ChildBatch(self.call_id, index, None, (ApplyPart(run_snapshot(state)),))

    async def snapshot(self, state: AIState, index: int) -> None:
        """Send the whole run (on attach, and after a rewind)."""
        batch = self.snapshot_batch(state, index)
        self.last = index
        await self.deliver(batch)

    async def forward(self, applied: Sequence[Applied], state: AIState, index: int) -> None:
        """Send what one append did to the child's conversation."""
        actions = [a for item in applied for a in item.actions]
        rewound = any(item.event.type == ai.STEP_SUPERSEDED and item.event.payload.get("restart") for item in applied)
        if self.last is None or rewound or not all(_forwardable(a) for a in actions):
            await self.snapshot(state, index)
            return
        if not actions:
            return
        batch = ChildBatch(self.call_id, index, self.last, tuple(actions))
        self.last = index
        await self.deliver(batch)


def child_result(state: AIState) -> ChildResult | None:
    """The child's result once its first turn has ended (``None`` while it runs)."""
    if state.active is not None or state.last_turn is None:
        return None
    _, outcome = state.last_turn
    if outcome == "completed":
        reply = next((m for m in reversed(state.messages) if m.role == "assistant"), None)
        return ChildResult(reply.final_text if reply is not None else "")
    if outcome == "stopped":
        return ChildResult(None, "The sub-agent was stopped.", "cancelled")
    error = state.error.message if state.error is not None else f"The sub-agent's turn ended: {outcome}."
    return ChildResult(None, error)
