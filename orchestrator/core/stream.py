"""Stream parts: what a model adapter yields, and what the session reducer applies.

Wire names (``type`` and camelCase fields such as ``messageId``) are in ``orchestrator.core.wire``.
A part that names no message (``message_id=None``) belongs to the last message of the run, when
that is an assistant message (otherwise it is ignored: see ``orchestrator.core.reducer``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, TypeAlias

from orchestrator.core._fast import fast_init
from orchestrator.core._json import JsonObject, JsonValue
from orchestrator.core.parts import CompactionStatus, NestedRun
from orchestrator.core.state import ErrorCode

__all__ = [
    "AgentStreamPart",
    "CompactionUpdate",
    "DataUpdate",
    "Failure",
    "Finish",
    "MessageMetadata",
    "MessageStart",
    "Reasoning",
    "RunSnapshot",
    "StepFinish",
    "TextDelta",
    "ToolCall",
    "ToolFailure",
    "ToolInputDelta",
    "ToolResult",
]


@fast_init
@dataclass(frozen=True, slots=True)
class MessageStart:
    """Starts an (empty) assistant message. ``message-start`` on the wire."""

    message_id: str
    """The new message's id; a second start for the same id changes nothing."""
    metadata: JsonObject | None = None
    """Metadata to set on the message from the start."""

    type: ClassVar[Literal["message-start"]] = "message-start"


@fast_init
@dataclass(frozen=True, slots=True)
class TextDelta:
    """More text: appended to the message's last text part, or a new one. ``text-delta``."""

    delta: str
    """The text to append."""
    message_id: str | None = None
    """The message it belongs to; ``None``: the last message, when it is an assistant's."""

    type: ClassVar[Literal["text-delta"]] = "text-delta"


@fast_init
@dataclass(frozen=True, slots=True)
class Reasoning:
    """A reasoning part: kept for the next request, not rendered. ``reasoning``."""

    text: str
    """The reasoning text."""
    message_id: str | None = None
    """The message it belongs to; ``None``: the last message, when it is an assistant's."""

    type: ClassVar[Literal["reasoning"]] = "reasoning"


@fast_init
@dataclass(frozen=True, slots=True)
class ToolCall:
    """The model calls a tool: adds a ``running`` tool part (or completes a streaming one)."""

    id: str
    """The call id."""
    name: str
    """The tool's name."""
    input: JsonValue = None
    """The complete arguments."""
    message_id: str | None = None
    """The message it belongs to; ``None``: the last message, when it is an assistant's."""

    type: ClassVar[Literal["tool-call"]] = "tool-call"


@fast_init
@dataclass(frozen=True, slots=True)
class ToolInputDelta:
    """More of a tool call's argument JSON while it streams. ``tool-input-delta``."""

    id: str
    """The call id (the first delta adds the call)."""
    delta: str
    """The JSON text to append."""
    name: str | None = None
    """The tool's name; needed on the first delta of a call."""
    message_id: str | None = None
    """The message it belongs to; ``None``: the last message, when it is an assistant's."""

    type: ClassVar[Literal["tool-input-delta"]] = "tool-input-delta"


@fast_init
@dataclass(frozen=True, slots=True)
class ToolResult:
    """A call's output. Final: the call becomes ``done``. ``tool-result``."""

    id: str
    """The call id."""
    output: JsonValue = None
    """What the tool returned."""
    preliminary: bool = False
    """Output shown while the tool still runs; the call stays ``running``."""

    type: ClassVar[Literal["tool-result"]] = "tool-result"


@fast_init
@dataclass(frozen=True, slots=True)
class ToolFailure:
    """A call failed (``error``), or was cancelled (``code == "cancelled"``). ``tool-error``."""

    id: str
    """The call id."""
    error: str
    """What went wrong; the model sees it."""
    code: str | None = None
    """``cancelled`` marks the call cancelled rather than failed."""

    type: ClassVar[Literal["tool-error"]] = "tool-error"

    @property
    def is_cancelled(self) -> bool:
        """Whether this error means the call was cancelled (the seed's ``isCancelled``)."""
        return self.code == "cancelled"


