"""``postgresql://user@host:port/db``: the event store a Ray cluster shares (every node reaches it).

The same guarantees as every backend (see ``base``), kept by the database itself: the primary
key ``(session, index)`` and a row lock per session make indexes unique and gap-free, and two
writers of one session (two processes, two nodes) never both succeed at one index; the unique
key on ``event_id`` makes ids idempotent across the store. Appends are group-committed
(``_pg_write``): every batch queued while a transaction runs joins the next one, two round trips
for the whole group. Payloads are msgpack ``bytea`` through the shared codec, like SQLite.

Beyond the port: ``follow(session_id, after)`` yields a session's new events as they commit,
woken by ``LISTEN``/``NOTIFY`` instead of polling (``_pg_follow``). The schema is versioned and
migrated on open (``_pg_schema``). A restarted server is reconnected to with backoff, and a
write cut off in flight is retried only once it is known not to have committed.

All I/O runs on the store's own loop thread (``_pg_engine``), so one store serves callers on
any event loop, and opening one never blocks: the first call connects.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Final

from orchestrator.core.errors import StoreError
from orchestrator.core.events import AppendResult, Event
from orchestrator.core.ids import derived_event_prefix
from orchestrator.store._codec import decode
from orchestrator.store._fork import fork_by_copy
from orchestrator.store._pg_engine import Connection, Engine
from orchestrator.store._pg_follow import Listener
from orchestrator.store._pg_hop import AppendHops
from orchestrator.store._pg_write import GroupWriter, Outcome
from orchestrator.store._rules import id_range
from orchestrator.store._urls import describe_url
from orchestrator.store._validate import (
    check_after,
    check_id,
    check_limit,
    check_listing,
    check_snapshot,
    prepare_all,
    prepare_batch,
)
from orchestrator.store.base import AppendBatch, SessionSummary, Snapshot

__all__ = ["PostgresStore"]

_SELECT_EVENTS: Final = (
    "SELECT idx, event_id, type, at, payload FROM troupe_events "
    "WHERE sid = (SELECT sid FROM troupe_sessions WHERE session_id = %s) AND idx > %s ORDER BY idx LIMIT %s"
)
_UPSERT_SNAPSHOT: Final = (
    "INSERT INTO troupe_snapshots (session_id, reducer, idx, data) VALUES (%s, %s, %s, %s) "
    "ON CONFLICT (session_id, reducer) DO UPDATE SET idx = excluded.idx, data = excluded.data"
)
_SIZE: Final = (
    "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class AS c "
    "WHERE c.relkind = 'r' AND c.relname IN ('troupe_sessions', 'troupe_events', 'troupe_snapshots') "
    "AND pg_table_is_visible(c.oid)"
)
_FOLLOW_PAGE: Final = 1000
"""Events per read while following: a follower far behind catches up in pages."""


class PostgresStore:
    """An ``EventStore`` in a PostgreSQL database, shared by every process that opens its URL."""

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 8,
        connect_timeout: float = 10.0,
        reconnect_timeout: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Prepare the store; nothing connects until the first call.

        Args:
            url: a libpq URL (``postgresql://user:password@host:port/db?sslmode=…``).
            pool_size: most connections this store object holds (the writer uses one at a
                time; reads and followers' reads share the rest). The listener has its own.
            connect_timeout: seconds to wait for the server on first use before failing.
            reconnect_timeout: seconds a call keeps retrying after its connection was lost
                (a server restart) before it fails.
            clock: the time source for session ``created_at``/``updated_at``.
        """
        self._url = url
        self._where = describe_url(url)
        self._engine = Engine(
            url, self._where, pool_size=pool_size, connect_timeout=connect_timeout, reconnect_timeout=reconnect_timeout
        )
        self._writer = GroupWriter(self._engine, clock)
        self._hops = AppendHops(self._engine, self._writer)
        self._listener = Listener(self._engine)
        self._closed = False
        # A store dropped without close(): commit what is queued, close the pool, end the thread.
        # The callback holds the engine's parts, never the store, so the store can be collected.
        self._finalizer = weakref.finalize(self, _abandon, self._engine, self._writer, self._listener)

    @property
    def url(self) -> str:
        """The URL this store was opened with."""
        return self._url

    @property
    def commits(self) -> int:
        """Write transactions committed by this store object (far fewer than appends)."""
        return self._writer.commits

    async def migrate(self) -> tuple[int, int]:
        """Bring the database's schema up to this Troupe's now; returns (version before, after).

        Every store does this on its first call anyway; ``troupe store migrate`` calls it to do
        it ahead of a deployment and to report the versions.
        """
        self._check_open()
        return await self._engine.call(self._engine.migrate())

    @property
    def lost_writes(self) -> int:
        """Group commits whose connection was lost mid-write (then retried, or found committed)."""
        return self._writer.lost

    @property
    def listener(self) -> Listener:
        """The ``LISTEN`` side (for diagnostics and the reconnect tests)."""
        return self._listener

    # -- writes ------------------------------------------------------------------------------

    async def append(
        self, session_id: str, events: Sequence[Event], expected_index: int | None = None, *, trusted: bool = False
    ) -> AppendResult:
        """Append one atomic batch (see ``EventStore.append``); returns after it is committed.

        Cancelling the call does not withdraw a batch already queued; re-appending it is safe.
        The appends of one turn of the caller's loop travel to the store's loop together
        (``_pg_hop``).
        """
        batch = prepare_batch(session_id, events, expected_index, trusted=trusted)
        self._check_open()
        result = await self._hops.append(batch)
        if isinstance(result, StoreError):
            raise result
        return result

    async def append_many(self, batches: Sequence[AppendBatch]) -> list[AppendResult | StoreError]:
        """Append independent atomic batches in order, in one group commit."""
        prepared = prepare_all(batches)
        self._check_open()
        if not prepared:
            return []
        results: list[Outcome] = await self._engine.call(self._writer.submit(prepared))
        return results

    async def fork(self, source: str, target: str, through: int) -> AppendResult:
        """Start ``target`` with a copy of ``source``'s events ``1..through`` (see ``EventStore.fork``)."""
        return await fork_by_copy(self, source, target, through)

    async def save_snapshot(self, session_id: str, reducer: str, index: int, data: bytes) -> None:
        """Store or replace the (session, reducer) snapshot (an upsert: safe to retry)."""
        blob = check_snapshot(session_id, reducer, index, data)
        self._check_open()

        async def upsert(conn: Connection) -> None:
            await conn.execute(_UPSERT_SNAPSHOT, (session_id, reducer, index, blob))

        await self._engine.call(self._engine.run("saving a snapshot", upsert))

    async def delete_snapshot(self, session_id: str, reducer: str) -> None:
        """Forget the (session, reducer) snapshot, if any."""
        check_id(session_id, "session id")
        check_id(reducer, "reducer name")
        self._check_open()

        async def delete(conn: Connection) -> None:
            await conn.execute(
                "DELETE FROM troupe_snapshots WHERE session_id = %s AND reducer = %s", (session_id, reducer)
            )

        await self._engine.call(self._engine.run("deleting a snapshot", delete))

    # -- reads -------------------------------------------------------------------------------

    async def read(self, session_id: str, after: int = 0, limit: int | None = None) -> list[Event]:
        """The session's events after ``after``, ascending (see ``EventStore.read``)."""
        sid = check_id(session_id, "session id")
        start = check_after(after)
        count = check_limit(limit)
        self._check_open()

        async def select(conn: Connection) -> list[Event]:
            cursor = await conn.execute(_SELECT_EVENTS, (sid, start, count), binary=True)
            derived = derived_event_prefix(sid)
            return [
                Event(event_id or f"{derived}{idx}", kind, decode(bytes(blob)), at, sid, idx)
                for idx, event_id, kind, at, blob in await cursor.fetchall()
            ]

        return await self._engine.call(self._engine.run("reading events", select))

    async def last_index(self, session_id: str) -> int:
        """The session's last index; 0 when it has no events."""
        sid = check_id(session_id, "session id")
        self._check_open()

        async def select(conn: Connection) -> int:
            cursor = await conn.execute("SELECT last_index FROM troupe_sessions WHERE session_id = %s", (sid,))
            row = await cursor.fetchone()
            return 0 if row is None else int(row[0])

        return await self._engine.call(self._engine.run("reading a session", select))

    async def list_sessions(
        self, prefix: str | None = None, after: str | None = None, limit: int = 100
    ) -> list[SessionSummary]:
        """Sessions in id order (code points: the column is ``COLLATE "C"``), under ``prefix``."""
        check_listing(prefix, after, limit)
        self._check_open()
        where, params = id_range(prefix, after, "%s")
        where.insert(0, "last_index > 0")  # a row a refused first batch created is no session yet
        params.append(limit)
        sql = (
            "SELECT session_id, last_index, created_at, updated_at FROM troupe_sessions "
            f"WHERE {' AND '.join(where)} ORDER BY session_id LIMIT %s"
        )

        async def select(conn: Connection) -> list[SessionSummary]:
            cursor = await conn.execute(sql, params)
            return [SessionSummary(str(s), int(n), float(c), float(u)) for s, n, c, u in await cursor.fetchall()]

        return await self._engine.call(self._engine.run("listing sessions", select))

    async def load_snapshot(self, session_id: str, reducer: str) -> Snapshot | None:
        """The (session, reducer) snapshot, or ``None``."""
        check_id(session_id, "session id")
        check_id(reducer, "reducer name")
        self._check_open()

        async def select(conn: Connection) -> Snapshot | None:
            cursor = await conn.execute(
                "SELECT idx, data FROM troupe_snapshots WHERE session_id = %s AND reducer = %s",
                (session_id, reducer),
                binary=True,
            )
            row = await cursor.fetchone()
            return None if row is None else Snapshot(int(row[0]), bytes(row[1]))

        return await self._engine.call(self._engine.run("loading a snapshot", select))

    async def stored_bytes(self) -> int:
        """Bytes Troupe's tables take in the database: rows, indexes and TOAST (in 8 KB pages)."""
        self._check_open()

        async def select(conn: Connection) -> int:
            cursor = await conn.execute(_SIZE)
            row = await cursor.fetchone()
            return 0 if row is None else int(row[0])

        return await self._engine.call(self._engine.run("measuring the tables", select))

    async def follow(self, session_id: str, after: int = 0) -> AsyncGenerator[Event, None]:
        """The session's events with index > ``after``, then each new one as it commits (forever).

        Woken by ``NOTIFY``, never polling; a notification missed while the listener was
        reconnecting costs one read from the last index seen, never a gap. Ends with
        ``StoreError`` when the store is closed.
        """
        async with contextlib.aclosing(self.follow_groups(session_id, after)) as groups:
            async for group in groups:
                for event in group:
                    yield event

    async def follow_groups(self, session_id: str, after: int = 0) -> AsyncGenerator[list[Event], None]:
        """``follow``'s events as each read finds them: every commit since the last read, up to a page.

        A read sees whole commits (each is one transaction), so a group splits one only where a
        page ends (``_FOLLOW_PAGE`` events waiting).
        """
        sid = check_id(session_id, "session id")
        cursor = check_after(after)
        self._check_open()
        waiter = self._listener.subscribe(sid)  # before the first read: no commit falls between
        try:
            await self._engine.call(self._start_listener())
            while True:
                waiter.event.clear()
                events = await self.read(sid, cursor, _FOLLOW_PAGE)
                if events:
                    cursor = events[-1].index
                    yield events
                else:
                    await waiter.event.wait()
        finally:
            self._listener.unsubscribe(waiter)

    async def _start_listener(self) -> None:
        await self._engine.pool()  # an unreachable server fails the follower here, clearly
        self._listener.start()

    # -- lifecycle ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Commit queued appends, stop listening, close the pool and the loop thread.

        Later calls raise ``StoreError``; followers end with it. Calling ``close`` again is a no-op.
        """
        if self._closed:
            return
        self._closed = True
        self._finalizer.detach()
        await self._hops.flush()  # appends this loop queued before the close are committed, not refused
        try:
            await asyncio.wrap_future(
                asyncio.run_coroutine_threadsafe(_shut(self._engine, self._writer, self._listener), self._engine.loop)
            )
        finally:
            self._engine.stop()
            await asyncio.to_thread(self._engine.join)

    def _check_open(self) -> None:
        if self._closed:
            raise self._engine.closed_error()


async def _shut(engine: Engine, writer: GroupWriter, listener: Listener) -> None:
    """Commit what is queued, end the followers, wait for calls in flight, close the pool (store loop)."""
    await engine.shut(writer.stop, listener.stop)


def _abandon(engine: Engine, writer: GroupWriter, listener: Listener) -> None:
    async def end() -> None:
        try:
            await _shut(engine, writer, listener)
        finally:
            engine.loop.stop()

    work = end()
    try:
        asyncio.run_coroutine_threadsafe(work, engine.loop)
    except RuntimeError:  # the loop is gone already (interpreter exit)
        work.close()
