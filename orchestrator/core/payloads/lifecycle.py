"""The payloads of what a session did, written as it runs rather than asked for by a caller.

Turns (and the inputs admitted without one), model steps and their streamed parts, tool calls,
approvals and sub-agents, then compaction, model metadata and app-event handlers. The engine,
the planner and recovery write them; the fold applies them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, TypeAlias

from orchestrator.core._fast import fast_init
from orchestrator.core._json import JsonObject, JsonValue
from orchestrator.core.parts import CompactionStatus
from orchestrator.core.payloads._fields import _CONFIG, Actions, Calls, Parts

__all__ = [
    "ChildStarted",
    "Compaction",
    "HandlerFinished",
    "HandlerScheduled",
    "InputAdmitted",
    "InteractionRequested",
    "ModelMetadataRequested",
    "ModelMetadataResolved",
    "Nested",
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
    "TurnStarted",
]

TurnPhase: TypeAlias = Literal["starting", "generating", "tools", "pausing", "paused"]
"""A turn's phase (``orchestrator.core.aistate.ActiveTurn.phase``; defined here, where its event is)."""


@fast_init
@dataclass(frozen=True, slots=True)
class InputAdmitted:
    """``ai.input.admitted``: passive inputs entered the conversation without a turn."""

    input_ids: tuple[str, ...]
    """The inputs, in order."""

    type: ClassVar[Literal["ai.input.admitted"]] = "ai.input.admitted"
    __pydantic_config__ = _CONFIG


@fast_init
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


@fast_init
@dataclass(frozen=True, slots=True)
class TurnPhaseChanged:
    """``ai.turn.phase``: the active turn's phase changed."""

    turn_id: str
    """The turn."""
    phase: TurnPhase
    """Its new phase."""

    type: ClassVar[Literal["ai.turn.phase"]] = "ai.turn.phase"
    __pydantic_config__ = _CONFIG


@fast_init
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


@fast_init
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


@fast_init
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


@fast_init
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


@fast_init
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


@fast_init
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


@fast_init
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


@fast_init
@dataclass(frozen=True, slots=True)
class ToolFinished:
    """``ai.tool.finished``: a tool call returned."""

    call_id: str
    """The call."""
    output: JsonValue = None
    """What it returned (written even when ``null``)."""

    type: ClassVar[Literal["ai.tool.finished"]] = "ai.tool.finished"
    __pydantic_config__ = _CONFIG


@fast_init
@dataclass(frozen=True, slots=True)
class ToolReset:
    """``ai.tool.reset``: a started call goes back to pending and runs again (``rerun``)."""

    call_id: str
    """The call."""
    reason: str = ""
    """Why (``recovered``, ``paused``, ...)."""

    type: ClassVar[Literal["ai.tool.reset"]] = "ai.tool.reset"
    __pydantic_config__ = _CONFIG


@fast_init
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


@fast_init
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


@fast_init
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


@fast_init
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


@fast_init
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


@fast_init
@dataclass(frozen=True, slots=True)
class ModelMetadataRequested:
    """``ai.model.metadata.requested``: the first generation with a model in this session wants its limits."""

    model: str
    """The model's name (the step's ``model``; ``AIState.model_metadata`` is keyed by it)."""
    catalog_name: str | None = None
    """The name the catalog is asked for (``None``: the adapter brings its own limits)."""

    type: ClassVar[Literal["ai.model.metadata.requested"]] = "ai.model.metadata.requested"
    __pydantic_config__ = _CONFIG


@fast_init
@dataclass(frozen=True, slots=True)
class HandlerScheduled:
    """``ai.handler.scheduled``: an app event's handler is due (written in the event's own batch)."""

    event_id: str
    """The app event (its id is the handler's idempotency key)."""
    event_type: str
    """Its type (the handler the agent declared for it)."""

    type: ClassVar[Literal["ai.handler.scheduled"]] = "ai.handler.scheduled"
    __pydantic_config__ = _CONFIG


@fast_init
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


@fast_init
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
