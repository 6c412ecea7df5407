"""The durable log's records.

An ``Event`` is one record of a session's append-only log: ``{id, session_id, index, type,
payload, at}``. Built-in types start with ``ai.`` and only the server writes them; app events are
declared by a contract. Ids are unique across the whole store; ids that Troupe itself chooses
start with ``troupe:`` and callers may not use that prefix. Payloads are JSON values (wire
shapes, camelCase), encoded with msgpack only at the store boundary.

A built-in event also carries its payload typed, as ``data`` (``orchestrator.core.payloads``):
the fold matches on it, so it never reads a dict. The wire dict stays beside it, because it is
what every log holds and what the store, the CLI and subscribers read; each form is made from
the other once, when the event is made (a dict through the trusted fast decoder: only the
server writes ``ai.*`` events, and a client's are refused by ``check_caller_event``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from orchestrator.core._fast import fast_init
from orchestrator.core._json import JsonObject, json_problem
from orchestrator.core.errors import UsageError
from orchestrator.core.ids import RESERVED_ID_PREFIX
from orchestrator.core.payloads import PAYLOAD_CLASSES, AIPayload, payload_from_wire, payload_to_wire

__all__ = [
    "BUILTIN_PREFIX",
    "RESERVED_ID_PREFIX",
    "AppendResult",
    "Event",
    "check_caller_event",
    "check_payload",
]

_JSON_KINDS: Final = "dict, list, str, int, float, bool or None"

BUILTIN_PREFIX: Final = "ai."
"""Event types that belong to Troupe. Clients can never push them."""


@fast_init
@dataclass(frozen=True, slots=True)
class Event:
    """One record of a session's log.

    ``index`` and ``session_id`` are assigned by the store when the event is appended: the
    first event of a session has index 1, and an empty log is at index 0.
    """

    id: str
    """Unique across the store; for a new input, also the message id."""
    type: str
    """``ai.*`` for Troupe's own events, otherwise an app event type from a contract."""
    payload: JsonObject = field(default_factory=dict)
    """The event's data (wire JSON)."""
    at: float = 0.0
    """When it was recorded (seconds since the epoch); set by the shell, never by the core."""
    session_id: str = ""
    """The session whose log holds it (set by the store)."""
    index: int = 0
    """Its position in that log, from 1 (set by the store)."""
    data: AIPayload | None = field(default=None, kw_only=True, compare=False, repr=False)
    """A built-in event's payload, typed (``None`` for app events); give it instead of ``payload``."""

    def __post_init__(self) -> None:
        if self.data is not None:
            if self.data.type != self.type:
                raise UsageError(f"event {self.id!r} has type {self.type!r} but a {self.data.type!r} payload")
            if not self.payload:
                object.__setattr__(self, "payload", payload_to_wire(self.data))
        elif self.type in PAYLOAD_CLASSES:
            object.__setattr__(self, "data", payload_from_wire(self.type, self.payload))

    def same_content(self, other: Event) -> bool:
        """Whether ``other`` is a re-submission of this event (same id, type and payload).

        Built-in events compare their typed payloads, so an event built typed and the same
        event read back from the store (decoded from its wire dict) are the same content.
        """
        if self.id != other.id or self.type != other.type:
            return False
        if self.data is not None and other.data is not None:
            return self.data == other.data
        return self.payload == other.payload


@fast_init
@dataclass(frozen=True, slots=True)
class AppendResult:
    """What an append wrote: the indexes of the batch, and whether it was a replay."""

    session_id: str
    """The session appended to."""
    first_index: int
    """The index of the batch's first event."""
    last_index: int
    """The index of the batch's last event: the log's index after the append."""
    duplicate: bool = False
    """True when the batch was already in the store (an identical re-append): nothing was written."""


def check_caller_event(event: Event) -> None:
    """Reject what only Troupe may write: ``ai.*`` types and ``troupe:`` ids.

    Raises:
        UsageError: naming the event and the fix.
    """
    if event.id.startswith(RESERVED_ID_PREFIX):
        raise UsageError(
            f"event id {event.id!r} starts with the reserved prefix {RESERVED_ID_PREFIX!r}; "
            "choose another id (idempotent_id() derives a stable one)"
        )
    if event.type.startswith(BUILTIN_PREFIX):
        raise UsageError(
            f"event type {event.type!r} is a built-in Troupe event and cannot be pushed by a client; "
            "push one of your contract's event types instead"
        )


def check_payload(event_id: str, payload: object) -> None:
    """Refuse a payload that is not a JSON object every store can hold (msgpack, then SQL).

    The one check of an app event's payload, made before anything is written: by the store for
    an untrusted append, and by ``push`` for every app event (a trusted writer's too: a
    ``2**64`` or a lone surrogate would otherwise fail inside the store's encoder).

    Raises:
        UsageError: naming the event, the spot in the payload and the fix.
    """
    if not isinstance(payload, Mapping):
        raise UsageError(f"event {event_id!r}: payload must be a JSON object (a dict), got {type(payload).__name__}")
    problem = json_problem(payload, "payload")
    if problem is not None:
        raise UsageError(
            f"event {event_id!r}: {problem.message}; payloads must be JSON ({_JSON_KINDS}): "
            "convert it (e.g. with orchestrator.core.wire.part_to_wire) before appending"
        )
