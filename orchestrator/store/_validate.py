"""Input checks shared by every backend, so each refuses the same mistakes with the same words.

Everything a caller passes is checked on the caller's side, before a backend touches storage:
a bad batch fails fast with a ``UsageError`` that names the field and the fix, and never costs
a transaction. Checking here also turns each event into the form every backend stores
(``PreparedEvent``: msgpack payload bytes), once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeGuard

from orchestrator.core._fast import fast_init
from orchestrator.core.errors import PartialDuplicateBatch, StoreError, UsageError
from orchestrator.core.events import Event, check_payload
from orchestrator.core.wire import pack
from orchestrator.store.base import AppendBatch

__all__ = [
    "MAX_ID_LENGTH",
    "PreparedBatch",
    "PreparedEvent",
    "check_after",
    "check_id",
    "check_limit",
    "check_listing",
    "check_snapshot",
    "plain_id",
    "prepare_all",
    "prepare_batch",
]

MAX_ID_LENGTH: Final = 1024
"""Longest session id, event id, event type or reducer name, in characters.

Generous for nested sub-agent ids (``parent/call/call…``); a longer one is almost surely a bug
(a whole message used as an id), and ids are stored in indexes.
"""


@fast_init
@dataclass(frozen=True, slots=True)
class PreparedEvent:
    """An event checked and encoded for storage."""

    id: str
    type: str
    at: float
    blob: bytes
    """msgpack bytes of the payload."""


@fast_init
@dataclass(frozen=True, slots=True)
class PreparedBatch:
    """A checked batch: what a backend's write path consumes."""

    session_id: str
    events: tuple[PreparedEvent, ...]
    expected_index: int | None


def plain_id(value: object) -> TypeGuard[str]:
    """The common id ``check_id`` accepts, by a quick test: a short ASCII string with no NUL.

    ``check_id`` starts with it, and callers on the write path test it first, so they build
    ``check_id``'s message (often an f-string with a ``repr``) only for an id that is not plain.
    A new rule for ids therefore goes here, as well as into ``check_id``'s messages.
    """
    return type(value) is str and 0 < len(value) <= MAX_ID_LENGTH and value.isascii() and "\x00" not in value


def check_id(value: object, what: str) -> str:
    """A session id, event id, event type or reducer name: a non-empty, storable string."""
    if plain_id(value):
        return value
    if not isinstance(value, str):
        raise UsageError(f"{what} must be a string, got {type(value).__name__}: pass the id as str")
    if not value:
        raise UsageError(f"{what} is empty: every {what.split()[-1]} needs a non-empty string")
    if len(value) > MAX_ID_LENGTH:
        raise UsageError(
            f"{what} is {len(value)} characters long (limit {MAX_ID_LENGTH}): "
            "use a short id (idempotent_id() derives a stable one from long content)"
        )
    if "\x00" in value:
        raise UsageError(f"{what} {value!r} contains a NUL character: remove it")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{what} {value!r} is not valid Unicode (a lone surrogate): fix its text") from None
    return value


