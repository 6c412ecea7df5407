"""The conversation's values: message parts, nested runs and messages.

All of them are immutable. They are built on the reducer's hot path (once per stream part), so
construction never validates: validation happens where data enters (``orchestrator.core.wire``).
``TextPart`` and ``ToolPart`` keep their growing text in an append buffer shared between versions
(``orchestrator.core._rope``: the part holds the buffer and a length itself, a call's streaming
arguments are a ``Rope``) so streaming a long text stays linear; everything else is a frozen
slotted dataclass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeAlias, cast

from orchestrator.core._fast import fast_init, slot_setter
from orchestrator.core._json import JsonObject, JsonValue, partial_json
from orchestrator.core._pvec import PVec
from orchestrator.core._rope import Rope, TextBuffer

__all__ = [
    "ERROR_CODES",
    "OPEN_TOOL_STATES",
    "AgentMessage",
    "CompactionPart",
    "CompactionStatus",
    "DataPart",
    "ErrorCode",
    "MessagePart",
    "NestedRun",
    "ReasoningPart",
    "Role",
    "RunStatus",
    "SessionError",
    "TextPart",
    "ToolPart",
    "ToolState",
    "settle_texts",
]

Role: TypeAlias = Literal["user", "assistant", "system"]
ToolState: TypeAlias = Literal["running", "awaiting-confirmation", "done", "error", "cancelled"]
RunStatus: TypeAlias = Literal["idle", "streaming", "error"]
CompactionStatus: TypeAlias = Literal["running", "completed", "failed", "interrupted"]

OPEN_TOOL_STATES: frozenset[str] = frozenset({"running", "awaiting-confirmation"})
"""Tool states that a stop, an abort or an error turn into ``cancelled``."""

ErrorCode: TypeAlias = Literal["chat_disabled", "rate_limited", "bad_request", "network"]
ERROR_CODES: frozenset[str] = frozenset({"chat_disabled", "rate_limited", "bad_request", "network"})


@dataclass(frozen=True, slots=True)
class SessionError:
    """A run's failure: its text, and a code a UI can explain."""

    message: str
    """What went wrong, for people."""
    code: ErrorCode | None = None
    """``chat_disabled``, ``rate_limited``, ``bad_request`` or ``network``; ``None`` otherwise."""


_new = object.__new__
_setattr = object.__setattr__


def _refuse_set(self: object, name: str, value: object) -> None:
    raise AttributeError(f"{type(self).__name__} is immutable; build a new one instead")


def _refuse_delete(self: object, name: str) -> None:
    raise AttributeError(f"{type(self).__name__} is immutable")


# Immutability for the hand-written value classes (dataclasses do this themselves) is set in each
# class rather than inherited from a mixin: the reducer's hot path builds a ToolPart in a plain
# draft class and seals it into its class (``orchestrator.core._fast``), which CPython allows only
# between classes with the same base.


