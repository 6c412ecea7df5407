"""``memory://``: the in-process event store (tests, demos, and the reference for the contract).

It keeps payloads as msgpack bytes, exactly as a durable backend does, rather than the caller's
dicts: a caller that mutates a payload after appending (or an event it read) cannot change the
log, and tuples come back as lists, so a test that passes here passes on SQLite too.

``memory://NAME`` names a store shared within the process: every ``open_store`` of the same
name returns the same store while it is open, and a new handle on the same data after it was
closed (the way a file outlives a closed connection). ``memory://`` alone is always fresh.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from orchestrator.core.errors import StoreError
from orchestrator.core.events import AppendResult, Event
from orchestrator.store._codec import decode
from orchestrator.store._fork import fork_by_copy
from orchestrator.store._rules import StoredEvent, conflict, replay_result
from orchestrator.store._validate import (
    PreparedBatch,
    check_after,
    check_id,
    check_limit,
    check_listing,
    check_snapshot,
    prepare_all,
    prepare_batch,
)
from orchestrator.store.base import AppendBatch, SessionSummary, Snapshot

__all__ = ["MemoryStore", "open_memory_store"]


@dataclass(slots=True)
class _Log:
    records: list[tuple[str, str, float, bytes]]
    """(event id, type, at, msgpack payload); the record at position i has index i + 1."""
    created_at: float
    updated_at: float


@dataclass(slots=True)
class _Data:
    """Everything a memory store holds; shared by the handles of one ``memory://NAME``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    logs: dict[str, _Log] = field(default_factory=dict)
    by_id: dict[str, tuple[str, int]] = field(default_factory=dict)
    """Event id -> (session id, index): ids are unique across the store."""
    order: list[str] = field(default_factory=list)
    """Session ids, sorted, for ``list_sessions``."""
    snapshots: dict[tuple[str, str], Snapshot] = field(default_factory=dict)


