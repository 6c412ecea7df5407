"""The typed payload of every built-in ``ai.*`` event, and its wire codec from one field table.

Where the typed value lives: beside the wire payload, as ``Event.data`` (see
``orchestrator.core.events``). An ``ai.*`` event built from a wire dict (a store row, an old log,
an engine call site not yet converted) decodes it once, with the trusted fast decoder, when the
event is made; one built from a typed payload encodes its wire dict once, when it is made. So
the fold only ever matches on typed payloads, every reader of ``Event.payload`` still sees the
permanent camelCase wire shape, and nothing is converted twice. Keeping the wire dict (rather
than typing ``Event.payload`` itself) keeps app events, the store's JSON checks, the CLI's
renderer and every subscriber unchanged.

Each payload is a frozen slotted dataclass with a ``type`` class variable (its event type). The
field table of a class is read from its dataclass fields once, at import: the wire key is the
camelCase of the attribute; ``_CODECS`` names the few fields whose value needs converting
(stream parts, nested actions, lists); a field whose default is ``None`` is left out of the wire
dict when it is ``None``, unless it is listed in ``_KEEP_NULL`` (today's logs write it as
``null``). From that table come ``payload_to_wire`` (encode), ``payload_from_wire`` (the
trusted fast decoder, for replay) and, through the one ``PAYLOAD_ADAPTER``, ``parse_payload``
(the validating decoder, for a payload from outside: it names the bad field).

Kept together because this module is the schema of the log: every payload type, the one union
and the tables derived from it at import. A type apart from its table, or from the union the
fold matches on, is how a stored shape drifts; the length is one short dataclass per event type.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Final, Literal, TypeAlias, cast

from pydantic import BeforeValidator, ConfigDict, Discriminator, PlainValidator, Tag, TypeAdapter, ValidationError
from pydantic.alias_generators import to_camel

from orchestrator.core import event_types as ai
from orchestrator.core._codegen import WireField, decoder, encoder
from orchestrator.core._json import JsonObject, JsonValue
from orchestrator.core.actions import SessionAction
from orchestrator.core.errors import ParseError
from orchestrator.core.parts import CompactionStatus, Role
from orchestrator.core.stream import AgentStreamPart
from orchestrator.core.wire import (
    action_from_wire,
    action_to_wire,
    parse_action,
    parse_part,
    part_from_wire,
    part_to_wire,
)

__all__ = [
    "PAYLOAD_ADAPTER",
    "PAYLOAD_CLASSES",
    "AIPayload",
    "ChildStarted",
    "CommandPayload",
    "Compaction",
    "Decided",
    "HandlerFinished",
    "HandlerScheduled",
    "Input",
    "InputAdmitted",
    "InputEdit",
    "InputMove",
    "InputRemove",
    "InputSendNow",
    "InteractionRequested",
    "ModelMetadataRequested",
    "ModelMetadataResolved",
    "Nested",
    "Pause",
    "Respond",
    "Resume",
    "SessionReset",
    "StepFailed",
    "StepFinished",
    "StepStarted",
    "StepSuperseded",
    "Stream",
    "ToolFailed",
    "ToolFinished",
    "ToolReset",
    "ToolStarted",
    "TurnFinished",
    "TurnPhase",
    "TurnPhaseChanged",
    "TurnRetry",
    "TurnStarted",
    "TurnStop",
    "parse_payload",
    "payload_from_wire",
    "payload_to_wire",
]

TurnPhase: TypeAlias = Literal["starting", "generating", "tools", "pausing", "paused"]
"""A turn's phase (``orchestrator.core.aistate.ActiveTurn.phase``; defined here, where its event is)."""

_CONFIG: Final = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")
"""How ``PAYLOAD_ADAPTER`` reads a payload: camelCase keys, and an unknown key is an error."""


def _check_parts(value: Any) -> tuple[AgentStreamPart, ...]:
    if not isinstance(value, list | tuple):
        raise ValueError("parts must be a list of stream parts")
    return tuple(parse_part(p, where=f"parts[{i}]") for i, p in enumerate(value))


def _check_actions(value: Any) -> tuple[SessionAction, ...]:
    if not isinstance(value, list | tuple):
        raise ValueError("actions must be a list of session actions")
    return tuple(parse_action(a) for a in value)


def _check_calls(value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list | tuple) or not all(
        isinstance(c, Mapping) and isinstance(c.get("id"), str) and isinstance(c.get("name"), str) for c in value
    ):
        raise ValueError("toolCalls must be a list of {id, name} objects")
    return tuple((c["id"], c["name"]) for c in value)


