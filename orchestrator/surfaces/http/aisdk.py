"""The Vercel AI SDK UI message stream: one assistant message as ``UIMessageChunk`` values.

``MessageStream`` compares successive states of one assistant message (what a ``ClientView``
holds after each log index) with what it has already sent, and returns the chunks that take the
client's copy there (ai 6.x, ``uiMessageChunkSchema``). Working from states rather than from
individual mutations makes it indifferent to how the host batched the stream (a whole ``part``
mutation or a run of ``delta`` mutations give the same chunks) and lets a response start from
any point: a new turn sends everything, a continued one (after an approval) only what is new.

- a ``TextPart`` (``ReasoningPart``) appears: ``text-start`` (``reasoning-start``), id = our
  part id; it grows: ``text-delta``; a later part begins, or the step or the turn ends:
  ``text-end`` (every part is closed);
- a ``ToolPart`` appears: ``tool-input-start``; while its arguments stream: ``tool-input-delta``;
  once they are complete: ``tool-input-available``; these always come before any output;
- ``awaiting-confirmation`` with its interaction: ``tool-approval-request`` (``approvalId`` = the
  interaction id, which is what the client answers);
- ``done`` / ``error`` / ``cancelled``: ``tool-output-available`` / ``tool-output-error``; an error
  after a denied approval: ``tool-output-denied``;
- a running delegate call's nested run changes: ``tool-output-available`` with
  ``preliminary: true``, at most one per ``throttle`` seconds per call;
- a ``DataPart``: ``data-<name>`` (id = part id; a change sends it again and the client replaces
  it by id); a ``CompactionPart``: ``data-compaction``; message metadata: ``message-metadata``.

A delegate call's output, preliminary and final, is a *nested run output*::

    {"status": "streaming" | "idle" | "error", "text": "<the sub-agent's answer so far>",
     "messages": [<UIMessage>, ...], "error"?: "<why it failed>"}

``messages`` are the sub-agent's messages converted to UIMessages exactly like the top level
(``to_ui_message``), so a UI renders a nested run with the same components as the conversation,
recursively (a nested delegate's tool part carries its own nested run output). In the final
output ``text`` is the delegate's result: what the parent model was given.

The step and turn framing (``start``, ``start-step``, ``finish-step``, ``error``, ``finish``)
belongs to ``orchestrator.surfaces.http.chat``, which drives this class.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from orchestrator.core._json import JsonValue
from orchestrator.core.aistate import AIState
from orchestrator.core.parts import (
    AgentMessage,
    CompactionPart,
    DataPart,
    MessagePart,
    NestedRun,
    ReasoningPart,
    TextPart,
    ToolPart,
)
from orchestrator.core.wire import part_to_wire_message

__all__ = [
    "FINISH_REASONS",
    "Approval",
    "Chunk",
    "MessageStream",
    "approvals_of",
    "finish_reason",
    "run_output",
    "to_ui_message",
    "to_ui_messages",
]

Chunk = dict[str, Any]
"""One UI message chunk (``{"type": "text-delta", "id": ..., "delta": ...}``)."""

FINISH_REASONS: Final = frozenset({"stop", "length", "content-filter", "tool-calls", "error", "other"})
"""The ``finishReason`` values ai 6.x accepts in a ``finish`` chunk."""

# How far a tool call has been sent.
_NONE, _STARTED, _INPUT, _APPROVAL, _FINAL = range(5)


def finish_reason(reason: str | None) -> str:
    """A step's finish reason as ai 6.x names it (``other`` for anything it does not know)."""
    if reason is None:
        return "stop"
    return reason if reason in FINISH_REASONS else "other"


@dataclass(frozen=True, slots=True)
class Approval:
    """An interaction as the stream sees it: its id, and whether it was answered."""

    id: str
    """The interaction id (the ``approvalId`` a client answers)."""
    status: str
    """``pending``, ``approved``, ``denied`` or ``closed``."""
    reason: str | None = None
    """What the user wrote with the answer (``useChat`` shows a denial's reason after a reload)."""