class MemoryStore:
    """An ``EventStore`` in this process's memory. Safe to share across threads and loops.

    Each method runs to completion under one lock without awaiting, so every batch is atomic
    and concurrent coroutines see appends in one total order.
    """

    def __init__(self, *, url: str = "memory://", clock: Callable[[], float] = time.time) -> None:
        """Create an empty store.

        Args:
            url: what ``url`` reports (``open_store`` passes the URL it was given).
            clock: the time source for session ``created_at``/``updated_at``.
        """
        self._url = url
        self._clock = clock
        self._data = _Data()
        self._closed = False

    @property
    def url(self) -> str:
        """The URL this store was opened with."""
        return self._url

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called."""
        return self._closed

    async def append(
        self, session_id: str, events: Sequence[Event], expected_index: int | None = None, *, trusted: bool = False
    ) -> AppendResult:
        """Append one atomic batch (see ``EventStore.append``)."""
        batch = prepare_batch(session_id, events, expected_index, trusted=trusted)
        self._check_open()
        with self._data.lock:
            return self._apply(batch)

    async def append_many(self, batches: Sequence[AppendBatch]) -> list[AppendResult | StoreError]:
        """Append independent atomic batches in order (see ``EventStore.append_many``)."""
        prepared = prepare_all(batches)
        self._check_open()
        results: list[AppendResult | StoreError] = []
        with self._data.lock:
            for batch in prepared:
                if isinstance(batch, StoreError):
                    results.append(batch)
                    continue
                try:
                    results.append(self._apply(batch))
                except StoreError as error:
                    results.append(error)
        return results

    async def read(self, session_id: str, after: int = 0, limit: int | None = None) -> list[Event]:
        """The session's events after ``after``, ascending (see ``EventStore.read``)."""
        sid = check_id(session_id, "session id")
        start = check_after(after)
        count = check_limit(limit)
        self._check_open()
        with self._data.lock:
            log = self._data.logs.get(sid)
            records = [] if log is None else log.records[start : None if count is None else start + count]
        # Decoding happens outside the lock: the records are immutable tuples.
        return [
            Event(event_id, kind, decode(blob), at, sid, start + offset + 1)
            for offset, (event_id, kind, at, blob) in enumerate(records)
        ]

    async def last_index(self, session_id: str) -> int:
        """The session's last index; 0 when it has no events."""
        sid = check_id(session_id, "session id")
        self._check_open()
        with self._data.lock:
            log = self._data.logs.get(sid)
            return 0 if log is None else len(log.records)

    async def list_sessions(
        self, prefix: str | None = None, after: str | None = None, limit: int = 100
    ) -> list[SessionSummary]:
        """Sessions in id order, under ``prefix``, after the cursor ``after``."""
        check_listing(prefix, after, limit)
        self._check_open()
        data = self._data
        out: list[SessionSummary] = []
        with data.lock:
            start = bisect.bisect_left(data.order, prefix or "")
            if after is not None:
                start = max(start, bisect.bisect_right(data.order, after))
            for sid in data.order[start:]:
                if len(out) >= limit or (prefix is not None and not sid.startswith(prefix)):
                    break
                log = data.logs[sid]
                out.append(SessionSummary(sid, len(log.records), log.created_at, log.updated_at))
        return out

    async def fork(self, source: str, target: str, through: int) -> AppendResult:
        """Start ``target`` with a copy of ``source``'s events ``1..through`` (see ``EventStore.fork``)."""
        return await fork_by_copy(self, source, target, through)

    async def save_snapshot(self, session_id: str, reducer: str, index: int, data: bytes) -> None:
        """Store or replace the (session, reducer) snapshot."""
        blob = check_snapshot(session_id, reducer, index, data)
        self._check_open()
        with self._data.lock:
            self._data.snapshots[(session_id, reducer)] = Snapshot(index, blob)

    async def load_snapshot(self, session_id: str, reducer: str) -> Snapshot | None:
        """The (session, reducer) snapshot, or ``None``."""
        check_id(session_id, "session id")
        check_id(reducer, "reducer name")
        self._check_open()
        with self._data.lock:
            return self._data.snapshots.get((session_id, reducer))

    async def delete_snapshot(self, session_id: str, reducer: str) -> None:
        """Forget the (session, reducer) snapshot, if any."""
        check_id(session_id, "session id")
        check_id(reducer, "reducer name")
        self._check_open()
        with self._data.lock:
            self._data.snapshots.pop((session_id, reducer), None)

    async def close(self) -> None:
        """Refuse further use of this handle. The data stays for other handles of its name."""
        self._closed = True

    def _reopen(self) -> MemoryStore:
        """A fresh handle on this store's data (``open_store`` after ``close``)."""
        store = MemoryStore(url=self._url, clock=self._clock)
        store._data = self._data
        return store

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"the store {self._url} is closed: open it again with open_store({self._url!r})")

    def _apply(self, batch: PreparedBatch) -> AppendResult:
        """Write one batch, or raise having written nothing. The caller holds the lock."""
        data = self._data
        found: dict[str, StoredEvent] = {}
        for event in batch.events:
            where = data.by_id.get(event.id)
            if where is not None:
                owner, index = where
                _, kind, _, blob = data.logs[owner].records[index - 1]
                found[event.id] = StoredEvent(owner, index, kind, blob)
        replay = replay_result(batch, found)
        if replay is not None:
            return replay
        sid = batch.session_id
        log = data.logs.get(sid)
        last = 0 if log is None else len(log.records)
        if batch.expected_index is not None and batch.expected_index != last:
            raise conflict(sid, batch.expected_index, last)
        # Every check passed; nothing below can fail, so the batch lands whole.
        now = self._clock()
        if log is None:
            log = data.logs[sid] = _Log([], now, now)
            bisect.insort(data.order, sid)
        for offset, event in enumerate(batch.events, start=last + 1):
            log.records.append((event.id, event.type, event.at, event.blob))
            data.by_id[event.id] = (sid, offset)
        log.updated_at = now
        return AppendResult(sid, last + 1, last + len(batch.events))


_named: dict[str, MemoryStore] = {}
_named_lock = threading.Lock()


def open_memory_store(url: str) -> MemoryStore:
    """The store for a ``memory://`` URL: fresh, or the process-wide one of that name."""
    name = url[len("memory://") :]
    if not name:
        return MemoryStore(url=url)
    with _named_lock:
        store = _named.get(name)
        if store is None:
            store = _named[name] = MemoryStore(url=url)
        elif store.closed:
            store = _named[name] = store._reopen()
        return store
