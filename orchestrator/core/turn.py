"""How a turn ended: the one result type of a turn, from the run loop to ``Turn.finished``.

The client's ``Turn.finished`` resolves to it (``actors.client.TurnResult`` is another name for
it), and the command line's turn tables draw it (``orchestrator.surfaces.cli``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TurnOutcome"]


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """How a turn ended (what ``Turn.finished`` resolves to)."""

    turn_id: str
    """The turn that admitted the input (``""`` when none did)."""
    outcome: str
    """``completed``, ``failed``, ``stopped``, ``superseded``, ``handed-off`` or ``removed`` (the
    input was removed before a turn admitted it); the CLI's load run adds ``error`` (the session
    raised before the turn ended)."""
    text: str
    """The turn's final text (its assistant message's text after the last tool call)."""
    error: str | None = None
    """Why it did not complete."""
    index: int = 0
    """The log index at which the turn had ended (a subscriber that reached it has seen it all)."""

    @property
    def success(self) -> bool:
        """Whether the turn completed."""
        return self.outcome == "completed"