def _check_index(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{what} must be an integer, got {type(value).__name__}")
    if value < 0:
        raise UsageError(f"{what} must be 0 or more, got {value} (an empty log is at index 0)")
    return value


def check_after(after: object) -> int:
    """The ``after`` cursor of ``read``."""
    return _check_index(after, "after")


def check_limit(limit: object) -> int | None:
    """A ``limit`` (``None`` = no limit)."""
    return None if limit is None else _check_index(limit, "limit")


def check_snapshot(session_id: object, reducer: object, index: object, data: object) -> bytes:
    """The arguments of ``save_snapshot``; returns ``data`` as ``bytes``."""
    check_id(session_id, "session id")
    check_id(reducer, "reducer name")
    _check_index(index, "snapshot index")
    if not isinstance(data, bytes | bytearray | memoryview):
        raise UsageError(
            f"snapshot data must be bytes, got {type(data).__name__}: "
            "encode the state first (orchestrator.core.wire.pack)"
        )
    return bytes(data)


def prepare_batch(
    session_id: object, events: object, expected_index: object, *, trusted: bool = False
) -> PreparedBatch:
    """Check one batch and encode its payloads.

    Raises:
        UsageError: the batch is malformed; the message names the field and the fix.
        PartialDuplicateBatch: the batch holds the same event id twice.
    """
    sid = check_id(session_id, "session id")
    if expected_index is not None:
        _check_index(expected_index, "expected_index")
    if type(events) is not list:  # a list is the common case; anything else is checked in full
        if isinstance(events, Event):
            raise UsageError("events must be a sequence of Event, got one Event: wrap it in a list")
        if not isinstance(events, Sequence) or isinstance(events, str | bytes):
            raise UsageError(f"events must be a list of Event, got {type(events).__name__}")
    if not events:
        raise UsageError(
            f"the batch for session {sid!r} is empty: pass at least one Event "
            "(an empty append would write nothing and return no index)"
        )
    prepared = tuple(_prepare_event(e, i, trusted) for i, e in enumerate(events))
    seen: set[str] = set()
    for event in prepared:
        if event.id in seen:
            raise PartialDuplicateBatch(
                f"event id {event.id!r} appears twice in one batch for session {sid!r}: give each event its own id",
                event.id,
            )
        seen.add(event.id)
    # The check above passed, so expected_index is None or a valid int.
    return PreparedBatch(sid, prepared, expected_index if isinstance(expected_index, int) else None)


def _prepare_event(event: object, position: int, trusted: bool = False) -> PreparedEvent:
    if not isinstance(event, Event):
        raise UsageError(
            f"events[{position}] is a {type(event).__name__}, not an Event: "
            "build it with orchestrator.core.events.Event(id=..., type=..., payload=...)"
        )
    event_id, event_type, at, payload = event.id, event.type, event.at, event.payload
    # A plain id and type need no message built for them (see ``plain_id``).
    if not (plain_id(event_id) and plain_id(event_type)):
        event_id = check_id(event_id, f"events[{position}] event id")
        event_type = check_id(event_type, f"event {event_id!r} type")
    if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
        raise UsageError(f"event {event_id!r}: at must be a finite number of seconds, got {at!r}")
    if not trusted:
        check_payload(event_id, payload)
    if type(payload) is not dict and not isinstance(payload, Mapping):  # the ABC check only when not a dict
        raise UsageError(f"event {event_id!r}: payload must be a JSON object (a dict), got {type(payload).__name__}")
    return PreparedEvent(event_id, event_type, float(at), pack(payload))


def prepare_all(batches: object) -> list[PreparedBatch | StoreError]:
    """Check every batch before any is written; an in-batch duplicate id fails only its batch."""
    if not isinstance(batches, Sequence) or isinstance(batches, str | bytes):
        raise UsageError(f"batches must be a list of AppendBatch, got {type(batches).__name__}")
    out: list[PreparedBatch | StoreError] = []
    for i, batch in enumerate(batches):
        if not isinstance(batch, AppendBatch):
            raise UsageError(f"batches[{i}] is a {type(batch).__name__}, not an AppendBatch")
        try:
            out.append(prepare_batch(batch.session_id, batch.events, batch.expected_index))
        except StoreError as error:
            out.append(error)
    return out


def check_listing(prefix: object, after: object, limit: object) -> None:
    """The arguments of ``list_sessions``."""
    if prefix is not None and not isinstance(prefix, str):
        raise UsageError(f"prefix must be a string or None, got {type(prefix).__name__}")
    # "" is a natural first cursor (every session id sorts after it), so it is not refused.
    if after is not None and not isinstance(after, str):
        raise UsageError(
            f"after must be the last session id of the previous page (a string) or None, got {type(after).__name__}"
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise UsageError(f"limit must be an integer of 0 or more, got {limit!r}")
