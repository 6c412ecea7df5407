"""Session actions: everything that can happen to a conversation, as the reducer's input."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal, TypeAlias, cast

from orchestrator.core._fast import fast_init
from orchestrator.core.stream import AgentStreamPart

__all__ = ["ApplyPart", "Reset", "Retry", "Send", "SessionAction", "Stop", "ToolPhase", "Within"]

Within: TypeAlias = str | tuple[str, ...]
"""Where a part applies: a delegate call id (found anywhere in the tree), or a path of call ids
from the top level down (``("call-1", "call-7")``: call-7 inside call-1's nested run)."""


@fast_init
@dataclass(frozen=True, slots=True)
class Send:
    """The user sends a message: one text part, ``streaming``, error cleared. ``send``."""

    id: str
    """The new message's id (a second send with an existing id changes nothing)."""
    text: str
    """What the user wrote."""

    type: ClassVar[Literal["send"]] = "send"


@fast_init
@dataclass(frozen=True, slots=True)
class ApplyPart:
    """Apply one stream part, at the top level or inside a sub-agent's run. ``part``."""

    part: AgentStreamPart
    """The stream part."""
    within: Within | None = None
    """The delegate call whose nested run it belongs to; ``None`` for the top level."""

    type: ClassVar[Literal["part"]] = "part"

    def __post_init__(self) -> None:
        within = cast(object, self.within)
        if within is None or type(within) is tuple:  # the usual cases, without the ABC check below
            return
        if isinstance(within, Sequence) and not isinstance(within, str | tuple):
            object.__setattr__(self, "within", tuple(within))


@fast_init
@dataclass(frozen=True, slots=True)
class ToolPhase:
    """A running tool changed phase (``running`` or ``awaiting-confirmation``). ``toolPhase``.

    Sets the newest open call of that name (or the call ``id``, when given) anywhere in the
    tree; calls run one at a time, so the name is enough.
    """

    name: str
    """The tool's name."""
    state: Literal["running", "awaiting-confirmation"]
    """The new state."""
    prompt: str | None = None
    """What to ask the user, while awaiting confirmation."""
    id: str | None = None
    """The call id, to address one call exactly (optional)."""

    type: ClassVar[Literal["toolPhase"]] = "toolPhase"


@fast_init
@dataclass(frozen=True, slots=True)
class Stop:
    """Stop the run: ``idle``, and every open call (nested ones too) ``cancelled``. ``stop``."""

    type: ClassVar[Literal["stop"]] = "stop"


@fast_init
@dataclass(frozen=True, slots=True)
class Retry:
    """Resume from the last finished tool call: the messages become ``resumable``. ``retry``."""

    type: ClassVar[Literal["retry"]] = "retry"


@fast_init
@dataclass(frozen=True, slots=True)
class Reset:
    """Back to the empty session. ``reset``."""

    type: ClassVar[Literal["reset"]] = "reset"


SessionAction: TypeAlias = Send | ApplyPart | ToolPhase | Stop | Retry | Reset
