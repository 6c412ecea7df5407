"""How a turn ended: the one result type of a turn, from the run loop to ``Turn.finished``."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TurnOutcome"]


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """How a turn ended (what ``Turn.finished`` resolves to)."""

    turn_id: str
    outcome: str
    """``completed``, ``failed``, ``stopped``, ``superseded`` or ``handed-off``."""
    text: str
    """The turn's final text (its assistant message's text after the last tool call)."""
    error: str | None = None
    index: int = 0
    """The log index at which the turn had ended (a subscriber that reached it has seen it all)."""

    @property
    def success(self) -> bool:
        """Whether the turn completed."""
        return self.outcome == "completed"
