"""The ``EventStore`` port: every session's append-only log, plus a snapshot cache.

Every backend (``memory://``, ``sqlite:///…``, later ``postgresql://…``) gives the guarantees
below, and ``tests/contract`` checks each of them against each backend:

- **Atomic batches.** All of a batch's events are written, or none.
- **Indexes.** A session's first event has index 1; an empty log is at 0. A batch of ``k``
  events appended at index ``n`` gets ``n+1 … n+k``.
- **Optimistic concurrency.** With ``expected_index`` set, the batch is written only if the log
  is at exactly that index; otherwise ``ConcurrencyConflict`` and nothing is written.
- **Idempotent by event id.** Ids are unique across the whole store. Re-appending a batch whose
  every event is already stored (same id, type, payload and session, consecutive and in order)
  writes nothing and returns the original ``AppendResult`` with ``duplicate=True``; this is
  checked *before* ``expected_index``, so a retry after a lost acknowledgement succeeds. Reusing
  an id for anything else raises ``PartialDuplicateBatch``.
- **Payloads round-trip** as JSON values (msgpack at the storage boundary).

Snapshots are a cache keyed by (session, reducer name): the store keeps their bytes and never
interprets them; any of them may be deleted and rebuilt from the log.

**Optional: following a log.** A backend that can push new events (PostgreSQL, by
``LISTEN``/``NOTIFY``) also has ``follow(session_id, after)``, an async iterator of the
session's events with ``index > after`` and then of each new one as it commits, forever, in
index order with no gaps (a missed notification costs a read, never an event). It is not part
of ``EventStore``: check with ``isinstance(store, Followable)``, and poll ``read(session_id,
after=last)`` when a store does not have it (memory, SQLite: another process's writes send no
signal). A backend that reads what it follows in groups may also hand them over as such
(``FollowsInGroups.follow_groups``): one or more whole commits a group, so a follower can do its
work once a group instead of once an event.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from orchestrator.core.errors import StoreError
from orchestrator.core.events import AppendResult, Event

__all__ = [
    "AppendBatch",
    "AppendResult",
    "EventStore",
    "Followable",
    "FollowsInGroups",
    "LogLoader",
    "Measurable",
    "SessionSummary",
    "Snapshot",
    "follow_in_groups",
]


@dataclass(frozen=True, slots=True)
class AppendBatch:
    """One atomic batch for ``EventStore.append_many``."""

    session_id: str
    """The session whose log the events join."""
    events: Sequence[Event]
    """The events, in order. Their ``session_id`` and ``index`` are ignored: the store sets them."""
    expected_index: int | None = None
    """``None``: no concurrency check; otherwise the log must be at exactly this index."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A cached fold of a session's log through ``index``."""

    index: int
    """The log index the snapshot reflects."""
    data: bytes
    """The reducer's encoded state; opaque to the store."""


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One row of ``EventStore.list_sessions``."""

    session_id: str
    """The session."""
    last_index: int
    """The index of its last event."""
    created_at: float
    """When its first event was appended (seconds since the epoch, the store's clock)."""
    updated_at: float
    """When its last event was appended (the store's clock)."""


@runtime_checkable
class EventStore(Protocol):
    """Durable, append-only session logs. All methods are coroutines; none blocks the loop.

    A closed store raises ``StoreError`` from every method except ``close``.
    """

    @property
    def url(self) -> str:
        """The URL that ``open_store`` opens this store with."""
        ...

    async def append(
        self, session_id: str, events: Sequence[Event], expected_index: int | None = None, *, trusted: bool = False
    ) -> AppendResult:
        """Append one atomic batch to a session's log.

        Returns:
            The indexes the batch got; ``duplicate=True`` (and the original indexes) when the
            identical batch was already stored.

        Raises:
            ConcurrencyConflict: ``expected_index`` is set and the log is elsewhere.
            PartialDuplicateBatch: an event id is reused with other content, type or session,
                only part of the batch is already stored, or the batch holds an id twice.
            UsageError: invalid input (empty batch, empty session id, non-JSON payload, …).

        ``trusted`` skips the check that every payload is JSON, for writers that build their
        payloads from checked values (the session log does); ids and types are always checked.
        """
        ...

    async def append_many(self, batches: Sequence[AppendBatch]) -> list[AppendResult | StoreError]:
        """Append several independent batches, each atomic on its own, in order.

        A batch that conflicts or is a partial duplicate fails alone: its slot in the result holds
        the error and the other batches are still written. Later batches see earlier ones (two
        batches for one session apply in order). Invalid input in any batch raises
        ``UsageError`` before anything is written.
        """
        ...

    async def read(self, session_id: str, after: int = 0, limit: int | None = None) -> list[Event]:
        """The session's events with ``index > after``, ascending, ``session_id``/``index`` set."""
        ...

    async def last_index(self, session_id: str) -> int:
        """The index of the session's last event; 0 for an empty or unknown session."""
        ...

    async def list_sessions(
        self, prefix: str | None = None, after: str | None = None, limit: int = 100
    ) -> list[SessionSummary]:
        """Sessions ordered by id (code point order), optionally under ``prefix``.

        ``after`` is a keyset cursor: pass the last ``session_id`` of the previous page.
        """
        ...

    async def fork(self, source: str, target: str, through: int) -> AppendResult:
        """Start the new session ``target`` with ``source``'s events ``1..through``.

        The copies keep their type, payload, time and index; each gets an id of its own
        (``orchestrator.core.ids.fork_event_id``: ids are unique across the store), from which
        ``logical_event_id`` gives back the original, so the target folds to the source's state
        through ``through``. Every backend copies (``orchestrator.store._fork`` says why). Sub-agent
        logs are not included: ``orchestrator.run.fork.fork_session`` forks a whole tree.

        Returns:
            The indexes written (``1..through``; ``last_index == 0`` for ``through == 0``, which
            writes nothing).

        Raises:
            UsageError: ``through`` is negative or beyond the source's log, ``target`` is
                ``source``, or ``target`` already has events. Nothing is written.
        """
        ...

    async def save_snapshot(self, session_id: str, reducer: str, index: int, data: bytes) -> None:
        """Store (or replace) the snapshot of ``reducer`` for the session."""
        ...

    async def load_snapshot(self, session_id: str, reducer: str) -> Snapshot | None:
        """The stored snapshot, or ``None`` when there is none."""
        ...

    async def delete_snapshot(self, session_id: str, reducer: str) -> None:
        """Forget a snapshot (a no-op when there is none)."""
        ...

    async def close(self) -> None:
        """Finish pending writes and release resources. Calling it again does nothing."""
        ...


@runtime_checkable
class Followable(Protocol):
    """The optional half of a store that pushes new events (see the module docstring)."""

    def follow(self, session_id: str, after: int = 0) -> AsyncGenerator[Event, None]:
        """The session's events with ``index > after``, then each new one as it commits (forever).

        Raises:
            StoreError: the store is closed (ends the iteration), or cannot be read.
        """
        ...


@runtime_checkable
class FollowsInGroups(Protocol):
    """A ``Followable`` store that hands new events over in the groups it reads them (PostgreSQL)."""

    def follow_groups(self, session_id: str, after: int = 0) -> AsyncGenerator[list[Event], None]:
        """``follow``'s events, in order and with no gaps, in groups: never empty, each one or more whole commits.

        Raises:
            StoreError: the store is closed (ends the iteration), or cannot be read.
        """
        ...


async def follow_in_groups(store: Followable, session_id: str, after: int = 0) -> AsyncGenerator[list[Event], None]:
    """``store``'s new events in the groups it reads them (``follow_groups``), or one event a group."""
    if isinstance(store, FollowsInGroups):
        groups = store.follow_groups(session_id, after)
        async with contextlib.aclosing(groups):
            async for group in groups:
                yield group
        return
    events = store.follow(session_id, after)
    async with contextlib.aclosing(events):
        async for event in events:
            yield [event]


@runtime_checkable
class LogLoader(Protocol):
    """A store that loads what opening a session needs in one read (SQLite: one trip to a reader thread).

    Opening a session otherwise takes two or three reads (the snapshot, the log's last index, the
    events after the snapshot), and on SQLite each is a hop to a reader thread and back, which a
    busy event loop pays for in latency: a sub-agent's session is opened on every delegate call.
    """

    async def load_log(self, session_id: str, reducer: str) -> tuple[Snapshot | None, list[Event]]:
        """The snapshot under ``reducer`` if the log has reached its index, and the events after it.

        Without such a snapshot, ``None`` and the whole log. The same as ``load_snapshot``, then
        ``last_index`` (a snapshot past the log's end is stale: ``None``), then ``read`` after the
        snapshot's index.
        """
        ...


@runtime_checkable
class Measurable(Protocol):
    """A store that can say how many bytes it takes (SQLite, PostgreSQL): the benchmarks' size figures."""

    async def stored_bytes(self) -> int:
        """Bytes of storage its data takes now, indexes included."""
        ...
