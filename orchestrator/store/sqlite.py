"""``sqlite:///path.db``: the embedded, durable event store (the default backend).

Writes go through one ``GroupCommitWriter`` per store object (see ``_writer``): concurrent
appends from many coroutines share a transaction, each batch inside its own savepoint. Reads
run on a small pool of reader threads, each with its own connection; WAL mode lets them read
while a write transaction is open, and lets other processes (Ray actors on the same machine,
the CLI) open the same file and read or write concurrently. Nothing here blocks the event loop,
except with the inline writer (``?writer=inline``, what hosts use): its group commits run on the
loop, and so does the lookup that finds a session new when it is opened (``load_log``).

The file layout is described in ``_sqlite_schema``; payloads are msgpack, deflated when large
(``_codec``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Final, TypeVar

from orchestrator.core.errors import StoreError, UsageError
from orchestrator.core.events import AppendResult, Event
from orchestrator.core.ids import derived_event_position, derived_event_prefix
from orchestrator.store._codec import compress, decode
from orchestrator.store._fork import fork_by_copy
from orchestrator.store._rules import StoredEvent, conflict, id_range, replay_result
from orchestrator.store._sqlite_schema import SYNCHRONOUS, connect_reader, connect_writer, stores_derived_ids
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
from orchestrator.store._writer import JOB_SAVEPOINT, GroupCommitWriter, InlineGroupWriter
from orchestrator.store.base import AppendBatch, SessionSummary, Snapshot

__all__ = ["SqliteStore"]

T = TypeVar("T")
_Row = tuple[int, int, str | None, str, float, bytes]

_CLAIM: Final = (
    "UPDATE sessions SET last_index = ?, updated_at = ? WHERE session_id = ? AND last_index = ? RETURNING sid"
)
"""Move a session's last index from the one a batch expects to after the batch, in one statement."""
_CLAIM_BY_SID: Final = (
    "UPDATE sessions SET last_index = ?, updated_at = ? WHERE sid = ? AND session_id = ? AND last_index = ?"
)
"""``_CLAIM`` for a session whose row id the writer knows: found by its key, not by the text index,
and with no row to return (measured, 100 sessions' batches interleaved: ~4.5 µs against ~10-13).
The ``session_id`` term makes a remembered id that is wrong (the row was rolled back, its id
reused) match nothing, and the write take the general path."""
_SIDS_KEPT: Final = 65_536
"""Row ids the writer remembers at most (``_sids``); past that it forgets them all and relearns."""
_INSERT_EVENT: Final = "INSERT INTO events (sid, idx, event_id, type, at, payload) VALUES (?, ?, ?, ?, ?, ?)"
_SELECT_EVENTS: Final = (
    "SELECT idx, event_id, type, at, payload FROM events "
    "WHERE sid = (SELECT sid FROM sessions WHERE session_id = ?) AND idx > ? ORDER BY idx LIMIT ?"
)
_UPSERT_SNAPSHOT: Final = (
    "INSERT INTO snapshots (session_id, reducer, idx, data) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (session_id, reducer) DO UPDATE SET idx = excluded.idx, data = excluded.data"
)
_IDS_PER_QUERY: Final = 500
"""Ids per ``IN (…)`` lookup: far under SQLite's bound-parameter limit."""


