"""The payloads of command events (what a caller asks of a session), and of the decision on one.

A command waits in ``AIState.pending`` until ``orchestrator.core.commands`` decides it, then
``ai.control.decided`` records the outcome. ``Decided`` sits here, beside the payloads it
answers, and ``CommandPayload`` is the union of the commands themselves (not ``Decided``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, TypeAlias

from orchestrator.core._fast import fast_init
from orchestrator.core.parts import Role
from orchestrator.core.payloads._fields import _CONFIG

__all__ = [
    "CommandPayload",
    "Decided",
    "Input",
    "InputEdit",
    "InputMove",
    "InputRemove",
    "InputSendNow",
    "Pause",
    "Respond",
    "Resume",
    "SessionReset",
    "TurnRetry",
    "TurnStop",
]


@fast_init
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


@fast_init
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


@fast_init
@dataclass(frozen=True, slots=True)
class InputMove:
    """``ai.input.move``: move a pending input."""

    input_id: str
    """The pending input."""
    before_id: str | None = None
    """The input it goes before; ``None``: to the end (written as ``null``)."""

    type: ClassVar[Literal["ai.input.move"]] = "ai.input.move"
    __pydantic_config__ = _CONFIG


@fast_init
@dataclass(frozen=True, slots=True)
class InputRemove:
    """``ai.input.remove``: remove a pending input (its submission stays in the log)."""

    input_id: str
    """The pending input."""

    type: ClassVar[Literal["ai.input.remove"]] = "ai.input.remove"
    __pydantic_config__ = _CONFIG


@fast_init
@dataclass(frozen=True, slots=True)
class InputSendNow:
    """``ai.input.send_now``: hand a queued input off to the observed turn."""

    input_id: str
    """The queued input."""
    turn_id: str | None = None
    """The turn the caller observed (written as ``null`` when none)."""

    type: ClassVar[Literal["ai.input.send_now"]] = "ai.input.send_now"
    __pydantic_config__ = _CONFIG


@fast_init
@dataclass(frozen=True, slots=True)
class TurnStop:
    """``ai.turn.stop``: end the observed turn now."""

    turn_id: str | None = None
    """The turn the caller observed (written as ``null`` when none)."""
    cancel_queued: bool = False
    """Whether the queued inputs are dropped too."""

    type: ClassVar[Literal["ai.turn.stop"]] = "ai.turn.stop"
    __pydantic_config__ = _CONFIG


@fast_init
@dataclass(frozen=True, slots=True)
class TurnRetry:
    """``ai.turn.retry``: resume from the last finished tool call."""

    turn_id: str | None = None
    """The turn the caller observed (active, or the last to end); left out when none."""

    type: ClassVar[Literal["ai.turn.retry"]] = "ai.turn.retry"
    __pydantic_config__ = _CONFIG


@fast_init
@dataclass(frozen=True, slots=True)
class Pause:
    """``ai.control.pause``: close admission, and with ``now`` also cancel current work."""

    when: Literal["after-turn", "now"] = "after-turn"
    """``after-turn`` lets the active turn finish; ``now`` cuts it."""

    type: ClassVar[Literal["ai.control.pause"]] = "ai.control.pause"
    __pydantic_config__ = _CONFIG


@fast_init
@dataclass(frozen=True, slots=True)
class Resume:
    """``ai.control.resume``: reopen admission and resume retained work."""

    type: ClassVar[Literal["ai.control.resume"]] = "ai.control.resume"
    __pydantic_config__ = _CONFIG


@fast_init
@dataclass(frozen=True, slots=True)
class SessionReset:
    """``ai.session.reset``: stop the active turn and start a new conversation (see ``event_types``)."""

    type: ClassVar[Literal["ai.session.reset"]] = "ai.session.reset"
    __pydantic_config__ = _CONFIG


@fast_init
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


@fast_init
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