def approvals_of(state: AIState) -> dict[str, Approval]:
    """The session's interactions, by the tool call they belong to."""
    return {i.call_id: Approval(i.id, i.status, i.reason) for i in state.interactions.values()}


@dataclass(slots=True)
class _Sent:
    """What the client has of one part."""

    open: bool = False
    """A text or reasoning part that may still grow."""
    length: int = 0
    """Characters sent (text, reasoning, or a tool call's streaming argument text)."""
    stage: int = _NONE
    """How far a tool call has been sent."""
    value: Any = None
    """A data part's last data, or the nested run last sent as preliminary output."""
    sent_at: float = -math.inf
    """When the last preliminary output was sent."""
    due: float | None = None
    """When a throttled preliminary output is due."""


class MessageStream:
    """The chunks that bring a client's copy of one assistant message up to date (module docstring)."""

    def __init__(self, *, throttle: float = 0.1) -> None:
        """Start with nothing sent.

        Args:
            throttle: the least time between two preliminary outputs of one delegate call.
        """
        self.throttle = throttle
        self._sent: dict[str, _Sent] = {}
        self._open: str | None = None
        self._metadata: Mapping[str, JsonValue] | None = None

    def baseline(self, message: AgentMessage, approvals: Mapping[str, Approval]) -> None:
        """Count everything ``message`` holds now as already on the client (a continued response)."""
        for part in message.parts:
            if type(part) is TextPart:
                self._sent[part.id] = _Sent(length=part.length)
            elif type(part) is ReasoningPart:
                self._sent[part.id] = _Sent(length=len(part.text))
            elif type(part) is ToolPart:
                if not part.is_open:
                    stage = _FINAL
                elif part.state == "awaiting-confirmation" and part.id in approvals:
                    stage = _APPROVAL
                else:
                    stage = _INPUT if part.input_text is None else _STARTED
                length = len(part.input_text or "")
                self._sent[part.id] = _Sent(length=length, stage=stage, value=part.agent)
            elif type(part) is DataPart:
                self._sent[part.id] = _Sent(value=part.data)
            else:
                self._sent[part.id] = _Sent(value=_compaction_data(part))
        self._metadata = message.metadata

    def sync(self, message: AgentMessage | None, approvals: Mapping[str, Approval], now: float) -> list[Chunk]:
        """The chunks for everything in ``message`` the client does not have yet."""
        out: list[Chunk] = []
        if message is None:
            return out
        if message.metadata is not None and message.metadata != self._metadata:
            out.append({"type": "message-metadata", "messageMetadata": dict(message.metadata)})
            self._metadata = message.metadata
        for part in message.parts:
            kind = type(part)
            if kind is TextPart:
                assert isinstance(part, TextPart)
                self._text(part.id, "text", part.length, part.text_from, out)
            elif kind is ReasoningPart:
                assert isinstance(part, ReasoningPart)
                self._text(part.id, "reasoning", len(part.text), _tail_of(part.text), out)
            elif kind is ToolPart:
                assert isinstance(part, ToolPart)
                self._tool(part, approvals.get(part.id), now, out)
            else:
                self._data(part, out)
        return out

    def close(self) -> list[Chunk]:
        """End the open text or reasoning part, if any (before a step or the response ends)."""
        out: list[Chunk] = []
        self._switch(None, out)
        return out

    def next_due(self) -> float | None:
        """When the earliest throttled preliminary output is due (``None``: none is)."""
        dues = [s.due for s in self._sent.values() if s.due is not None]
        return min(dues) if dues else None

    def waiting_for_approval(self, message: AgentMessage | None, approvals: Mapping[str, Approval]) -> bool:
        """Whether the client has an approval request that the turn is now waiting on."""
        if message is None:
            return False
        for part in message.parts:
            if type(part) is ToolPart and part.state == "awaiting-confirmation":
                approval = approvals.get(part.id)
                sent = self._sent.get(part.id)
                if approval is not None and approval.status == "pending" and sent is not None:
                    if sent.stage == _APPROVAL:
                        return True
        return False

    # -- parts ------------------------------------------------------------------------------------

    def _switch(self, part_id: str | None, out: list[Chunk]) -> None:
        """Close the open text/reasoning part unless it is ``part_id`` (a later part has begun)."""
        current = self._open
        if current is None or current == part_id:
            return
        sent = self._sent[current]
        sent.open = False
        self._open = None
        out.append({"type": f"{sent.value}-end", "id": current})

    def _text(self, part_id: str, kind: str, length: int, tail: Callable[[int], str], out: list[Chunk]) -> None:
        sent = self._sent.get(part_id)
        if sent is None:
            self._switch(part_id, out)
            sent = self._sent[part_id] = _Sent(open=True, value=kind)
            self._open = part_id
            out.append({"type": f"{kind}-start", "id": part_id})
        if sent.open and length > sent.length:
            out.append({"type": f"{kind}-delta", "id": part_id, "delta": tail(sent.length)})
            sent.length = length

    def _tool(self, part: ToolPart, approval: Approval | None, now: float, out: list[Chunk]) -> None:
        sent = self._sent.get(part.id)
        if sent is None:
            sent = self._sent[part.id] = _Sent()
        if sent.stage == _FINAL:
            return
        call: Chunk = {"toolCallId": part.id}
        if sent.stage == _NONE:
            self._switch(part.id, out)
            out.append({"type": "tool-input-start", **call, "toolName": part.name})
            sent.stage = _STARTED
        input_text = part.input_text
        if input_text is not None:  # the arguments are still streaming
            if len(input_text) > sent.length:
                self._switch(part.id, out)
                out.append({"type": "tool-input-delta", **call, "inputTextDelta": input_text[sent.length :]})
                sent.length = len(input_text)
            return
        if sent.stage < _INPUT:
            self._switch(part.id, out)
            out.append({"type": "tool-input-available", **call, "toolName": part.name, "input": part.input})
            sent.stage = _INPUT
        state = part.state
        if state == "awaiting-confirmation":
            if approval is not None and sent.stage < _APPROVAL:
                out.append({"type": "tool-approval-request", "approvalId": approval.id, **call})
                sent.stage = _APPROVAL
            return
        if state == "running":
            if part.agent is not None and part.agent is not sent.value:
                if now - sent.sent_at >= self.throttle:
                    output = run_output(part.agent)
                    out.append({"type": "tool-output-available", **call, "output": output, "preliminary": True})
                    sent.value, sent.sent_at, sent.due = part.agent, now, None
                else:
                    sent.due = sent.sent_at + self.throttle
            return
        self._switch(part.id, out)
        if state == "done":
            result = part.output if part.agent is None else run_output(part.agent, part.output)
            out.append({"type": "tool-output-available", **call, "output": result})
        elif approval is not None and approval.status == "denied":
            if sent.stage < _APPROVAL:  # a replay: give the client the approval it answered
                out.append({"type": "tool-approval-request", "approvalId": approval.id, **call})
            out.append({"type": "tool-output-denied", **call})
        else:
            error = part.error or ("the call was cancelled" if state == "cancelled" else "the tool failed")
            out.append({"type": "tool-output-error", **call, "errorText": error})
        sent.stage, sent.due = _FINAL, None

    def _data(self, part: MessagePart, out: list[Chunk]) -> None:
        if type(part) is DataPart:
            name, data = part.name, part.data
        else:
            name, data = "compaction", _compaction_data(part)
        sent = self._sent.get(part.id)
        if sent is not None and sent.value == data:
            return
        self._switch(part.id, out)
        self._sent[part.id] = _Sent(value=data)
        out.append({"type": f"data-{name}", "id": part.id, "data": data})


