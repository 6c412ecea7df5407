"""The session state machine's state: the messages, whether a run is streaming, the last error."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from orchestrator.core._fast import slot_setter
from orchestrator.core._pvec import PVec
from orchestrator.core.parts import ERROR_CODES, AgentMessage, ErrorCode, RunStatus, SessionError

__all__ = ["ERROR_CODES", "ErrorCode", "SessionError", "SessionState"]


@dataclass(frozen=True, slots=True)
class SessionState:
    """The conversation so far. A new conversation is ``SessionState()``."""

    messages: PVec[AgentMessage] = field(default_factory=PVec)
    """The conversation, oldest first (a persistent vector: use it like a tuple)."""
    status: RunStatus = "idle"
    """``streaming`` while a run is going, ``idle`` when it ended, ``error`` when it failed."""
    error: SessionError | None = None
    """The last run's failure; cleared by the next ``send`` or ``retry``."""

    def __post_init__(self) -> None:
        if not isinstance(cast(object, self.messages), PVec):  # a plain list is accepted too
            object.__setattr__(self, "messages", PVec(self.messages))

    @classmethod
    def of(cls, messages: Sequence[AgentMessage], status: RunStatus = "idle") -> SessionState:
        """A state holding ``messages``."""
        return cls(PVec(messages), status)


_new = object.__new__
_set_messages = slot_setter(SessionState, "messages")
_set_status = slot_setter(SessionState, "status")
_set_error = slot_setter(SessionState, "error")


def make_state(messages: PVec[AgentMessage], status: RunStatus, error: SessionError | None) -> SessionState:
    """Build a state without ``__init__``'s checks (the reducer's hot path)."""
    state: SessionState = _new(SessionState)
    _set_messages(state, messages)
    _set_status(state, status)
    _set_error(state, error)
    return state
