"""Following one turn of a session as an AI SDK UI message stream (``POST /api/chat``).

``ChatTurn`` is the pure part: it is given the snapshot taken right after subscribing, then every
group of mutations of one log index (in order), and returns the chunks to send. It frames what
``MessageStream`` produces for the turn's assistant message:

- exactly one ``start`` (``messageId`` = the turn's assistant message id) once the turn it
  follows is active (a prompt queued behind another turn waits for its own);
- ``start-step`` / ``finish-step`` from the ``turn`` mutations' ``step`` (id and status), with
  every text and reasoning part closed before a step ends;
- app state changes as transient ``data-app`` chunks (``onData`` sees them; they are not parts);
- the end: when the turn ends (``finish`` with the last step's reason; a failed turn sends
  ``error`` with the session's error text first, a stopped one ``abort``), or when it waits for
  an approval the client was just asked for (``finish`` with ``tool-calls``: the client answers
  with a new request, and that response continues the same turn and message).

Which turn it follows (``Target``): the one that admits an input (a new user message), a given
turn (an approval answered mid-turn: what the client already has is the baseline), or the first
turn that is neither of the ones it excludes (``regenerate`` = ``retry``, which starts a new turn).

``stream_turn`` drives a ``ChatTurn`` from a subscription and renders it as SSE bytes, with
heartbeat comments while nothing happens.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from orchestrator.core.aistate import AIState
from orchestrator.core.mutations import ClientView, info_of, turn_of
from orchestrator.core.parts import AgentMessage
from orchestrator.surfaces.http.aisdk import Approval, Chunk, MessageStream, approvals_of, finish_reason

if TYPE_CHECKING:
    from actors.client import Session, Subscription

__all__ = ["UI_MESSAGE_STREAM_HEADERS", "ChatTurn", "Target", "answer_to", "encode_chunk", "stream_turn"]

UI_MESSAGE_STREAM_HEADERS: dict[str, str] = {
    "cache-control": "no-cache",
    "x-vercel-ai-ui-message-stream": "v1",
    "x-accel-buffering": "no",
}
"""The headers ai 6.x's ``createUIMessageStreamResponse`` sends (besides the content type)."""

DONE: bytes = b"data: [DONE]\n\n"
PING: bytes = b": ping\n\n"