def _tail_of(text: str) -> Callable[[int], str]:
    def tail(start: int) -> str:
        return text[start:]

    return tail


def _compaction_data(part: MessagePart) -> dict[str, Any]:
    wire = part_to_wire_message(part)
    wire.pop("type", None)
    wire.pop("id", None)
    return wire


# -- UIMessages (a nested run's output, and the conversation for a client's initial messages) ----------


def run_output(run: NestedRun, result: JsonValue = None) -> dict[str, Any]:
    """A delegate call's nested run as its AI SDK tool output (see the module docstring)."""
    out: dict[str, Any] = {
        "status": run.status,
        "text": result if isinstance(result, str) else _final_text(run),
        "messages": [to_ui_message(m) for m in run.messages],
    }
    if run.error is not None:
        out["error"] = run.error.message
    return out


def _final_text(run: NestedRun) -> str:
    for i in range(len(run.messages) - 1, -1, -1):
        message = run.messages.at(i)
        if message.role == "assistant":
            return message.final_text
    return ""


def to_ui_messages(state: AIState) -> list[dict[str, Any]]:
    """The conversation as AI SDK UIMessages (what ``useChat`` takes as its initial messages)."""
    approvals = approvals_of(state)
    return [to_ui_message(m, approvals) for m in state.messages]