class TextPart:
    """Text the assistant (or the user) wrote. Deltas append to the last text part of a message."""

    __slots__ = ("_buf", "_size", "id")
    __setattr__ = _refuse_set
    __delattr__ = _refuse_delete

    id: str
    """Stable part id: ``<message id>:<position>``, so a client can replace the part in place."""
    # The text is the first ``_size`` characters of ``_buf``, shared with the part's other versions
    # (see ``orchestrator.core._rope``; this is a ``Rope`` inlined, one object fewer per delta).
    _buf: TextBuffer
    _size: int

    type: ClassVar[Literal["text"]] = "text"

    def __init__(self, id: str, text: str = "") -> None:
        _setattr(self, "id", id)
        _setattr(self, "_buf", TextBuffer(text))
        _setattr(self, "_size", len(text))

    @property
    def text(self) -> str:
        """The text so far."""
        return self._buf.read(self._size)

    @property
    def length(self) -> int:
        """The text's length, without building the string."""
        return self._size

    def text_from(self, start: int) -> str:
        """The text from ``start`` on (a delta), without joining what comes before."""
        return self._buf.read_range(start, self._size)

    def extended(self, delta: str) -> TextPart:
        """This part with ``delta`` appended (amortised O(len(delta)))."""
        part: TextPart = _new(TextPart)
        _text_id(part, self.id)
        _text_buf(part, self._buf.grow(self._size, delta) if delta else self._buf)
        _text_size(part, self._size + len(delta))
        return part

    def settle(self) -> None:
        """Hold the finished text as one string (``TextBuffer.settle``); the value is unchanged."""
        self._buf.settle()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TextPart):
            return NotImplemented
        return (
            self.id == other.id
            and self._size == other._size
            and (self._buf is other._buf or self.text == other.text)  # one buffer: the same text
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TextPart(id={self.id!r}, text={self.text!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (TextPart, (self.id, self.text))


_text_id = slot_setter(TextPart, "id")
_text_buf = slot_setter(TextPart, "_buf")
_text_size = slot_setter(TextPart, "_size")


@dataclass(frozen=True, slots=True)
class ReasoningPart:
    """The model's reasoning. Kept for the next request, not rendered as the reply."""

    id: str
    """Stable part id: ``<message id>:<position>``."""
    text: str
    """The reasoning text."""

    type: ClassVar[Literal["reasoning"]] = "reasoning"


@fast_init
@dataclass(frozen=True, slots=True)
class NestedRun:
    """A sub-agent's run, nested under the ``delegate_to_<agent>`` call that started it.

    It is a session of its own (the same state machine applies to it), so it has its own
    messages, status and error. A nested ``finish`` or ``error`` ends only this run.
    """

    messages: PVec[AgentMessage] = field(default_factory=PVec)
    """The sub-agent's conversation."""
    status: RunStatus = "streaming"
    """Whether the sub-agent is still streaming, is done (``idle``), or failed (``error``)."""
    error: SessionError | None = None
    """The sub-agent's failure, when ``status`` is ``error``."""

    def __post_init__(self) -> None:
        if not isinstance(cast(object, self.messages), PVec):  # a plain list is accepted too
            object.__setattr__(self, "messages", PVec(self.messages))


class ToolPart:
    """A tool call and what became of it.

    ``input`` is the complete, model-provided input once the call is known. While the model is
    still streaming the arguments, ``input_text`` holds the JSON text so far and ``input`` is a
    best-effort partial parse of it (a display draft, never validated input), parsed on first
    read rather than on every delta.
    """

    __slots__ = ("_input", "_input_text", "agent", "error", "id", "name", "output", "prompt", "state")
    __setattr__ = _refuse_set
    __delattr__ = _refuse_delete

    id: str
    """The tool call id, unique in the session; also the idempotency key for side effects."""
    name: str
    """The tool's name, e.g. ``add_to_cart`` or ``delegate_to_researcher``."""
    state: ToolState
    """``running``, ``awaiting-confirmation``, ``done``, ``error`` or ``cancelled``."""
    output: JsonValue
    """The result (final when ``done``; preliminary output while ``running``)."""
    error: str | None
    """The error message when ``error`` or ``cancelled``."""
    prompt: str | None
    """What to ask the user while ``awaiting-confirmation``."""
    agent: NestedRun | None
    """The sub-agent's run behind a delegate call."""
    _input: JsonValue
    _input_text: Rope | None

    type: ClassVar[Literal["tool"]] = "tool"

    def __init__(
        self,
        id: str,
        name: str,
        input: JsonValue = None,
        state: ToolState = "running",
        *,
        output: JsonValue = None,
        error: str | None = None,
        prompt: str | None = None,
        agent: NestedRun | None = None,
        input_text: str | None = None,
    ) -> None:
        _setattr(self, "id", id)
        _setattr(self, "name", name)
        _setattr(self, "state", state)
        _setattr(self, "output", output)
        _setattr(self, "error", error)
        _setattr(self, "prompt", prompt)
        _setattr(self, "agent", agent)
        _setattr(self, "_input_text", None if input_text is None else Rope(input_text))
        _setattr(self, "_input", input if input_text is None else _LAZY)

    @property
    def input(self) -> JsonValue:
        """The call's arguments (a draft parsed from ``input_text`` while they stream)."""
        value = self._input
        if value is _LAZY:
            value = partial_json(str(self._input_text))
            _setattr(self, "_input", value)
        return value

    @property
    def input_text(self) -> str | None:
        """The argument JSON streamed so far, or ``None`` once the complete input is known."""
        text = self._input_text
        return None if text is None else str(text)

    @property
    def input_rope(self) -> Rope | None:
        """The streaming argument text as a rope (for deltas), or ``None``."""
        return self._input_text

    @property
    def is_open(self) -> bool:
        """Whether the call can still change state (``running`` or ``awaiting-confirmation``)."""
        return self.state in OPEN_TOOL_STATES

    def replace(self, **changes: Any) -> ToolPart:
        """A copy with ``changes`` applied (keyword names as in the constructor).

        Setting ``input`` ends argument streaming (``input_text`` becomes ``None``).
        """
        input_value = self._input
        input_text = self._input_text
        if "input" in changes:
            input_value, input_text = changes["input"], None
        if "input_text" in changes:
            text = changes["input_text"]
            input_text = None if text is None else Rope(text)
            input_value = _LAZY if text is not None else None
        return _make_tool(
            self.id,
            changes.get("name", self.name),
            input_value,
            input_text,
            changes.get("state", self.state),
            changes.get("output", self.output),
            changes.get("error", self.error),
            changes.get("prompt", self.prompt),
            changes.get("agent", self.agent),
        )

    def with_agent(self, agent: NestedRun) -> ToolPart:
        """This call with its nested run replaced (the nested streaming hot path)."""
        return _make_tool(
            self.id, self.name, self._input, self._input_text, self.state, self.output, self.error, self.prompt, agent
        )

    def with_input_delta(self, delta: str) -> ToolPart:
        """This call with ``delta`` appended to its streaming argument text."""
        current = self._input_text
        text = (current if current is not None else Rope()) + delta
        return _make_tool(self.id, self.name, _LAZY, text, self.state, self.output, self.error, self.prompt, self.agent)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ToolPart):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in _TOOL_FIELDS)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = ", ".join(f"{s}={getattr(self, s)!r}" for s in _TOOL_FIELDS if getattr(self, s) is not None)
        return f"ToolPart({shown})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_tool, tuple(getattr(self, s) for s in _TOOL_FIELDS))


_LAZY: Any = type("_Draft", (), {"__repr__": lambda self: "<draft>"})()
_t_id = slot_setter(ToolPart, "id")
_t_name = slot_setter(ToolPart, "name")
_t_input = slot_setter(ToolPart, "_input")
_t_input_text = slot_setter(ToolPart, "_input_text")
_t_state = slot_setter(ToolPart, "state")
_t_output = slot_setter(ToolPart, "output")
_t_error = slot_setter(ToolPart, "error")
_t_prompt = slot_setter(ToolPart, "prompt")
_t_agent = slot_setter(ToolPart, "agent")


def _make_tool(
    id: str,
    name: str,
    input: Any,
    input_text: Rope | None,
    state: ToolState,
    output: JsonValue,
    error: str | None,
    prompt: str | None,
    agent: NestedRun | None,
) -> ToolPart:
    part: ToolPart = _new(ToolPart)
    _t_id(part, id)
    _t_name(part, name)
    _t_input(part, input)
    _t_input_text(part, input_text)
    _t_state(part, state)
    _t_output(part, output)
    _t_error(part, error)
    _t_prompt(part, prompt)
    _t_agent(part, agent)
    return part


_TOOL_FIELDS = ("id", "name", "input", "state", "output", "error", "prompt", "agent", "input_text")


def _rebuild_tool(
    id: str,
    name: str,
    input: JsonValue,
    state: ToolState,
    output: JsonValue,
    error: str | None,
    prompt: str | None,
    agent: NestedRun | None,
    input_text: str | None,
) -> ToolPart:
    part = ToolPart(id, name, input, state, output=output, error=error, prompt=prompt, agent=agent)
    return part if input_text is None else part.replace(input_text=input_text)


@dataclass(frozen=True, slots=True)
class CompactionPart:
    """A record that the context was compacted (it never enters the model's context itself)."""

    id: str
    """Stable id of this compaction."""
    status: CompactionStatus
    """``running``, then ``completed``, ``failed`` or ``interrupted``."""
    summary: str | None = None
    """The summary that replaces the earlier context in later requests, once completed."""
    input_tokens: int | None = None
    """The estimated prompt size that triggered it."""
    threshold_tokens: int | None = None
    """The threshold it crossed."""
    usage: JsonObject | None = None
    """The summary request's token usage."""

    type: ClassVar[Literal["compaction"]] = "compaction"


@dataclass(frozen=True, slots=True)
class DataPart:
    """App-defined data shown in the conversation (e.g. a card); replaced by id."""

    id: str
    """Stable part id; a later data part with the same id replaces this one."""
    name: str
    """The app's name for this kind of data (``data-<name>`` on the AI SDK wire)."""
    data: JsonValue
    """The payload."""

    type: ClassVar[Literal["data"]] = "data"


MessagePart: TypeAlias = TextPart | ReasoningPart | ToolPart | CompactionPart | DataPart


@fast_init
@dataclass(frozen=True, slots=True)
class AgentMessage:
    """One message of the conversation."""

    id: str
    """Unique in the session (for user inputs: the input's event id)."""
    role: Role
    """``user``, ``assistant`` or ``system``."""
    parts: tuple[MessagePart, ...] = ()
    """What the message holds, in order."""
    revision: int = 0
    """Bumped on every change, so a client replaces a message only by a newer revision."""
    metadata: Mapping[str, JsonValue] | None = None
    """App metadata merged onto the message (e.g. ``{"status": "complete", "usage": ...}``)."""

    def __post_init__(self) -> None:
        if not isinstance(cast(object, self.parts), tuple):  # a list is accepted too
            object.__setattr__(self, "parts", tuple(self.parts))

    @property
    def text(self) -> str:
        """All text parts joined: the message as plain text."""
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def final_text(self) -> str:
        """The text after the last tool call: the answer a tool loop ends with."""
        parts = self.parts
        start = 0
        for i in range(len(parts) - 1, -1, -1):
            if isinstance(parts[i], ToolPart):
                start = i + 1
                break
        return "".join(p.text for p in parts[start:] if isinstance(p, TextPart))


def messages_of(items: Sequence[AgentMessage] | PVec[AgentMessage]) -> PVec[AgentMessage]:
    """``items`` as the persistent vector the state holds."""
    return items if isinstance(items, PVec) else PVec(items)


_set_msg_id = slot_setter(AgentMessage, "id")
_set_msg_role = slot_setter(AgentMessage, "role")
_set_msg_parts = slot_setter(AgentMessage, "parts")
_set_msg_revision = slot_setter(AgentMessage, "revision")
_set_msg_metadata = slot_setter(AgentMessage, "metadata")


def revised(message: AgentMessage, parts: tuple[MessagePart, ...]) -> AgentMessage:
    """``message`` with new ``parts`` and the next revision (the reducer's hot path)."""
    new: AgentMessage = _new(AgentMessage)
    _set_msg_id(new, message.id)
    _set_msg_role(new, message.role)
    _set_msg_parts(new, parts)
    _set_msg_revision(new, message.revision + 1)
    _set_msg_metadata(new, message.metadata)
    return new


def with_metadata(message: AgentMessage, metadata: Mapping[str, JsonValue]) -> AgentMessage:
    """``message`` with ``metadata`` shallow-merged onto its own, as the next revision."""
    new = revised(message, message.parts)
    _set_msg_metadata(new, {**(message.metadata or {}), **metadata})
    return new


def settle_texts(messages: Sequence[AgentMessage]) -> None:
    """Hold a finished turn's texts as one string each (``TextPart.settle``); no value changes.

    The reducer calls it when a run finishes, fails or is stopped; a client's view when a run's
    status leaves ``streaming``.

    Walks the trailing assistant messages (the turn's reply), the nested runs of their calls,
    and their calls' streamed arguments. A reply streamed in many deltas keeps each as a string
    of its own until the text is read, and a host reads few of the texts it keeps: ~4 KB of a
    `bench shop` session's ~26 KB on the heap were these strings.
    """
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role != "assistant":
            return
        for part in message.parts:
            if isinstance(part, TextPart):
                part.settle()
            elif isinstance(part, ToolPart):
                rope = part.input_rope
                if rope is not None:
                    rope.settle()
                if part.agent is not None:
                    settle_texts(part.agent.messages)
