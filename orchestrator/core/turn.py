"""How a turn ended: the one result type of a turn, from the run loop to ``Turn.finished``.

The client's ``Turn.finished`` resolves to it (``actors.client.TurnResult`` is another name for
it), and the command line's turn tables draw it (``orchestrator.surfaces.cli``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

__all__ = ["SUCCESSFUL", "TurnOutcome", "TurnOutcomeKind"]

TurnOutcomeKind: TypeAlias = Literal["completed", "handed-off", "stopped", "failed", "superseded", "removed", "error"]
"""How a turn ended, for a UI to switch on (see ``TurnOutcome.outcome``)."""

SUCCESSFUL: Final[frozenset[TurnOutcomeKind]] = frozenset({"completed", "handed-off"})
"""The outcomes ``TurnOutcome.success`` is true for."""


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """How a turn ended (what ``Turn.finished`` resolves to).

    ``outcome`` is the one field to switch on:

    - ``completed``: the model finished on its own; ``reason`` is its finish reason (``stop``,
      ``length``, ...) or ``max-steps`` when the agent's ``max_steps`` cut the turn off before
      another model step (its last tool results are in, but the model did not answer them).
    - ``handed-off``: steering or Send now redirected the turn; the steering's own turn answers.
    - ``stopped``: Stop ended it. ``superseded``: a retry replaced it.
    - ``failed``: the model or the run failed; ``error`` says why and ``reason`` is the error
      code (``network``, ``rate-limit``, ...) when there is one.
    - ``removed``: the input was removed before a turn admitted it (``turn_id`` is ``""``).
    - ``error``: only the command line's load run makes it (the session raised before the turn
      ended).

    ``success`` is true for ``completed`` and ``handed-off``: the turn ended as the user meant
    (a handoff is the user's own redirect, not a failure), so ``success ? "completed" : "failed"``
    labels a steered turn right. A ``max-steps`` cut-off counts as completed (the agent's own
    limit, not an error): show it from ``reason`` when a UI wants to flag it.
    """

    turn_id: str
    """The turn that admitted the input (``""`` when none did)."""
    outcome: TurnOutcomeKind
    """How it ended (see the class docstring)."""
    text: str
    """The turn's final text (its assistant message's text after the last tool call)."""
    error: str | None = None
    """Why it did not complete."""
    index: int = 0
    """The log index at which the turn had ended (a subscriber that reached it has seen it all)."""
    reason: str | None = None
    """What the log says about why: a completed turn's finish reason (``stop``, ``max-steps``, ...),
    a failed turn's error code; ``None`` when the log has none."""

    @property
    def success(self) -> bool:
        """Whether the turn ended as meant: ``completed`` or ``handed-off`` (see the class docstring)."""
        return self.outcome in SUCCESSFUL