Parts: TypeAlias = Annotated[tuple[AgentStreamPart, ...], PlainValidator(_check_parts)]
Actions: TypeAlias = Annotated[tuple[SessionAction, ...], PlainValidator(_check_actions)]
Calls: TypeAlias = Annotated[tuple[tuple[str, str], ...], PlainValidator(_check_calls)]


# -- commands ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Input:
    """``ai.input``: a new input into the durable inbox (the event id is the message id)."""

    role: Role
    """Who speaks: a user input generates; other roles enter as context."""
    text: str
    """The input's text."""
    generate: bool = True
    """Whether it starts (or joins) a turn; ``False`` enters it passively."""
    steer: str | None = None
    """The turn it steers (enters after that turn's current step), if any."""

    type: ClassVar[Literal["ai.input"]] = "ai.input"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class InputEdit:
    """``ai.input.edit``: replace a pending input's content."""

    input_id: str
    """The pending input."""
    role: Role
    """Its new role."""
    text: str
    """Its new text."""

    type: ClassVar[Literal["ai.input.edit"]] = "ai.input.edit"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class InputMove:
    """``ai.input.move``: move a pending input."""

    input_id: str
    """The pending input."""
    before_id: str | None = None
    """The input it goes before; ``None``: to the end (written as ``null``)."""

    type: ClassVar[Literal["ai.input.move"]] = "ai.input.move"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class InputRemove:
    """``ai.input.remove``: remove a pending input (its submission stays in the log)."""

    input_id: str
    """The pending input."""

    type: ClassVar[Literal["ai.input.remove"]] = "ai.input.remove"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class InputSendNow:
    """``ai.input.send_now``: hand a queued input off to the observed turn."""

    input_id: str
    """The queued input."""
    turn_id: str | None = None
    """The turn the caller observed (written as ``null`` when none)."""

    type: ClassVar[Literal["ai.input.send_now"]] = "ai.input.send_now"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class TurnStop:
    """``ai.turn.stop``: end the observed turn now."""

    turn_id: str | None = None
    """The turn the caller observed (written as ``null`` when none)."""
    cancel_queued: bool = False
    """Whether the queued inputs are dropped too."""

    type: ClassVar[Literal["ai.turn.stop"]] = "ai.turn.stop"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class TurnRetry:
    """``ai.turn.retry``: resume from the last finished tool call."""

    turn_id: str | None = None
    """The turn the caller observed (active, or the last to end); left out when none."""

    type: ClassVar[Literal["ai.turn.retry"]] = "ai.turn.retry"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class Pause:
    """``ai.control.pause``: close admission, and with ``now`` also cancel current work."""

    when: Literal["after-turn", "now"] = "after-turn"
    """``after-turn`` lets the active turn finish; ``now`` cuts it."""

    type: ClassVar[Literal["ai.control.pause"]] = "ai.control.pause"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class Resume:
    """``ai.control.resume``: reopen admission and resume retained work."""

    type: ClassVar[Literal["ai.control.resume"]] = "ai.control.resume"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class SessionReset:
    """``ai.session.reset``: stop the active turn and start a new conversation (see ``event_types``)."""

    type: ClassVar[Literal["ai.session.reset"]] = "ai.session.reset"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class Respond:
    """``ai.interaction.respond``: answer an approval."""

    interaction_id: str
    """The approval answered."""
    approved: bool
    """Whether the call may run."""
    reason: str | None = None
    """Why (a denial's reason is told to the model)."""

    type: ClassVar[Literal["ai.interaction.respond"]] = "ai.interaction.respond"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class Decided:
    """``ai.control.decided``: whether a command was applied."""

    command_id: str
    """The command decided (its event id)."""
    outcome: Literal["applied", "rejected"]
    """The decision."""
    reason: str | None = None
    """Why it was rejected (``not-pending``, ``stale-turn``, ...)."""

    type: ClassVar[Literal["ai.control.decided"]] = "ai.control.decided"
    __pydantic_config__ = _CONFIG


