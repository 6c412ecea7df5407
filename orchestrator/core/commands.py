"""Commands, and ``decide``: a command against the current state into the events that record it.

Every command is persisted (its event id is the command id; for a new input, also the message
id), followed by an ``ai.control.decided`` event saying whether it was applied or rejected and
why. A rejection (``not-pending``, ``stale-turn``, ``role-mismatch``, ``not-user-input``,
``nothing-to-retry``) is a normal result, not an exception. A malformed command (an empty
text, a reserved id) is a ``UsageError`` raised before anything is written.

Turn-scoped commands name the turn the caller observed (``turn_id``; steering: ``steer``). A
stop, a Send now or a retry aimed at a turn that is over is ``stale-turn`` and changes nothing,
so a late click never reaches the next turn. Steering aimed at a turn that is over is sent like
a plain input instead (as steering with no active turn is): its text is never lost. Without a
turn id, each addresses whatever turn is active when it is decided.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal, TypeAlias, assert_never

from orchestrator.core import event_types as ai
from orchestrator.core import payloads as p
from orchestrator.core._json import json_problem
from orchestrator.core.aistate import AIState, Receipt
from orchestrator.core.errors import UsageError
from orchestrator.core.events import RESERVED_ID_PREFIX, Event
from orchestrator.core.ids import idempotent_id
from orchestrator.core.parts import Role
from orchestrator.core.payloads import CommandPayload

__all__ = [
    "Command",
    "Decision",
    "EditInput",
    "MoveInput",
    "PauseSession",
    "RemoveInput",
    "ResetSession",
    "Respond",
    "ResumeSession",
    "RetryTurn",
    "SendInput",
    "SendNow",
    "StopTurn",
    "command_event",
    "decide",
    "idempotent_id",
]


@dataclass(frozen=True, slots=True)
class SendInput:
    """A new input into the durable inbox (``send``), or steering for the observed turn (``steer``)."""

    id: str
    """The input id: the command's event id and the message id."""
    text: str
    """The content."""
    role: Role = "user"
    """``user``, or ``system`` / ``assistant`` context."""
    generate: bool = True
    """Whether it asks for a reply (passive context enters with the next generating input)."""
    steer: str | None = None
    """The observed turn to steer; ``None`` queues. Steering a turn that is no longer active sends."""


@dataclass(frozen=True, slots=True)
class EditInput:
    """Replace a pending input's content (last write wins, in log order)."""

    id: str
    input_id: str
    text: str
    role: Role = "user"


@dataclass(frozen=True, slots=True)
class MoveInput:
    """Move a pending input before another (``before_id=None``: to the end; itself: a no-op, applied)."""

    id: str
    input_id: str
    before_id: str | None = None


@dataclass(frozen=True, slots=True)
class RemoveInput:
    """Remove a pending input (its submission stays in the log, so replay cannot recreate it)."""

    id: str
    input_id: str


@dataclass(frozen=True, slots=True)
class SendNow:
    """Hand a queued input off to the observed turn, after the steering sent before it."""

    id: str
    input_id: str
    turn_id: str | None = None
    """The turn the caller observed; ``None`` targets whatever is active."""


@dataclass(frozen=True, slots=True)
class StopTurn:
    """End the observed turn now (its steering is cancelled; ``cancel_queued`` clears the queue)."""

    id: str
    turn_id: str | None = None
    """The turn the caller observed: ``stale-turn`` once it has ended; ``None`` stops whatever is active."""
    cancel_queued: bool = False


@dataclass(frozen=True, slots=True)
class RetryTurn:
    """Resume from the last finished tool call (supersedes a running turn)."""

    id: str
    turn_id: str | None = None
    """The turn the caller observed: the active one, or the last to end when none is active.

    ``stale-turn`` once another turn has started since; ``None`` retries whatever is latest.
    """


@dataclass(frozen=True, slots=True)
class PauseSession:
    """Close admission after the turn, or ``now`` (which also cancels current work)."""

    id: str
    when: Literal["after-turn", "now"] = "after-turn"


@dataclass(frozen=True, slots=True)
class ResumeSession:
    """Reopen admission and resume retained work before admitting another input."""

    id: str


@dataclass(frozen=True, slots=True)
class Respond:
    """Answer an approval."""

    id: str
    interaction_id: str
    approved: bool
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class ResetSession:
    """Stop the active turn and start a new conversation (the log keeps the old one)."""

    id: str


Command: TypeAlias = (
    SendInput
    | EditInput
    | MoveInput
    | RemoveInput
    | SendNow
    | StopTurn
    | RetryTurn
    | PauseSession
    | ResumeSession
    | Respond
    | ResetSession
)


@dataclass(frozen=True, slots=True)
class Decision:
    """What to append for a command, and the receipt it yields."""

    events: tuple[Event, ...] = ()
    """The command event and its decision (empty when there is nothing to address)."""
    receipt: Receipt | None = None
    """The outcome (``None`` when nothing was written)."""

    @property
    def applied(self) -> bool:
        """Whether the command took effect."""
        return self.receipt is not None and self.receipt.outcome == "applied"


def command_event(command: Command, at: float = 0.0) -> Event:
    """The event that persists ``command`` (validated: see ``check_command``)."""
    check_command(command)
    data = _command_payload(command)
    return Event(command.id, data.type, at=at, data=data)


