"""What a session's client receives: a ``Mutation`` of its state, and a ``StopResult``.

Values only, shared by the ``Session`` handle (``actors.client``) and the ``LiveView`` over it
(``actors.live``), which both stand above this module: so neither needs the other's module for
its types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.core.aistate import Receipt

__all__ = ["Batch", "Mutation", "StopResult"]


class Mutation(dict[str, Any]):
    """One change to a session (a dict in the wire shape), with ``.type`` and ``.index``."""

    @property
    def type(self) -> str:
        """The kind of change (``reset`` means: re-read the snapshot).

        One of ``message``, ``part``, ``delta``, ``status``, ``truncate``, ``turn``,
        ``interaction``, ``info``, ``app``, ``usage`` or ``reset``.
        """
        return str(self.get("type"))

    @property
    def index(self) -> int:
        """The log index of the event that produced it."""
        return int(self.get("index", 0))


class Batch(list[Mutation]):
    """The mutations one poll brought for a session, and ``cursor``: the log index they bring it to.

    ``cursor`` can be past every mutation's (an append's last events may change nothing a client
    sees), and a batch can be empty: then it only says how far the log has gone.
    """

    cursor: int = -1


@dataclass(frozen=True, slots=True)
class StopResult:
    """What ``stop()`` did."""

    receipt: Receipt | None
    """The stop's receipt (``None`` when no turn was active)."""
    cancelled_queued_prompts: int
    """Queued inputs the stop cancelled (steering for the stopped turn, or all with ``cancel_queued``)."""