# -- lifecycle ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InputAdmitted:
    """``ai.input.admitted``: passive inputs entered the conversation without a turn."""

    input_ids: tuple[str, ...]
    """The inputs, in order."""

    type: ClassVar[Literal["ai.input.admitted"]] = "ai.input.admitted"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class TurnStarted:
    """``ai.turn.started``: a turn began; its inputs enter the messages."""

    turn_id: str
    """The new turn (``t1``, ``t2``, ...)."""
    input_ids: tuple[str, ...]
    """The inputs it takes, in order (the last one generates)."""
    message_id: str
    """The assistant reply it writes."""
    retry: bool = False
    """Whether it resumes the previous turn's reply (a retry) instead of taking inputs."""

    type: ClassVar[Literal["ai.turn.started"]] = "ai.turn.started"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class TurnPhaseChanged:
    """``ai.turn.phase``: the active turn's phase changed."""

    turn_id: str
    """The turn."""
    phase: TurnPhase
    """Its new phase."""

    type: ClassVar[Literal["ai.turn.phase"]] = "ai.turn.phase"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class TurnFinished:
    """``ai.turn.finished``: a turn ended."""

    turn_id: str
    """The turn."""
    outcome: Literal["completed", "failed", "stopped", "superseded", "handed-off"] = "completed"
    """How it ended."""
    reason: str | None = None
    """A completed turn's finish reason (``stop``, ``max-steps``, ...)."""
    error: str | None = None
    """A failed turn's message."""
    code: str | None = None
    """A failed turn's error code."""

    type: ClassVar[Literal["ai.turn.finished"]] = "ai.turn.finished"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class StepStarted:
    """``ai.step.started``: a model step began."""

    turn_id: str
    """The turn it belongs to."""
    step_id: str
    """The step."""
    turn_step: int | None = None
    """Its position in the turn (older logs may leave it out: the turn's count then)."""
    session_step: int | None = None
    """Its position in the session (older logs may leave it out: the session's count then)."""
    attempt: int = 1
    """Which attempt at this position."""
    model: str = ""
    """The model's name (empty when resolving it failed)."""

    type: ClassVar[Literal["ai.step.started"]] = "ai.step.started"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class Stream:
    """``ai.stream``: a flush of the running step's parts, or a running tool's preliminary output."""

    step_id: str | None = None
    """The step that streamed them (a step's flush)."""
    call_id: str | None = None
    """The tool call that emitted them (preliminary output)."""
    parts: Parts = ()
    """The stream parts, in order, applied to the conversation as they are."""

    type: ClassVar[Literal["ai.stream"]] = "ai.stream"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class StepFinished:
    """``ai.step.finished``: a model step completed."""

    step_id: str
    """The step."""
    finish_reason: str = "stop"
    """Why the model stopped."""
    tool_calls: Calls = ()
    """The calls it made: ``(id, name)`` pairs (``[{id, name}]`` on the wire)."""
    estimate: int | None = None
    """The prompt's estimated tokens (calibrates the estimator against ``usage``)."""
    usage: JsonObject | None = None
    """The provider's usage (``inputTokens``, ``outputTokens``, ...)."""

    type: ClassVar[Literal["ai.step.finished"]] = "ai.step.finished"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class StepFailed:
    """``ai.step.failed``: a model step failed (the turn fails with it)."""

    step_id: str
    """The step."""
    error: str = ""
    """The message."""
    code: str | None = None
    """The error code, when the adapter gave one."""

    type: ClassVar[Literal["ai.step.failed"]] = "ai.step.failed"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class StepSuperseded:
    """``ai.step.superseded``: a step was cut off."""

    step_id: str
    """The step."""
    reason: str = ""
    """Why (``recovered``, ``paused``, ...)."""
    restart: bool = False
    """Whether the same position runs again (its partial output is rolled back)."""

    type: ClassVar[Literal["ai.step.superseded"]] = "ai.step.superseded"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class ToolStarted:
    """``ai.tool.started``: a tool call began running."""

    call_id: str
    """The call."""
    name: str
    """The tool."""
    attempt: int | None = None
    """Which attempt (older logs may leave it out: one more than before)."""
    recovery: Literal["rerun", "report"] | None = None
    """The call's recovery policy, when the tool comes from a dynamic source (an MCP server's
    annotations): a host restarting after a crash reads it here, without reaching the source."""

    type: ClassVar[Literal["ai.tool.started"]] = "ai.tool.started"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class ToolFinished:
    """``ai.tool.finished``: a tool call returned."""

    call_id: str
    """The call."""
    output: JsonValue = None
    """What it returned (written even when ``null``)."""

    type: ClassVar[Literal["ai.tool.finished"]] = "ai.tool.finished"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class ToolReset:
    """``ai.tool.reset``: a started call goes back to pending and runs again (``rerun``)."""

    call_id: str
    """The call."""
    reason: str = ""
    """Why (``recovered``, ``paused``, ...)."""

    type: ClassVar[Literal["ai.tool.reset"]] = "ai.tool.reset"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class ToolFailed:
    """``ai.tool.failed``: a tool call failed, was denied, cancelled or interrupted."""

    call_id: str
    """The call."""
    error: str = "The tool failed."
    """What the model is told."""
    code: str | None = None
    """``cancelled``, ``denied``, ``interrupted``, ``closed``, or another error code."""

    type: ClassVar[Literal["ai.tool.failed"]] = "ai.tool.failed"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class InteractionRequested:
    """``ai.interaction.requested``: a call waits for approval."""

    interaction_id: str
    """The approval (``approval_id(call_id)``)."""
    call_id: str
    """The call that waits."""
    prompt: str = ""
    """What the user is asked."""
    name: str | None = None
    """The tool (the call's record names it; older writers may give it here)."""

    type: ClassVar[Literal["ai.interaction.requested"]] = "ai.interaction.requested"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class ChildStarted:
    """``ai.child.started``: a delegate call started its sub-agent session."""

    call_id: str
    """The delegate call."""
    session_id: str
    """The sub-agent's session."""
    agent: str = ""
    """The sub-agent's name."""

    type: ClassVar[Literal["ai.child.started"]] = "ai.child.started"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class Nested:
    """``ai.nested``: a batch from a sub-agent, applied under its call."""

    call_id: str
    """The delegate call."""
    seq: int = 0
    """The batch's number (a batch at or below the last applied one is a duplicate)."""
    actions: Actions = ()
    """The sub-agent's session actions."""

    type: ClassVar[Literal["ai.nested"]] = "ai.nested"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class Compaction:
    """``ai.compaction``: a compaction changed status."""

    id: str
    """The compaction."""
    status: CompactionStatus
    """Where it is."""
    input_tokens: int | None = None
    """The estimated prompt that triggered it."""
    threshold_tokens: int | None = None
    """The configured threshold."""
    summary: str | None = None
    """A completed compaction's summary."""
    through: int | None = None
    """How many messages the summary covers."""
    usage: JsonObject | None = None
    """The summary request's usage."""
    error: str | None = None
    """Why a failed compaction failed."""

    type: ClassVar[Literal["ai.compaction"]] = "ai.compaction"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class ModelMetadataRequested:
    """``ai.model.metadata.requested``: the first generation with a model in this session wants its limits."""

    model: str
    """The model's name (the step's ``model``; ``AIState.model_metadata`` is keyed by it)."""
    catalog_name: str | None = None
    """The name the catalog is asked for (``None``: the adapter brings its own limits)."""

    type: ClassVar[Literal["ai.model.metadata.requested"]] = "ai.model.metadata.requested"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class HandlerScheduled:
    """``ai.handler.scheduled``: an app event's handler is due (written in the event's own batch)."""

    event_id: str
    """The app event (its id is the handler's idempotency key)."""
    event_type: str
    """Its type (the handler the agent declared for it)."""

    type: ClassVar[Literal["ai.handler.scheduled"]] = "ai.handler.scheduled"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class ModelMetadataResolved:
    """``ai.model.metadata.resolved``: a model's limits lookup landed."""

    model: str
    """The model's name."""
    status: Literal["resolved", "unavailable"]
    """``resolved`` (limits known) or ``unavailable`` (absent from the catalog)."""
    context_window: int | None = None
    """The context window in tokens, when resolved."""
    max_output_tokens: int | None = None
    """The most tokens one answer may hold, when the catalog knows it."""

    type: ClassVar[Literal["ai.model.metadata.resolved"]] = "ai.model.metadata.resolved"
    __pydantic_config__ = _CONFIG