def _command_payload(command: Command) -> CommandPayload:
    match command:
        case SendInput():
            return p.Input(command.role, command.text, command.generate, command.steer)
        case EditInput():
            return p.InputEdit(command.input_id, command.role, command.text)
        case MoveInput():
            return p.InputMove(command.input_id, command.before_id)
        case RemoveInput():
            return p.InputRemove(command.input_id)
        case SendNow():
            return p.InputSendNow(command.input_id, command.turn_id)
        case StopTurn():
            return p.TurnStop(command.turn_id, command.cancel_queued)
        case RetryTurn():
            return p.TurnRetry(command.turn_id)
        case PauseSession():
            return p.Pause(command.when)
        case ResumeSession():
            return p.Resume()
        case Respond():
            return p.Respond(command.interaction_id, command.approved, command.reason)
        case ResetSession():
            return p.SessionReset()
        case _:
            assert_never(command)


def check_command(command: Command) -> None:
    """Reject a malformed command before anything is written.

    Raises:
        UsageError: naming the problem and the fix.
    """
    name = type(command).__name__
    if not isinstance(command.id, str) or not command.id:
        raise UsageError(f"{name} needs a non-empty id (the command's event id)")
    if command.id.startswith(RESERVED_ID_PREFIX):
        raise UsageError(
            f"{name} id {command.id!r} starts with the reserved prefix {RESERVED_ID_PREFIX!r}; "
            "choose another id (idempotent_id() derives a stable one)"
        )
    if isinstance(command, SendInput | EditInput):
        if not isinstance(command.text, str) or not command.text.strip():
            raise UsageError(f"{name} text is empty; send some text (an empty message is never queued)")
        if "\x00" in command.text:
            raise UsageError(f"{name} text contains a NUL character (U+0000); remove it (it is never text)")
        if command.role not in ("user", "assistant", "system"):
            raise UsageError(f"{name} role must be 'user', 'assistant' or 'system', not {command.role!r}")
    if isinstance(command, PauseSession) and command.when not in ("after-turn", "now"):
        raise UsageError(f"pause(when=...) must be 'after-turn' or 'now', not {command.when!r}")
    for spec in fields(command):
        value = getattr(command, spec.name)
        if not isinstance(value, str):
            continue
        problem = json_problem(value, spec.name)
        if problem is not None:  # a lone surrogate: msgpack (so the log) cannot hold it
            raise UsageError(f"{name} {problem.message}")
        if spec.name != "text" and "\x00" in value:
            raise UsageError(f"{name} {spec.name} {value!r} contains a NUL character: remove it")


def _decided(command: Command, outcome: Literal["applied", "rejected"], reason: str | None, at: float) -> Decision:
    decided = Event(
        f"{RESERVED_ID_PREFIX}{command.id}:decided", ai.DECIDED, at=at, data=p.Decided(command.id, outcome, reason)
    )
    events = (command_event(command, at), decided)
    return Decision(events, Receipt(command.id, outcome, reason))


def decide(state: AIState, command: Command, at: float = 0.0) -> Decision:
    """Decide ``command`` against ``state`` (see the module docstring for the outcomes)."""
    check_command(command)

    def applied() -> Decision:
        return _decided(command, "applied", None, at)

    def rejected(reason: str) -> Decision:
        return _decided(command, "rejected", reason, at)

    active = state.active
    inbox = state.inbox
    match command:
        case SendInput():
            return applied()
        case EditInput():
            item = inbox.get(command.input_id)
            if item is None:
                return rejected("not-pending")
            if item.role != command.role:
                return rejected("role-mismatch")
            return applied()
        case MoveInput():
            if inbox.get(command.input_id) is None:
                return rejected("not-pending")
            if command.before_id is not None and inbox.get(command.before_id) is None:
                return rejected("not-pending")
            return applied()
        case RemoveInput():
            return applied() if inbox.get(command.input_id) is not None else rejected("not-pending")
        case SendNow():
            item = inbox.get(command.input_id)
            if item is None:
                return rejected("not-pending")
            if item.role != "user":
                return rejected("not-user-input")
            if command.turn_id is not None and (active is None or active.id != command.turn_id):
                return rejected("stale-turn")
            return applied()
        case StopTurn():
            if command.turn_id is None:
                return applied() if active is not None else Decision()
            if active is None or active.id != command.turn_id:
                return rejected("stale-turn")
            return applied()
        case RetryTurn():
            if not any(m.role == "user" for m in state.messages):
                return rejected("nothing-to-retry")
            if command.turn_id is not None and command.turn_id != _latest_turn(state):
                return rejected("stale-turn")
            return applied()
        case PauseSession() | ResumeSession() | ResetSession():
            return applied()
        case Respond():
            interaction = state.interactions.get(command.interaction_id)
            if interaction is None or interaction.status != "pending":
                return rejected("not-pending")
            return applied()
        case _:
            assert_never(command)


def _latest_turn(state: AIState) -> str | None:
    """The turn a retry addresses: the active one, else the last to end."""
    if state.active is not None:
        return state.active.id
    return state.last_turn[0] if state.last_turn is not None else None