class SqliteStore:
    """An ``EventStore`` in one SQLite file.

    Create it anywhere (it only starts a thread); use it from any running event loop. The
    database is opened, and its schema created, on the writer thread: a path that cannot be
    opened surfaces as a ``StoreError`` from the first call.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        url: str | None = None,
        busy_timeout: float = 30.0,
        readers: int = 4,
        clock: Callable[[], float] = time.time,
        writer: str = "thread",
        synchronous: str = "normal",
        _after_row: Callable[[int], None] | None = None,
    ) -> None:
        """Open (or create) the store at ``path``; missing parent directories are created.

        Args:
            path: the database file.
            url: what ``url`` reports (``open_store`` passes the URL it was given).
            busy_timeout: seconds to wait for another process's write lock before failing.
                Generous: several actor processes commit to one file, each holding the lock
                only for one short group transaction.
            readers: reader threads (and connections).
            clock: the time source for session ``created_at``/``updated_at``.
            writer: ``thread`` (a writer thread owns the write connection; the default) or
                ``inline`` (group commit on the event loop that calls it: what session hosts
                use, where a thread hop per commit costs more than the commit).
            synchronous: ``normal`` (the default: a commit survives a crash of the process, and
                only an OS crash or power loss can drop the last commits) or ``full`` (every
                commit is synced to disk before it is acknowledged: it survives those too, and
                costs an fsync per group commit). See ``connect_writer``.
            _after_row: test-only hook called on the writer thread after each event row is
                inserted, with the number of rows this store object has inserted so far; the
                crash tests use it to kill the process in the middle of a batch.
        """
        self._path = os.path.abspath(os.fspath(path))
        self._url = url if url is not None else f"sqlite:///{os.fspath(path)}"
        self._busy_timeout = busy_timeout
        self._clock = clock
        self._after_row = _after_row
        self._derive: bool | None = None  # whether the file stores derived ids as NULL (writer thread)
        self._sids: dict[str, int] = {}
        """Session id -> row id, as the writer last saw it (writer thread; ``_CLAIM_BY_SID``)."""
        self._rows_inserted = 0
        self._closed = False
        # The writer must not hold the store (a bound method would): then a store dropped without
        # close() can be collected, and its finalizer stops the writer thread.
        if writer not in ("thread", "inline"):
            raise UsageError(f"writer must be 'thread' or 'inline', not {writer!r}")
        if synchronous not in SYNCHRONOUS:
            raise UsageError(f"synchronous must be 'normal' or 'full', not {synchronous!r}")
        self.synchronous = synchronous
        """How commits reach the disk (``normal`` or ``full``; see ``connect_writer``)."""
        kind = InlineGroupWriter if writer == "inline" else GroupCommitWriter
        self._writer = kind(
            functools.partial(_open_writer, self._path, busy_timeout, synchronous),
            name="troupe-sqlite-writer",
            describe=self._url,
            busy_timeout=busy_timeout,
            watch=self._path,
        )
        self._readers = ThreadPoolExecutor(max_workers=max(1, readers), thread_name_prefix="troupe-sqlite-read")
        self._idle: list[sqlite3.Connection] = []
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        # A store dropped without close() still stops its writer thread.
        weakref.finalize(self, self._writer.stop)

    @property
    def url(self) -> str:
        """The URL this store was opened with."""
        return self._url

    @property
    def path(self) -> str:
        """The database file (absolute)."""
        return self._path

    @property
    def commits(self) -> int:
        """Write transactions committed by this store object (far fewer than appends)."""
        return self._writer.commits

    # -- writes ------------------------------------------------------------------------------

    async def append(
        self, session_id: str, events: Sequence[Event], expected_index: int | None = None, *, trusted: bool = False
    ) -> AppendResult:
        """Append one atomic batch (see ``EventStore.append``); returns after it is committed.

        Cancelling the call does not withdraw a batch that was already queued; re-appending it
        is safe (an identical batch replays its result).
        """
        batch = prepare_batch(session_id, events, expected_index, trusted=trusted)
        self._check_open()
        # One batch: the writer's savepoint for this job is the batch's (a refused batch raises,
        # and the writer rolls the job back), so it needs no savepoint of its own.
        return await self._writer.submit(lambda conn: self._write_batch(conn, batch, self._clock(), JOB_SAVEPOINT))

    async def append_many(self, batches: Sequence[AppendBatch]) -> list[AppendResult | StoreError]:
        """Append independent atomic batches in order, in one transaction with a savepoint each."""
        prepared = prepare_all(batches)
        self._check_open()
        if not prepared:
            return []
        return await self._writer.submit(lambda conn: self._write(conn, prepared))

    async def fork(self, source: str, target: str, through: int) -> AppendResult:
        """Start ``target`` with a copy of ``source``'s events ``1..through`` (see ``EventStore.fork``)."""
        return await fork_by_copy(self, source, target, through)

    async def save_snapshot(self, session_id: str, reducer: str, index: int, data: bytes) -> None:
        """Store or replace the (session, reducer) snapshot."""
        blob = check_snapshot(session_id, reducer, index, data)
        self._check_open()

        def upsert(conn: sqlite3.Connection) -> None:
            conn.execute(_UPSERT_SNAPSHOT, (session_id, reducer, index, blob))

        await self._writer.submit(upsert)

    async def delete_snapshot(self, session_id: str, reducer: str) -> None:
        """Forget the (session, reducer) snapshot, if any."""
        check_id(session_id, "session id")
        check_id(reducer, "reducer name")
        self._check_open()

        def delete(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM snapshots WHERE session_id = ? AND reducer = ?", (session_id, reducer))

        await self._writer.submit(delete)

    def _write(
        self, conn: sqlite3.Connection, batches: list[PreparedBatch | StoreError]
    ) -> list[AppendResult | StoreError]:
        """Writer thread: each batch in its own savepoint, so a refused one leaves no trace."""
        results: list[AppendResult | StoreError] = []
        now = self._clock()
        for batch in batches:
            if isinstance(batch, StoreError):  # refused before it reached storage
                results.append(batch)
                continue
            conn.execute("SAVEPOINT batch")
            try:
                results.append(self._write_batch(conn, batch, now))
            except StoreError as error:
                conn.execute("ROLLBACK TO batch")
                results.append(error)
            conn.execute("RELEASE batch")
        return results

    def _write_batch(
        self, conn: sqlite3.Connection, batch: PreparedBatch, now: float, savepoint: str = "batch"
    ) -> AppendResult:
        """Write one batch inside the savepoint ``savepoint`` (rolled back to on a clash)."""
        sid_text = batch.session_id
        count = len(batch.events)
        expected = batch.expected_index
        # The common case: a session the writer knows, at the index it expects. Its indexes are
        # claimed with one statement; anything else (a new session, a stale index, a replay)
        # takes the general path below.
        sid: int | None = None
        claimed = False
        if expected:
            sid = self._sids.get(sid_text)
            if sid is not None:
                claimed = conn.execute(_CLAIM_BY_SID, (expected + count, now, sid, sid_text, expected)).rowcount == 1
            else:
                row = conn.execute(_CLAIM, (expected + count, now, sid_text, expected)).fetchone()
                if row is not None:
                    sid, claimed = self._remember(sid_text, int(row[0])), True
        last = 0
        if claimed:
            last = expected or 0
        else:
            sid = None
            row = conn.execute("SELECT sid, last_index FROM sessions WHERE session_id = ?", (sid_text,)).fetchone()
            if row is not None:
                sid, last = self._remember(sid_text, int(row[0])), int(row[1])
            if expected is not None and expected != last:
                # A retried batch carries a stale expected_index: a replay is checked first.
                replay = replay_result(batch, _stored(conn, batch))
                if replay is not None:
                    return replay
                raise conflict(sid_text, expected, last)
            if sid is None:
                cursor = conn.execute(
                    "INSERT INTO sessions (session_id, last_index, created_at, updated_at) VALUES (?, 0, ?, ?)",
                    (sid_text, now, now),
                )
                assert cursor.lastrowid is not None
                sid = self._remember(sid_text, cursor.lastrowid)
        assert sid is not None
        derive = self._derives(conn)
        if derive and _moved_derived_ids(conn, sid, last, batch):
            replay = replay_result(batch, _stored(conn, batch))
            if replay is not None:
                if claimed:
                    conn.execute(f"ROLLBACK TO {savepoint}")  # the claim: a replay writes nothing
                return replay
        # The common case is a new batch: insert optimistically and let the unique index on
        # event_id detect reuse, rather than looking every id up first.
        try:
            conn.executemany(_INSERT_EVENT, self._event_rows(sid, last, batch, derive))
        except sqlite3.IntegrityError:
            conn.execute(f"ROLLBACK TO {savepoint}")  # drop the rows inserted before the clash
            replay = replay_result(batch, _stored(conn, batch))
            if replay is not None:
                return replay
            raise StoreError(
                f"the log of session {sid_text!r} is inconsistent (index {last + 1} is taken); "
                "the database file may have been edited by hand"
            ) from None
        if not claimed:
            conn.execute("UPDATE sessions SET last_index = ?, updated_at = ? WHERE sid = ?", (last + count, now, sid))
        return AppendResult(sid_text, last + 1, last + count)

    def _remember(self, session_id: str, sid: int) -> int:
        """Keep ``session_id``'s row id for its next claims (writer thread); returns ``sid``."""
        sids = self._sids
        if len(sids) >= _SIDS_KEPT and session_id not in sids:
            sids.clear()
        sids[session_id] = sid
        return sid

    def _derives(self, conn: sqlite3.Connection) -> bool:
        if self._derive is None:
            self._derive = stores_derived_ids(conn)
        return self._derive

    def _event_rows(self, sid: int, last: int, batch: PreparedBatch, derive: bool) -> Iterator[_Row]:
        """The batch's rows for ``executemany``; ``_after_row`` runs as each row is inserted.

        An id derived from its own position is stored as ``NULL`` (see ``_sqlite_schema``).
        Deflating here, on the writer thread, overlaps with the callers' work: zlib releases
        the GIL.
        """
        hook = self._after_row
        derived = derived_event_prefix(batch.session_id) if derive else None
        for offset, event in enumerate(batch.events, start=1):
            index = last + offset
            event_id: str | None = event.id
            if derived is not None and event.id == f"{derived}{index}":
                event_id = None
            yield (sid, index, event_id, event.type, event.at, compress(event.blob))
            # executemany asks for the next row only after it has inserted this one.
            self._rows_inserted += 1
            if hook is not None:
                hook(self._rows_inserted)

    async def stored_bytes(self) -> int:
        """Bytes the store takes on disk: the file, indexes included, after a WAL checkpoint."""
        self._check_open()
        return await asyncio.to_thread(_checkpointed_size, self._path)

    # -- reads -------------------------------------------------------------------------------

    async def read(self, session_id: str, after: int = 0, limit: int | None = None) -> list[Event]:
        """The session's events after ``after``, ascending (see ``EventStore.read``)."""
        sid = check_id(session_id, "session id")
        start = check_after(after)
        count = check_limit(limit)

        def select(conn: sqlite3.Connection) -> list[Event]:
            return _select_events(conn, sid, start, count)

        return await self._read(select)

    async def load_log(self, session_id: str, reducer: str) -> tuple[Snapshot | None, list[Event]]:
        """The usable snapshot and the events after it, in one trip to a reader (``LogLoader``)."""
        sid = check_id(session_id, "session id")
        check_id(reducer, "reducer name")

        def select(conn: sqlite3.Connection) -> tuple[Snapshot | None, list[Event]]:
            snapshot = _select_snapshot(conn, sid, reducer)
            if snapshot is not None and snapshot.index > _select_last_index(conn, sid):
                snapshot = None  # a snapshot past the log's end is stale
            return snapshot, _select_events(conn, sid, 0 if snapshot is None else snapshot.index, None)

        idle = self._writer.idle_connection()
        if idle is not None:
            # A new session (a host opens one for every sub-agent run): one indexed lookup on the
            # loop, not a trip to a reader thread and back for an empty answer. Any trouble (the
            # file busy, say) and the reader thread asks instead, and reports it.
            with contextlib.suppress(sqlite3.Error):
                if _select_last_index(idle, sid) == 0:
                    return select(idle)
        return await self._read(select)

    async def last_index(self, session_id: str) -> int:
        """The session's last index; 0 when it has no events."""
        sid = check_id(session_id, "session id")
        return await self._read(lambda conn: _select_last_index(conn, sid))

    async def list_sessions(
        self, prefix: str | None = None, after: str | None = None, limit: int = 100
    ) -> list[SessionSummary]:
        """Sessions in id order, under ``prefix``, after the cursor ``after``."""
        check_listing(prefix, after, limit)
        where, params = id_range(prefix, after, "?")
        sql = "SELECT session_id, last_index, created_at, updated_at FROM sessions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY session_id LIMIT ?"
        params.append(limit)

        def select(conn: sqlite3.Connection) -> list[SessionSummary]:
            return [SessionSummary(*row) for row in conn.execute(sql, params).fetchall()]

        return await self._read(select)

    async def load_snapshot(self, session_id: str, reducer: str) -> Snapshot | None:
        """The (session, reducer) snapshot, or ``None``."""
        check_id(session_id, "session id")
        check_id(reducer, "reducer name")
        return await self._read(lambda conn: _select_snapshot(conn, session_id, reducer))

    async def _read(self, query: Callable[[sqlite3.Connection], T]) -> T:
        self._check_open()
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._readers, self._run_read, query)
        except RuntimeError as error:  # the pool was shut down: close() raced this call
            raise self._writer.closed_error() from error

    def _run_read(self, query: Callable[[sqlite3.Connection], T]) -> T:
        """Reader thread: borrow an idle connection (or open one), run the query, return it."""
        self._writer.wait_ready()
        try:
            conn = self._idle.pop()
        except IndexError:
            conn = connect_reader(self._path, busy_timeout=self._busy_timeout)
            with self._connections_lock:
                self._connections.append(conn)
        try:
            return query(conn)
        except sqlite3.Error as error:
            raise StoreError(f"reading {self._url} failed: {error}") from error
        finally:
            self._idle.append(conn)

    # -- lifecycle ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Finish queued writes, stop the writer and reader threads, and close the file.

        Later calls raise ``StoreError``. Calling ``close`` again waits for the same shutdown.
        """
        self._closed = True
        self._writer.stop()
        await asyncio.to_thread(self._shutdown)

    def _shutdown(self) -> None:
        self._writer.join()
        self._readers.shutdown(wait=True)
        with self._connections_lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
            self._idle.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise self._writer.closed_error()


def _select_snapshot(conn: sqlite3.Connection, sid: str, reducer: str) -> Snapshot | None:
    """The (session, reducer) snapshot, or ``None``."""
    query = "SELECT idx, data FROM snapshots WHERE session_id = ? AND reducer = ?"
    row = conn.execute(query, (sid, reducer)).fetchone()
    return None if row is None else Snapshot(int(row[0]), bytes(row[1]))


def _select_last_index(conn: sqlite3.Connection, sid: str) -> int:
    """The session's last index; 0 when it has no events."""
    row = conn.execute("SELECT last_index FROM sessions WHERE session_id = ?", (sid,)).fetchone()
    return 0 if row is None else int(row[0])