@dataclass(frozen=True, slots=True)
class HandlerFinished:
    """``ai.handler.finished``: an app event's handler ended; it never runs for that event again."""

    event_id: str
    """The app event."""
    outcome: Literal["completed", "failed"] = "completed"
    """Whether the handler returned or raised."""
    error: str | None = None
    """A failed handler's message."""

    type: ClassVar[Literal["ai.handler.finished"]] = "ai.handler.finished"
    __pydantic_config__ = _CONFIG


CommandPayload: TypeAlias = (
    Input
    | InputEdit
    | InputMove
    | InputRemove
    | InputSendNow
    | TurnStop
    | TurnRetry
    | Pause
    | Resume
    | Respond
    | SessionReset
)
"""The payload of a command event (kept in ``AIState.pending`` until decided)."""

AIPayload: TypeAlias = (
    CommandPayload
    | Decided
    | InputAdmitted
    | TurnStarted
    | TurnPhaseChanged
    | TurnFinished
    | StepStarted
    | Stream
    | StepFinished
    | StepFailed
    | StepSuperseded
    | ToolStarted
    | ToolFinished
    | ToolReset
    | ToolFailed
    | InteractionRequested
    | ChildStarted
    | Nested
    | Compaction
    | ModelMetadataRequested
    | ModelMetadataResolved
    | HandlerScheduled
    | HandlerFinished
)
"""Every built-in event's payload; ``Event.data`` holds one."""