@fast_init
@dataclass(frozen=True, slots=True)
class StepFinish:
    """A model step ended (its usage). Changes nothing in the conversation. ``step-finish``."""

    usage: JsonObject | None = None
    """Token usage of the step, e.g. ``{"inputTokens": 10, "outputTokens": 3}``."""
    finish_reason: str | None = None
    """Why the step ended (``stop``, ``tool-calls``, ``length``, ...)."""

    type: ClassVar[Literal["step-finish"]] = "step-finish"


@fast_init
@dataclass(frozen=True, slots=True)
class Finish:
    """The run ended: ``idle``; with ``reason == "aborted"`` open calls are cancelled."""

    reason: str = "stop"
    """``stop``, ``length``, ``content-filter``, ``tool-calls``, ``error``, ``other`` or ``aborted``."""

    type: ClassVar[Literal["finish"]] = "finish"


@fast_init
@dataclass(frozen=True, slots=True)
class Failure:
    """The run failed: ``error`` status, the error set, open calls cancelled. ``error``."""

    error: str
    """What went wrong, for people."""
    code: ErrorCode | None = None
    """``chat_disabled``, ``rate_limited``, ``bad_request`` or ``network``."""

    type: ClassVar[Literal["error"]] = "error"


@fast_init
@dataclass(frozen=True, slots=True)
class MessageMetadata:
    """Metadata shallow-merged onto a message (the ``message_metadata`` hook's output)."""

    metadata: JsonObject
    """Keys to merge."""
    message_id: str | None = None
    """The message; ``None``: the last message, when it is an assistant's."""

    type: ClassVar[Literal["message-metadata"]] = "message-metadata"


@fast_init
@dataclass(frozen=True, slots=True)
class DataUpdate:
    """Adds an app data part, or replaces the one with the same id. ``data``."""

    name: str
    """The app's name for this data."""
    data: JsonValue = None
    """The payload."""
    id: str | None = None
    """Part id; ``None`` gives the next positional id."""
    message_id: str | None = None
    """The message; ``None``: the last message, when it is an assistant's."""

    type: ClassVar[Literal["data"]] = "data"


@fast_init
@dataclass(frozen=True, slots=True)
class CompactionUpdate:
    """Adds or updates the compaction part with this id. ``compaction``."""

    id: str
    """The compaction's id."""
    status: CompactionStatus
    """``running``, ``completed``, ``failed`` or ``interrupted``."""
    summary: str | None = None
    """The summary, once completed."""
    input_tokens: int | None = None
    """The estimate that triggered it."""
    threshold_tokens: int | None = None
    """The threshold it crossed."""
    usage: JsonObject | None = None
    """The summary request's usage."""
    message_id: str | None = None
    """The message; ``None``: the last message, when it is an assistant's."""

    type: ClassVar[Literal["compaction"]] = "compaction"


@fast_init
@dataclass(frozen=True, slots=True)
class RunSnapshot:
    """A sub-agent's whole run, replacing the nested run it is applied to. ``nested-run``.

    A sub-agent sends one when it attaches to its parent and after it rewinds (a restarted
    step), so the parent's nested copy converges whatever batches it missed. Applied at the top
    level (with no ``within``) it changes nothing.
    """

    run: NestedRun
    """The sub-agent's run as it is now."""

    type: ClassVar[Literal["nested-run"]] = "nested-run"


AgentStreamPart: TypeAlias = (
    MessageStart
    | TextDelta
    | Reasoning
    | ToolCall
    | ToolInputDelta
    | ToolResult
    | ToolFailure
    | StepFinish
    | Finish
    | Failure
    | MessageMetadata
    | DataUpdate
    | CompactionUpdate
    | RunSnapshot
)
