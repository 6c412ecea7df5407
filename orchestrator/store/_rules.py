"""The append rules every backend shares: replay-or-misuse for reused ids, and conflicts.

One rule for every backend, so they cannot drift: a backend looks up which of the batch's ids
it already holds and hands them here. Actor methods are at-least-once (a retried Ray call, a
lost acknowledgement), so an identical batch must replay its original result; anything else
that reuses an id is refused, because it would silently fork history.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.core.errors import ConcurrencyConflict, PartialDuplicateBatch
from orchestrator.core.events import AppendResult
from orchestrator.store._codec import same_payload
from orchestrator.store._validate import PreparedBatch

__all__ = ["StoredEvent", "conflict", "replay_result"]


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """What a backend knows of an already-stored event with one of the batch's ids."""

    session_id: str
    index: int
    type: str
    blob: bytes
    """Its payload as stored (msgpack, possibly deflated: see ``_codec``)."""


def replay_result(batch: PreparedBatch, found: Mapping[str, StoredEvent]) -> AppendResult | None:
    """Classify a batch against the stored events that share its ids.

    Args:
        batch: the checked batch.
        found: every stored event whose id is one of the batch's, by id.

    Returns:
        ``None`` when no id is stored (a new batch, to be written); the original
        ``AppendResult`` with ``duplicate=True`` when the batch is an identical replay.

    Raises:
        PartialDuplicateBatch: an id is reused with another session, type or payload; or only
            part of the batch is stored; or the stored events are not consecutive in this order.
    """
    if not found:
        return None
    sid = batch.session_id
    for event in batch.events:
        stored = found.get(event.id)
        if stored is None:
            continue
        if stored.session_id != sid:
            raise PartialDuplicateBatch(
                f"event id {event.id!r} already belongs to session {stored.session_id!r}, not {sid!r}: "
                "event ids are unique across the store, so derive ids that include the session",
                event.id,
            )
        if stored.type != event.type:
            raise PartialDuplicateBatch(
                f"event id {event.id!r} was already appended with type {stored.type!r}, not "
                f"{event.type!r}: an id names one event forever; use a new id for a new event",
                event.id,
            )
        if not same_payload(stored.blob, event.blob):
            raise PartialDuplicateBatch(
                f"event id {event.id!r} was already appended with a different payload: an id names "
                "one event forever; use a new id for new content",
                event.id,
            )
    missing = next((e.id for e in batch.events if e.id not in found), None)
    if missing is not None:
        reused = next(e.id for e in batch.events if e.id in found)
        raise PartialDuplicateBatch(
            f"event id {reused!r} is already stored but {missing!r} from the same batch is not: a "
            "retried batch must be identical to the original; resend it whole, or give new events new ids",
            reused,
        )
    first = found[batch.events[0].id].index
    for offset, event in enumerate(batch.events):
        if found[event.id].index != first + offset:
            raise PartialDuplicateBatch(
                f"event id {event.id!r} is already stored, but at index {found[event.id].index}, not "
                f"{first + offset} as this batch's order implies: resend the original batch unchanged",
                event.id,
            )
    return AppendResult(sid, first, first + len(batch.events) - 1, duplicate=True)


def conflict(session_id: str, expected: int, actual: int) -> ConcurrencyConflict:
    """The ``ConcurrencyConflict`` every backend raises, worded once."""
    return ConcurrencyConflict(
        f"session {session_id!r} is at index {actual}, not the expected {expected}: another writer "
        f"appended first; read the events after {expected}, decide again, and retry with "
        f"expected_index={actual}",
        session_id,
        expected,
        actual,
    )


def id_range(prefix: str | None, after: str | None, mark: str) -> tuple[list[str], list[object]]:
    """The ``WHERE`` clauses and parameters that list sessions under ``prefix``, after ``after``.

    A range on the unique index, not ``LIKE``: ``LIKE`` is case-insensitive in SQLite, treats
    ``%`` and ``_`` as wildcards, and cannot use the index. Both backends compare ids in code
    point order (SQLite's UTF-8 bytes; PostgreSQL's ``COLLATE "C"``). ``mark`` is the driver's
    placeholder (``?`` or ``%s``).
    """
    where: list[str] = []
    params: list[object] = []
    if prefix:
        where.append(f"session_id >= {mark}")
        params.append(prefix)
        upper = prefix_end(prefix)
        if upper is not None:
            where.append(f"session_id < {mark}")
            params.append(upper)
    if after is not None:
        where.append(f"session_id > {mark}")
        params.append(after)
    return where, params


def prefix_end(prefix: str) -> str | None:
    """The least string greater than every string that starts with ``prefix`` (None: no bound)."""
    stripped = prefix.rstrip("\U0010ffff")
    if not stripped:
        return None
    following = ord(stripped[-1]) + 1
    if 0xD800 <= following <= 0xDFFF:  # surrogates cannot be stored; skip to the next scalar value
        following = 0xE000
    return stripped[:-1] + chr(following)