def encode_chunk(chunk: Chunk) -> bytes:
    """One chunk as an SSE event (``data: <json>``)."""
    return b"data: " + json.dumps(chunk, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


@dataclass(frozen=True, slots=True)
class Target:
    """Which turn a response follows."""

    kind: Literal["input", "turn", "new-turn"]
    """``input``: the turn that admits ``input_id``; ``turn``: ``turn_id``; ``new-turn``: the first
    turn not in ``exclude``."""
    input_id: str | None = None
    """The input whose turn to follow."""
    turn_id: str | None = None
    """The turn to follow."""
    exclude: frozenset[str] = field(default_factory=frozenset)
    """Turns a ``new-turn`` target is not."""


class ChatTurn:
    """Chunks for one turn, from mutations (see the module docstring)."""

    def __init__(
        self, state: AIState, index: int, target: Target, *, baseline: bool = True, throttle: float = 0.1
    ) -> None:
        """Start from the snapshot ``state`` at ``index`` (taken after subscribing).

        For a ``turn`` target with ``baseline``, everything the turn's message holds now is
        already the client's (a continued response); without, the response replays it all.
        """
        self.target = target
        self.view = ClientView.of(state.session, index)
        self.turn: dict[str, Any] | None = turn_of(state)
        self.last_turn: dict[str, Any] | None = info_of(state)["lastTurn"]
        self.approvals: dict[str, Approval] = approvals_of(state)
        self.app: Any = state.app
        self.stream = MessageStream(throttle=throttle)
        self.turn_id: str | None = None
        self.message_id: str | None = None
        self.step: str | None = None
        self.reason: str | None = None
        self.started = False
        self._done = False
        self._in_queue = target.input_id is not None and state.inbox.get(target.input_id) is not None
        self._seen_queued = self._in_queue
        self._answered: set[str] = set()
        if baseline and target.kind == "turn" and self.turn is not None and self.turn["id"] == target.turn_id:
            message = self._find(self.turn["messageId"])
            if message is not None:
                self.stream.baseline(message, self.approvals)

    @property
    def done(self) -> bool:
        """Whether the response is complete (nothing more will be sent)."""
        return self._done

    def is_done(self) -> bool:
        """``done``, as a call (a loop re-checks it after every chunk)."""
        return self._done

    # -- inputs ---------------------------------------------------------------------------------------

    def on_group(self, mutations: Sequence[Mapping[str, Any]], now: float) -> list[Chunk]:
        """Apply the mutations of one log index and return the chunks they call for."""
        app_changed = False
        for mutation in mutations:
            self.view.apply(mutation)
            kind = mutation.get("type")
            if kind == "turn":
                self.turn, self.last_turn = mutation.get("turn"), mutation.get("lastTurn")
            elif kind == "interaction":
                interaction = mutation["interaction"]
                self.approvals[interaction["callId"]] = Approval(interaction["id"], interaction["status"])
            elif kind == "info" and self.target.input_id is not None:
                queued = mutation["info"].get("queued", ())
                self._in_queue = any(q.get("id") == self.target.input_id for q in queued)
                self._seen_queued = self._seen_queued or self._in_queue
            elif kind == "app":
                self.app, app_changed = mutation.get("app"), True
        out: list[Chunk] = []
        if app_changed and self.started:
            out.append({"type": "data-app", "id": "app", "data": self.app, "transient": True})
        out.extend(self._advance(now))
        return out

    def on_snapshot(self, state: AIState, index: int, now: float) -> list[Chunk]:
        """Start over from a fresh snapshot (the subscription was reset); what was sent stays sent."""
        self.view = ClientView.of(state.session, index)
        self.turn, self.last_turn = turn_of(state), info_of(state)["lastTurn"]
        self.approvals = approvals_of(state)
        if self.target.input_id is not None:
            self._in_queue = state.inbox.get(self.target.input_id) is not None
        return self._advance(now)

    def answered(self, approval_ids: Sequence[str]) -> None:
        """The client has just answered these approvals: the response does not end waiting on them."""
        self._answered.update(approval_ids)

    def _waiting(self) -> dict[str, Approval]:
        return {call: a for call, a in self.approvals.items() if a.id not in self._answered}

    def begin(self, now: float) -> list[Chunk]:
        """The first chunks, once the command is sent (the followed turn may be active already)."""
        return self._advance(now)

    def tick(self, now: float) -> list[Chunk]:
        """Send throttled preliminary outputs that are due."""
        if not self.started or self._done:
            return []
        return self.stream.sync(self._message(), self.approvals, now)

    def next_due(self) -> float | None:
        """When ``tick`` has something to send (``None``: only a new mutation can change anything)."""
        return None if self._done else self.stream.next_due()

    def reject(self, reason: str) -> list[Chunk]:
        """The whole response for a command that was rejected."""
        self._done = True
        return [{"type": "start"}, {"type": "error", "errorText": reason}, {"type": "finish", "finishReason": "error"}]

    def replay(self, message: AgentMessage | None) -> list[Chunk]:
        """The whole response for an input whose turn already ended (an idempotent resubmission)."""
        self._done = True
        if message is None:
            return [{"type": "start"}, {"type": "finish", "finishReason": "stop"}]
        out: list[Chunk] = [self._start(message), {"type": "start-step"}]
        out.extend(self.stream.sync(message, self.approvals, 0.0))
        out.extend(self.stream.close())
        out.extend([{"type": "finish-step"}, {"type": "finish", "finishReason": "stop"}])
        return out

    # -- the turn ---------------------------------------------------------------------------------------

    def _find(self, message_id: str | None) -> AgentMessage | None:
        messages = self.view.state.messages
        for i in range(len(messages) - 1, -1, -1):
            message = messages.at(i)
            if message.id == message_id:
                return message
        return None

    def _message(self) -> AgentMessage | None:
        return self._find(self.message_id)

    def _start(self, message: AgentMessage | None) -> Chunk:
        chunk: Chunk = {"type": "start"}
        if self.message_id is not None:
            chunk["messageId"] = self.message_id
        elif message is not None:
            chunk["messageId"] = message.id
        return chunk

    def _matches(self, turn: Mapping[str, Any]) -> bool:
        target = self.target
        if target.kind == "input":
            return target.input_id in turn.get("input", ())
        if target.kind == "turn":
            return bool(turn["id"] == target.turn_id)
        return turn["id"] not in target.exclude

    def _advance(self, now: float) -> list[Chunk]:
        if self._done:
            return []
        out: list[Chunk] = []
        turn = self.turn
        if not self.started:
            if turn is None or not self._matches(turn):
                return self._not_started()
            self.started = True
            self.turn_id, self.message_id = turn["id"], turn["messageId"]
            out.append(self._start(None))
        current = turn if turn is not None and turn["id"] == self.turn_id else None
        step = current.get("step") if current is not None else None
        message = self._message()
        if self.step is not None and (step is None or step["id"] != self.step or step["status"] != "running"):
            out.extend(self.stream.sync(message, self.approvals, now))
            out.extend(self.stream.close())
            out.append({"type": "finish-step"})
            self.step = None
        if step is not None:
            if step.get("finishReason") is not None:
                self.reason = step["finishReason"]
            if step["status"] == "running" and self.step is None:
                out.append({"type": "start-step"})
                self.step = step["id"]
        out.extend(self.stream.sync(message, self.approvals, now))
        last = self.last_turn
        if current is None:  # only one turn is active at a time: this one has ended
            outcome = str(last["outcome"]) if last is not None and last["id"] == self.turn_id else "unknown"
            out.extend(self._end(outcome))
        elif self.stream.waiting_for_approval(message, self._waiting()):
            out.extend(self._stop_framing())
            out.append({"type": "finish", "finishReason": "tool-calls"})
            self._done = True
        return out

    def _not_started(self) -> list[Chunk]:
        """Nothing to follow yet; ends the response when there never will be."""
        target = self.target
        if target.kind == "turn":
            gone = True  # the turn it continues is no longer active
        elif target.kind == "input":
            messages = self.view.state.messages
            if any(m.id == target.input_id for m in messages):  # admitted, and its turn is over (after a reset)
                return self.replay(answer_to(messages, target.input_id))
            gone = self._seen_queued and not self._in_queue  # removed from the queue before a turn admitted it
        else:
            gone = False
        if not gone:
            return []
        self._done = True
        return [{"type": "start"}, {"type": "finish", "finishReason": "other"}]

    def _stop_framing(self) -> list[Chunk]:
        out = self.stream.close()
        if self.step is not None:
            out.append({"type": "finish-step"})
            self.step = None
        return out

    def _end(self, outcome: str) -> list[Chunk]:
        self._done = True
        out = self.stream.sync(self._message(), self.approvals, float("inf"))
        out.extend(self._stop_framing())
        if outcome == "failed":
            error = self.view.state.error
            out.append({"type": "error", "errorText": error.message if error is not None else "the turn failed"})
            out.append({"type": "finish", "finishReason": "error"})
        elif outcome == "completed":
            out.append({"type": "finish", "finishReason": finish_reason(self.reason)})
        else:
            if outcome == "stopped":
                out.append({"type": "abort", "reason": "stopped"})
            out.append({"type": "finish", "finishReason": "other"})
        return out


async def stream_turn(
    follower: ChatTurn,
    subscription: Subscription,
    session: Session,
    first: list[Chunk],
    *,
    heartbeat: float = 15.0,
    clock: Callable[[], float] = time.monotonic,
) -> AsyncGenerator[bytes, None]:
    """The SSE bytes of a response: ``first``, then ``follower``'s chunks until it is done, then ``[DONE]``."""
    for chunk in first:
        yield encode_chunk(chunk)
    while not follower.is_done():
        now = clock()
        due = follower.next_due()
        timeout = heartbeat if due is None else max(0.0, min(heartbeat, due - now))
        try:
            batch = await subscription.next_batch(timeout)
        except TimeoutError:
            if due is not None and clock() >= due:
                for chunk in follower.tick(clock()):
                    yield encode_chunk(chunk)
            else:
                yield PING
            continue
        if batch is None:  # the subscription was closed under us (the server is shutting down)
            break
        for group in _groups(batch):
            if any(m.get("type") == "reset" for m in group):
                snapshot = await session.state()
                chunks = follower.on_snapshot(snapshot.state, snapshot.index, clock())
            else:
                chunks = follower.on_group(group, clock())
            for chunk in chunks:
                yield encode_chunk(chunk)
            if follower.is_done():
                break
    yield DONE


def answer_to(messages: Iterable[AgentMessage], input_id: str | None) -> AgentMessage | None:
    """The assistant message that answered ``input_id`` (the first one after it)."""
    found = False
    for message in messages:
        if found and message.role == "assistant":
            return message
        found = found or message.id == input_id
    return None


def _groups(batch: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """The batch split into runs of one log index (a host never splits an index across batches)."""
    groups: list[list[Mapping[str, Any]]] = []
    last: int | None = None
    for mutation in batch:
        index = int(mutation.get("index", 0))
        if index != last or not groups:
            groups.append([])
            last = index
        groups[-1].append(mutation)
    return groups