PAYLOAD_CLASSES: Final[dict[str, type[Any]]] = {
    cls.type: cls
    for cls in (
        Input,
        InputEdit,
        InputMove,
        InputRemove,
        InputSendNow,
        TurnStop,
        TurnRetry,
        Pause,
        Resume,
        Respond,
        SessionReset,
        Decided,
        InputAdmitted,
        TurnStarted,
        TurnPhaseChanged,
        TurnFinished,
        StepStarted,
        Stream,
        StepFinished,
        StepFailed,
        StepSuperseded,
        ToolStarted,
        ToolFinished,
        ToolReset,
        ToolFailed,
        InteractionRequested,
        ChildStarted,
        Nested,
        Compaction,
        ModelMetadataRequested,
        ModelMetadataResolved,
        HandlerScheduled,
        HandlerFinished,
    )
}
"""Event type -> payload class, for every built-in event type."""

assert set(PAYLOAD_CLASSES) == {getattr(ai, name) for name in ai.__all__ if name != "COMMAND_TYPES"}


def _strip_type(value: Any) -> Any:
    if isinstance(value, Mapping) and "type" in value:
        return {k: v for k, v in value.items() if k != "type"}
    return value


_STRIP: Final = BeforeValidator(_strip_type)
"""Drop the ``type`` tag before a payload class reads the dict (the tag is the event's, not a field)."""


def _tag(value: Any) -> str | None:
    return value.get("type") if isinstance(value, Mapping) else getattr(value, "type", None)


PAYLOAD_ADAPTER: Final[TypeAdapter[AIPayload]] = TypeAdapter(
    Annotated[
        Annotated[Input, _STRIP, Tag(ai.INPUT)]
        | Annotated[InputEdit, _STRIP, Tag(ai.INPUT_EDIT)]
        | Annotated[InputMove, _STRIP, Tag(ai.INPUT_MOVE)]
        | Annotated[InputRemove, _STRIP, Tag(ai.INPUT_REMOVE)]
        | Annotated[InputSendNow, _STRIP, Tag(ai.INPUT_SEND_NOW)]
        | Annotated[TurnStop, _STRIP, Tag(ai.TURN_STOP)]
        | Annotated[TurnRetry, _STRIP, Tag(ai.TURN_RETRY)]
        | Annotated[Pause, _STRIP, Tag(ai.PAUSE)]
        | Annotated[Resume, _STRIP, Tag(ai.RESUME)]
        | Annotated[Respond, _STRIP, Tag(ai.RESPOND)]
        | Annotated[SessionReset, _STRIP, Tag(ai.SESSION_RESET)]
        | Annotated[Decided, _STRIP, Tag(ai.DECIDED)]
        | Annotated[InputAdmitted, _STRIP, Tag(ai.INPUT_ADMITTED)]
        | Annotated[TurnStarted, _STRIP, Tag(ai.TURN_STARTED)]
        | Annotated[TurnPhaseChanged, _STRIP, Tag(ai.TURN_PHASE)]
        | Annotated[TurnFinished, _STRIP, Tag(ai.TURN_FINISHED)]
        | Annotated[StepStarted, _STRIP, Tag(ai.STEP_STARTED)]
        | Annotated[Stream, _STRIP, Tag(ai.STREAM)]
        | Annotated[StepFinished, _STRIP, Tag(ai.STEP_FINISHED)]
        | Annotated[StepFailed, _STRIP, Tag(ai.STEP_FAILED)]
        | Annotated[StepSuperseded, _STRIP, Tag(ai.STEP_SUPERSEDED)]
        | Annotated[ToolStarted, _STRIP, Tag(ai.TOOL_STARTED)]
        | Annotated[ToolFinished, _STRIP, Tag(ai.TOOL_FINISHED)]
        | Annotated[ToolReset, _STRIP, Tag(ai.TOOL_RESET)]
        | Annotated[ToolFailed, _STRIP, Tag(ai.TOOL_FAILED)]
        | Annotated[InteractionRequested, _STRIP, Tag(ai.INTERACTION_REQUESTED)]
        | Annotated[ChildStarted, _STRIP, Tag(ai.CHILD_STARTED)]
        | Annotated[Nested, _STRIP, Tag(ai.NESTED)]
        | Annotated[Compaction, _STRIP, Tag(ai.COMPACTION)]
        | Annotated[ModelMetadataRequested, _STRIP, Tag(ai.MODEL_METADATA_REQUESTED)]
        | Annotated[ModelMetadataResolved, _STRIP, Tag(ai.MODEL_METADATA_RESOLVED)]
        | Annotated[HandlerScheduled, _STRIP, Tag(ai.HANDLER_SCHEDULED)]
        | Annotated[HandlerFinished, _STRIP, Tag(ai.HANDLER_FINISHED)],
        Discriminator(_tag),
    ],
    config=ConfigDict(defer_build=True),
)
"""The one validating reader of built-in payloads: ``{"type": <event type>, **payload}`` in.

Its schema is built on first use (``defer_build``), not at import: only a payload from outside
is validated, and building it took ~250 ms of every host process's start, which a restarted
host (crash recovery) pays before it can re-activate anything."""


