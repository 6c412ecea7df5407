"""``AIState``: everything Troupe folds out of a session's log.

The conversation (``messages``, ``status``, ``error``) is the session reducer's state; around it
sit the durable inbox, the active turn, the tool calls' execution status, interactions
(approvals), compaction, the last command receipt and token usage. A contract's app state is
merged in: ``state.app`` holds it and ``state["plan"]`` / ``state.plan`` read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, TypeVar

from orchestrator.core._fast import fast_init, replacer
from orchestrator.core._pvec import PVec
from orchestrator.core.parts import AgentMessage, Role, RunStatus
from orchestrator.core.payloads import CommandPayload, TurnPhase
from orchestrator.core.state import SessionError, SessionState

__all__ = [
    "AIState",
    "ActiveTurn",
    "CompactionState",
    "DueHandler",
    "Inbox",
    "InboxItem",
    "Interaction",
    "ModelMetadata",
    "Receipt",
    "StepState",
    "ToolRecord",
    "TurnPhase",
    "Usage",
    "changed",
]

T = TypeVar("T")

ToolStatus: TypeAlias = Literal[
    "pending", "awaiting-approval", "approved", "running", "done", "error", "cancelled", "denied", "interrupted"
]
FINAL_TOOL_STATUSES: frozenset[str] = frozenset({"done", "error", "cancelled", "denied", "interrupted"})


@dataclass(frozen=True, slots=True)
class InboxItem:
    """A pending input: persisted, not yet in the conversation, never in the model prompt."""

    id: str
    """The input id: its event id, and the message id it will have."""
    role: Role
    """``user`` (or ``system`` / ``assistant`` context)."""
    text: str
    """The latest accepted content (edits are last-write-wins in log order)."""
    generate: bool = True
    """Whether it asks for a reply; passive context enters with the next generating input."""
    after_step_of: str | None = None
    """The turn it steers (it hands off after that turn's current response and tools)."""

    @property
    def message(self) -> AgentMessage:
        """The message it will become."""
        from orchestrator.core.parts import TextPart

        return AgentMessage(self.id, self.role, (TextPart(f"{self.id}:0", self.text),))


@fast_init
@dataclass(frozen=True, slots=True)
class Inbox:
    """The durable inbox: pending inputs in admission order, and whether admission is paused."""

    items: tuple[InboxItem, ...] = ()
    """Pending inputs, in the order they will be admitted."""
    paused: bool = False
    """Admission is closed (``pause``) until ``resume``."""

    def get(self, input_id: str) -> InboxItem | None:
        """The pending input with this id, if any."""
        for item in self.items:
            if item.id == input_id:
                return item
        return None


@fast_init
@dataclass(frozen=True, slots=True)
class StepState:
    """The turn's current (or last) model step."""

    id: str
    """The step id (``<turn>.<n>`` plus an attempt suffix after a restart)."""
    turn_step: int
    """Its position in the turn (steps counted before it)."""
    session_step: int
    """Its position in the session."""
    status: Literal["running", "finished", "failed", "superseded"] = "running"
    """Where it is."""
    finish_reason: str | None = None
    """Why it finished (``stop``, ``tool-calls``, ``length``, ...)."""
    tool_calls: tuple[str, ...] = ()
    """The calls it asked for, in order."""
    model: str = ""
    """The model that ran it."""
    attempt: int = 1
    """Which attempt at this position (a restart after a crash or a pause replays it)."""


@dataclass(frozen=True, slots=True)
class ActiveTurn:
    """The logical turn: its id holds across model steps, tools and a pause."""

    id: str
    """The turn id."""
    input: tuple[str, ...]
    """The input ids admitted for it (the last one is the one generating)."""
    phase: TurnPhase
    """``starting``, ``generating``, ``tools``, ``pausing`` or ``paused``."""
    message_id: str
    """The id of the assistant message it writes."""
    index: int
    """How many turns the session started before it."""
    steps: int = 0
    """Model steps this turn has completed (finished or failed)."""
    step: StepState | None = None
    """The current or last model step."""
    paused_from: TurnPhase | None = None
    """The phase it was in when paused, to resume into."""
    interrupted: bool = False
    """Pause now cut its work; steering that targets it hands off instead of resuming that work."""
    calls: tuple[str, ...] = ()
    """The calls whose records it made, in order (the only ones its end may cancel: ``tools``
    keeps every call of the session)."""


@dataclass(frozen=True, slots=True)
class ToolRecord:
    """A tool call's execution status (inputs and outputs live in the message parts)."""

    id: str
    """The call id."""
    name: str
    """The tool's name."""
    turn_id: str
    """The turn whose step asked for it."""
    status: ToolStatus = "pending"
    """``pending`` -> (``awaiting-approval`` -> ``approved``) -> ``running`` -> a final status."""
    attempts: int = 0
    """How many times it started running (a ``rerun`` tool may start again after a crash)."""
    interaction_id: str | None = None
    """The approval it waits for, if any."""
    child: str | None = None
    """The sub-agent session behind a delegate call."""
    child_seq: int = 0
    """The last batch of that sub-agent applied under the call (duplicates are dropped)."""
    recovery: str | None = None
    """The policy its start recorded (a tool from a dynamic source); ``None``: the agent's tool says."""

    @property
    def final(self) -> bool:
        """Whether the call has its final outcome."""
        return self.status in FINAL_TOOL_STATUSES


@dataclass(frozen=True, slots=True)
class DueHandler:
    """An app event whose handler has not finished (it runs, or runs again after a crash)."""

    event_id: str
    """The app event (the handler's idempotency key)."""
    event_type: str
    """Its type."""
    index: int
    """The log index of its ``ai.handler.scheduled`` (the event itself is just before it)."""


@dataclass(frozen=True, slots=True)
class Interaction:
    """A question to the user (an approval), tied to a tool call."""

    id: str
    """The interaction id (what ``respond`` names)."""
    call_id: str
    """The tool call waiting for it."""
    name: str
    """The tool's name."""
    prompt: str
    """What to ask."""
    status: Literal["pending", "approved", "denied", "closed"] = "pending"
    """``pending`` until answered; ``closed`` when a handoff or stop ended the turn first."""
    reason: str | None = None
    """What the user wrote with the answer (a denial's reason), kept so every reader shows it."""


@dataclass(frozen=True, slots=True)
class CompactionState:
    """The current or latest compaction."""

    id: str
    """The compaction id (also its part id)."""
    status: Literal["running", "completed", "failed", "interrupted"]
    """Where it is."""
    summary: str | None = None
    """The summary that replaces the messages it covers, once completed."""
    through: int = 0
    """How many messages (from the start) the summary covers."""
    input_tokens: int | None = None
    """The estimate that triggered it."""
    threshold_tokens: int | None = None
    """The threshold it crossed."""


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    """What the session knows of a model's limits (for the default compaction threshold)."""

    status: Literal["pending", "resolved", "unavailable"]
    """``pending`` from the first generation with the model until its lookup lands; then
    ``resolved`` (limits known) or ``unavailable`` (absent from the catalog). A lookup that never
    lands stays ``pending``: the session does not compact by default until it does."""
    context_window: int | None = None
    """The model's context window in tokens, once resolved."""
    max_output_tokens: int | None = None
    """The most tokens it writes in one response, when the catalog knows it."""


@dataclass(frozen=True, slots=True)
class Receipt:
    """The most recent command's application."""

    command_id: str
    """The command's event id."""
    outcome: Literal["applied", "rejected"]
    """Whether it took effect."""
    reason: str | None = None
    """Why it was rejected (``not-pending``, ``stale-turn``, ...)."""


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage: session totals, and the last step's per model (to calibrate estimates)."""

    input_tokens: int = 0
    """Prompt tokens over the session."""
    output_tokens: int = 0
    """Completion tokens over the session."""
    calibration: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """Per model name: (estimated tokens, actual input tokens) of its last step."""


@dataclass(frozen=True, slots=True)
class AIState:
    """The fold of a session's log (see the module docstring)."""

    session: SessionState = field(default_factory=SessionState)
    """The conversation state (the session reducer's)."""
    inbox: Inbox = field(default_factory=Inbox)
    """Pending inputs and whether admission is paused."""
    active: ActiveTurn | None = None
    """The turn in progress, if any."""
    tools: Mapping[str, ToolRecord] = field(default_factory=dict)
    """Tool calls' execution status, by call id."""
    interactions: Mapping[str, Interaction] = field(default_factory=dict)
    """Approvals, by interaction id."""
    compaction: CompactionState | None = None
    """The current or latest compaction."""
    model_metadata: Mapping[str, ModelMetadata] = field(default_factory=dict)
    """Per model name (the step's ``model``): its limits and the lookup's status."""
    receipt: Receipt | None = None
    """The most recent command receipt."""
    usage: Usage = field(default_factory=Usage)
    """Token usage."""
    turns: int = 0
    """How many turns the session has started."""
    session_steps: int = 0
    """How many model steps the session has completed (finished or failed)."""
    pending: Mapping[str, CommandPayload] = field(default_factory=dict)
    """Commands persisted but not yet decided: id -> typed payload (its ``type`` is the event's)."""
    last_turn: tuple[str, str] | None = None
    """The last finished turn: (id, outcome)."""
    retry_requested: bool = False
    """An applied retry that the executor has not started yet."""
    starting: bool = False
    """Optimistic display: a send awaiting acceptance (only ever true on a client)."""
    due_handlers: Mapping[str, DueHandler] = field(default_factory=dict)
    """App events whose handler has not finished, by event id (``Agent.handlers``)."""
    app: Mapping[str, Any] = field(default_factory=dict)
    """The contract's app state (merged: ``state.plan`` reads ``app["plan"]``)."""

    @property
    def messages(self) -> PVec[AgentMessage]:
        """The conversation."""
        return self.session.messages

    @property
    def status(self) -> RunStatus:
        """``idle``, ``streaming`` or ``error``."""
        return self.session.status

    @property
    def error(self) -> SessionError | None:
        """The last run's failure."""
        return self.session.error

    @property
    def indicator(self) -> Literal["compacting"] | None:
        """``"compacting"`` while a compaction runs, else ``None`` (what a UI shows beside the status)."""
        compaction = self.compaction
        return "compacting" if compaction is not None and compaction.status == "running" else None

    def __getitem__(self, key: str) -> Any:
        return self.app[key]

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not fields: the merged app state.
        app = object.__getattribute__(self, "app")
        if name in app:
            return app[name]
        raise AttributeError(f"AIState has no field or app state key {name!r}")

    def with_(self, **changes: Any) -> AIState:
        """A copy with ``changes`` (``dataclasses.replace``, without its checks: the fold's hot path)."""
        return changed(self, **changes)  # replaced below by the class's own replacer (one call less)


_REPLACERS: dict[type, Any] = {
    cls: replacer(cls)
    for cls in (AIState, Inbox, InboxItem, StepState, ActiveTurn, ToolRecord, Interaction, CompactionState, Usage)
}

AIState.with_ = _REPLACERS[AIState]  # type: ignore[method-assign]


def changed(value: T, **changes: Any) -> T:
    """A copy of a fold value (``AIState``, ``ToolRecord``, ...) with ``changes``.

    ``dataclasses.replace`` without its checks (``orchestrator.core._fast.replacer``); a name that
    is not a field raises ``TypeError``.
    """
    replace: Any = _REPLACERS[type(value)]
    result: T = replace(value, **changes)
    return result


AI_STATE_KEYS: frozenset[str] = frozenset(
    {f for f in AIState.__dataclass_fields__} | {"messages", "status", "error", "indicator"}
)
"""Names an app state may not use (they would shadow AIState's)."""