def _select_events(conn: sqlite3.Connection, sid: str, after: int, limit: int | None) -> list[Event]:
    """A session's events after ``after``, ascending, at most ``limit``."""
    rows = conn.execute(_SELECT_EVENTS, (sid, after, -1 if limit is None else limit)).fetchall()
    derived = derived_event_prefix(sid)
    return [
        Event(event_id or f"{derived}{idx}", kind, decode(blob), at, sid, idx) for idx, event_id, kind, at, blob in rows
    ]


def _checkpointed_size(path: str) -> int:
    """The file's size once the WAL is folded into it (what the data takes, not the WAL's history)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    wal = f"{path}-wal"
    return os.path.getsize(path) + (os.path.getsize(wal) if os.path.exists(wal) else 0)


def _open_writer(path: str, busy_timeout: float, synchronous: str) -> sqlite3.Connection:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    return connect_writer(path, busy_timeout=busy_timeout, synchronous=synchronous)


def _derived_index(event_id: str, session_id: str) -> int | None:
    """The index a derived id of ``session_id`` (``troupe:<session>#<index>``) names, else ``None``."""
    position = derived_event_position(event_id)
    return position[1] if position is not None and position[0] == session_id else None


def _moved_derived_ids(conn: sqlite3.Connection, sid: int, last: int, batch: PreparedBatch) -> bool:
    """Whether the batch carries a derived id for a position it will not land on, already stored.

    Such an id is stored as ``NULL`` at its own position, where the unique index cannot see it.
    """
    prefix = derived_event_prefix(batch.session_id)
    for offset, event in enumerate(batch.events, start=1):
        if not event.id.startswith(prefix) or event.id == f"{prefix}{last + offset}":
            continue  # not a derived id of this session, or one at its own position (the common case)
        index = _derived_index(event.id, batch.session_id)
        if index is not None and index != last + offset:
            row = conn.execute("SELECT 1 FROM events WHERE sid = ? AND idx = ? AND event_id IS NULL", (sid, index))
            if row.fetchone() is not None:
                return True
    return False


def _stored(conn: sqlite3.Connection, batch: PreparedBatch) -> dict[str, StoredEvent]:
    """The stored events that share an id with the batch (few: only on the retry path)."""
    found: dict[str, StoredEvent] = {}
    ids = []
    for event in batch.events:
        index = _derived_index(event.id, batch.session_id)
        if index is not None:  # possibly stored as NULL at its own position
            row = conn.execute(
                "SELECT e.type, e.payload FROM events AS e JOIN sessions AS s ON s.sid = e.sid "
                "WHERE s.session_id = ? AND e.idx = ? AND e.event_id IS NULL",
                (batch.session_id, index),
            ).fetchone()
            if row is not None:
                found[event.id] = StoredEvent(batch.session_id, index, row[0], row[1])
                continue
        ids.append(event.id)
    for start in range(0, len(ids), _IDS_PER_QUERY):
        chunk = ids[start : start + _IDS_PER_QUERY]
        rows = conn.execute(
            "SELECT e.event_id, s.session_id, e.idx, e.type, e.payload FROM events AS e "
            f"JOIN sessions AS s ON s.sid = e.sid WHERE e.event_id IN ({','.join('?' * len(chunk))})",
            chunk,
        ).fetchall()
        for event_id, session_id, idx, kind, blob in rows:
            found[event_id] = StoredEvent(session_id, idx, kind, blob)
    return found