# -- the field table ---------------------------------------------------------------------------

_CODECS: Final[dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]]] = {
    "parts": (lambda v: [part_to_wire(p) for p in v], lambda v: tuple(part_from_wire(p) for p in v)),
    "actions": (lambda v: [action_to_wire(a) for a in v], lambda v: tuple(action_from_wire(a) for a in v)),
    "tool_calls": (
        lambda v: [{"id": i, "name": n} for i, n in v],
        lambda v: tuple((str(c["id"]), str(c["name"])) for c in v),
    ),
    "input_ids": (list, tuple),
}
"""Fields whose wire value is not the attribute itself (by attribute name, in every class)."""

_KEEP_NULL: Final = frozenset(
    {(InputMove, "before_id"), (InputSendNow, "turn_id"), (TurnStop, "turn_id"), (ToolFinished, "output")}
)
"""Optional fields that today's logs write as ``null`` rather than leave out (kept so)."""


def _table(cls: type[Any]) -> tuple[WireField, ...]:
    out = []
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING
        codec = _CODECS.get(f.name)
        out.append(
            WireField(
                f.name,
                to_camel(f.name),
                required=required,
                default=None if required else f.default,
                omit="never" if (cls, f.name) in _KEEP_NULL or f.default is not None else "none",
                encode=None if codec is None else codec[0],
                decode=None if codec is None else codec[1],
            )
        )
    return tuple(out)


_TABLES: Final = {cls: _table(cls) for cls in PAYLOAD_CLASSES.values()}
"""The field table of every payload class."""
_ENCODE: Final = {cls: encoder(cls, table) for cls, table in _TABLES.items()}
_DECODE: Final = {cls.type: decoder(cls, table) for cls, table in _TABLES.items()}


def payload_to_wire(payload: AIPayload) -> JsonObject:
    """The wire dict (camelCase) of a typed payload: the shape every stored log holds."""
    return _ENCODE[type(payload)](payload)


def payload_from_wire(kind: str, obj: Mapping[str, Any]) -> AIPayload:
    """The typed payload of a trusted wire dict (our own store, our own engine): no checks.

    A field an older log leaves out takes its default. Raises ``KeyError`` for an unknown type
    or a missing required field (a bug in the writer, not a caller's mistake).
    """
    return cast(AIPayload, _DECODE[kind](obj))


def parse_payload(kind: str, obj: object) -> AIPayload:
    """The typed payload of an untrusted wire dict, every field checked.

    Raises:
        ParseError: naming the event type and the bad field.
    """
    if kind not in PAYLOAD_CLASSES:
        raise ParseError(f"{kind!r} is not a built-in event type", "type")
    if not isinstance(obj, Mapping):
        raise ParseError(f"the payload of {kind} must be an object, got {type(obj).__name__}", "payload")
    try:
        return PAYLOAD_ADAPTER.validate_python({**obj, "type": kind})
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"][1:]) or "payload"
        raise ParseError(f"{kind} payload: {where}: {first['msg']}", f"payload.{where}") from None
    except ParseError as error:  # from the part and action readers, which name the field themselves
        raise ParseError(f"{kind} payload: {error.message}", f"payload.{error.field}") from None