def to_ui_message(message: AgentMessage, approvals: Mapping[str, Approval] | None = None) -> dict[str, Any]:
    """One message as an AI SDK UIMessage: what a client holds once the stream of it has ended.

    ``approvals`` (by call id) fill in approval requests and answers; nested runs have none.
    """
    out: dict[str, Any] = {
        "id": message.id,
        "role": message.role,
        "parts": [_ui_part(p, approvals or {}) for p in message.parts],
    }
    if message.role != "assistant":  # a client's own messages carry no streaming state
        for part in out["parts"]:
            part.pop("state", None)
    if message.metadata is not None:
        out["metadata"] = dict(message.metadata)
    return out


def _answer(approval: Approval) -> dict[str, Any]:
    """An answered approval as ``useChat`` holds it: ``{id, approved, reason?}`` (the user's reason kept)."""
    out: dict[str, Any] = {"id": approval.id, "approved": approval.status == "approved"}
    if approval.reason is not None:
        out["reason"] = approval.reason
    return out


def _ui_part(part: MessagePart, approvals: Mapping[str, Approval]) -> dict[str, Any]:
    if type(part) is TextPart:
        return {"type": "text", "text": part.text, "state": "done"}
    if type(part) is ReasoningPart:
        return {"type": "reasoning", "id": part.id, "text": part.text, "state": "done"}
    if type(part) is DataPart:
        return {"type": f"data-{part.name}", "id": part.id, "data": part.data}
    if type(part) is CompactionPart:
        return {"type": "data-compaction", "id": part.id, "data": _compaction_data(part)}
    assert type(part) is ToolPart
    out: dict[str, Any] = {"type": f"tool-{part.name}", "toolCallId": part.id}
    approval = approvals.get(part.id)
    state = part.state
    if part.input_text is not None:
        out.update(state="input-streaming", input=part.input)
    elif state == "running" and part.agent is not None:
        out.update(state="output-available", input=part.input, output=run_output(part.agent), preliminary=True)
    elif state == "running":
        out.update(state="input-available", input=part.input)
    elif state == "awaiting-confirmation":
        out.update(state="approval-requested", input=part.input)
        if approval is not None:
            out["approval"] = {"id": approval.id}
    elif state == "done":
        result = part.output if part.agent is None else run_output(part.agent, part.output)
        out.update(state="output-available", input=part.input, output=result)
        if approval is not None and approval.status == "approved":
            out["approval"] = _answer(approval)
    elif approval is not None and approval.status == "denied":
        out.update(state="output-denied", input=part.input, approval=_answer(approval))
    else:
        error = part.error or ("the call was cancelled" if state == "cancelled" else "the tool failed")
        out.update(state="output-error", input=part.input, errorText=error)
    return out
