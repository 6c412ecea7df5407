"""Group commit for PostgreSQL: every batch queued while a transaction runs goes into the next.

One transaction per group, in two round trips, whatever the number of sessions in it:

1. ``BEGIN``; create the rows of sessions not seen before (``ON CONFLICT DO NOTHING``); lock
   every session of the group (``SELECT … FOR UPDATE``, in id order, so two groups cannot
   deadlock); look up which of the group's event ids are stored already (by id, and a derived
   id ``troupe:<session>#<index>`` also by its position, where it is stored as ``NULL``); and
   take the transaction id. Pipelined: one round trip.
2. In Python, each batch in order against the locked indexes, with the shared rules
   (``_rules.replay_result``, ``_rules.conflict``): a replay, a conflict, a partial duplicate,
   or new rows. Then one multi-row ``INSERT … SELECT FROM unnest(…)`` of every new event, one
   ``UPDATE`` of every session's last index, one ``pg_notify`` per session (its id and last
   index, never the events), and ``COMMIT``. Pipelined: the second round trip.

A batch refused in step 2 is simply left out, so no savepoint is needed. Another store object
may store one of the group's ids for *another* session between the lookup and the insert; the
unique key refuses the insert, and the whole group is planned again (it then sees that id).

A lost connection is retried when the group is known not to have committed: lost in step 1,
or lost in step 2 and ``pg_xact_status`` of its transaction id says ``aborted``. When it says
``committed``, the results planned in step 2 are the answer. When it cannot say (the id is too
old), the group is retried anyway: its ids are stored, so it replays as ``duplicate=True``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import PoolTimeout

from orchestrator.core.errors import PartialDuplicateBatch, StoreError
from orchestrator.core.events import AppendResult
from orchestrator.core.ids import derived_event_id, derived_event_position, derived_event_prefix
from orchestrator.store._codec import compress
from orchestrator.store._pg_engine import Connection, Engine, Retry, is_lost
from orchestrator.store._pg_schema import CHANNEL, failure
from orchestrator.store._rules import StoredEvent, conflict, replay_result
from orchestrator.store._validate import PreparedBatch

__all__ = ["GroupWriter", "Outcome"]

Outcome = AppendResult | StoreError
_MAX_GROUP: Final = 4096
"""Most appends in one transaction: bounds its size and the wait of its first caller."""
_MAX_RACES: Final = 8
"""Re-plans of one group after another writer took one of its ids (each is a rare race)."""
_RACES: Final = (pg_errors.UniqueViolation, pg_errors.DeadlockDetected, pg_errors.SerializationFailure)

_CREATE_SESSIONS: Final = (
    "INSERT INTO troupe_sessions (session_id) SELECT unnest(%b::text[]) ON CONFLICT (session_id) DO NOTHING"
)
_LOCK_SESSIONS: Final = (
    "SELECT session_id, sid, last_index FROM troupe_sessions WHERE session_id = ANY(%b::text[]) "
    "ORDER BY session_id FOR UPDATE"
)
_FIND_IDS: Final = (
    "SELECT e.event_id, s.session_id, e.idx, e.type, e.payload FROM troupe_events AS e "
    "JOIN troupe_sessions AS s ON s.sid = e.sid WHERE e.event_id = ANY(%b::text[])"
)
_FIND_DERIVED: Final = (
    "SELECT s.session_id, e.idx, e.type, e.payload FROM unnest(%b::text[], %b::bigint[]) AS d(session_id, idx) "
    "JOIN troupe_sessions AS s ON s.session_id = d.session_id "
    "JOIN troupe_events AS e ON e.sid = s.sid AND e.idx = d.idx WHERE e.event_id IS NULL"
)
_INSERT_EVENTS: Final = (
    "INSERT INTO troupe_events (sid, idx, at, event_id, type, payload) SELECT * FROM "
    "unnest(%b::bigint[], %b::bigint[], %b::float8[], %b::text[], %b::text[], %b::bytea[])"
)
_ADVANCE_SESSIONS: Final = (
    "UPDATE troupe_sessions AS s SET last_index = u.last, updated_at = %b, "
    "created_at = CASE WHEN s.last_index = 0 THEN %b ELSE s.created_at END "
    "FROM unnest(%b::bigint[], %b::bigint[]) AS u(sid, last) WHERE s.sid = u.sid"
)
_NOTIFY: Final = f"SELECT pg_notify('{CHANNEL}', note) FROM unnest(%b::text[]) AS note"


@dataclass(slots=True)
class _Plan:
    """What one group writes, and what each of its batches is told."""

    results: list[Outcome] = field(default_factory=list)
    columns: tuple[list[Any], ...] = field(default_factory=lambda: ([], [], [], [], [], []))
    last: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Session id -> (sid, last index after the group)."""


def plan(
    batches: Sequence[PreparedBatch | StoreError], locked: dict[str, tuple[int, int]], found: dict[str, StoredEvent]
) -> _Plan:
    """Decide every batch of a group, in order, against the locked sessions and the stored ids."""
    out = _Plan(last=dict(locked))
    known = dict(found)  # grows with the group's own events: later batches see earlier ones
    sids, idxs, ats, event_ids, types, blobs = out.columns
    for batch in batches:
        if isinstance(batch, StoreError):  # refused before it reached storage
            out.results.append(batch)
            continue
        sid, last = out.last[batch.session_id]
        try:
            replay = replay_result(batch, {e.id: known[e.id] for e in batch.events if e.id in known})
        except PartialDuplicateBatch as error:
            out.results.append(error)
            continue
        if replay is not None:
            out.results.append(replay)
            continue
        if batch.expected_index is not None and batch.expected_index != last:
            out.results.append(conflict(batch.session_id, batch.expected_index, last))
            continue
        derived = derived_event_prefix(batch.session_id)
        for offset, event in enumerate(batch.events, start=1):
            blob = compress(event.blob)
            sids.append(sid)
            idxs.append(last + offset)
            ats.append(event.at)
            # An id derived from its own position is stored as NULL (see ``_pg_schema``).
            event_ids.append(None if event.id == f"{derived}{last + offset}" else event.id)
            types.append(event.type)
            blobs.append(blob)
            known[event.id] = StoredEvent(batch.session_id, last + offset, event.type, blob)
        out.last[batch.session_id] = (sid, last + len(batch.events))
        out.results.append(AppendResult(batch.session_id, last + 1, last + len(batch.events)))
    return out


class _InDoubt(Exception):
    """The connection was lost while the group's COMMIT may have been on its way."""

    def __init__(self, xid: str, results: list[Outcome], cause: BaseException) -> None:
        super().__init__(xid)
        self.xid = xid
        self.results = results
        self.cause = cause


@dataclass(slots=True)
class _Job:
    batches: list[PreparedBatch | StoreError]
    future: asyncio.Future[list[Outcome]]


class GroupWriter:
    """The one writer task of a store object (it lives on the store's loop)."""

    def __init__(self, engine: Engine, clock: Any) -> None:
        """Nothing starts until the first ``submit``."""
        self._engine = engine
        self._clock = clock
        self._queue: asyncio.Queue[_Job | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.commits = 0
        """Transactions committed (a diagnostic: group commit keeps it far below appends)."""
        self.lost = 0
        """Groups whose connection was lost mid-write, then retried or found committed."""

    async def submit(self, batches: list[PreparedBatch | StoreError]) -> list[Outcome]:
        """Queue batches for the next group and wait for its commit (store loop).

        The write stands even if the caller is cancelled: a queued batch is not withdrawn.
        """
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        future: asyncio.Future[list[Outcome]] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Job(batches, future))
        return await asyncio.shield(future)

    async def stop(self) -> None:
        """Commit everything queued, then end the task."""
        if self._task is not None:
            self._queue.put_nowait(None)
            await self._task
            self._task = None

    async def _run(self) -> None:
        stopping = False
        while not stopping:
            first = await self._queue.get()
            if first is None:
                return
            jobs = [first]
            while len(jobs) < _MAX_GROUP and not self._queue.empty():
                job = self._queue.get_nowait()
                if job is None:
                    stopping = True
                    break
                jobs.append(job)
            try:
                outcomes = await self._commit([batch for job in jobs for batch in job.batches])
            except Exception as error:  # never let the writer die: later callers would hang
                for job in jobs:
                    if not job.future.done():
                        job.future.set_exception(error if isinstance(error, StoreError) else StoreError(repr(error)))
                continue
            start = 0
            for job in jobs:
                if not job.future.done():
                    job.future.set_result(outcomes[start : start + len(job.batches)])
                start += len(job.batches)

    async def _commit(self, batches: list[PreparedBatch | StoreError]) -> list[Outcome]:
        if not any(isinstance(b, PreparedBatch) for b in batches):
            return list(batches)  # type: ignore[arg-type]  # every one is a StoreError
        engine = self._engine
        retry = Retry(engine.where, "appending", engine.reconnect_timeout)
        races = 0
        while True:
            pool = await engine.pool()
            conn: Connection | None = None
            try:
                async with pool.connection(timeout=retry.remaining()) as conn:
                    results = await self._attempt(conn, batches)
                self.commits += 1
                return results
            except _InDoubt as doubt:
                self.lost += 1
                committed = await self._committed(doubt.xid, retry)
                if committed:
                    self.commits += 1
                    return doubt.results
                await retry.wait(doubt.cause)
            except _RACES as error:
                races += 1
                if races > _MAX_RACES:
                    raise failure(engine.where, "appending", error) from None
            except (psycopg.Error, PoolTimeout) as error:
                if not is_lost(error, conn):
                    raise failure(engine.where, "appending", error) from None
                self.lost += 1
                await retry.wait(error)

    async def _attempt(self, conn: Connection, batches: list[PreparedBatch | StoreError]) -> list[Outcome]:
        live = [b for b in batches if isinstance(b, PreparedBatch)]
        sessions = sorted({b.session_id for b in live})
        ids = [e.id for b in live for e in b.events]
        positions = [p for p in map(derived_event_position, ids) if p is not None]
        try:
            async with conn.pipeline():
                await conn.execute("BEGIN")
                await conn.execute(_CREATE_SESSIONS, (sessions,))
                locked_cursor = await conn.execute(_LOCK_SESSIONS, (sessions,))
                found_cursor = await conn.execute(_FIND_IDS, (ids,), binary=True)
                derived_cursor = await conn.execute(
                    _FIND_DERIVED, ([s for s, _ in positions], [i for _, i in positions]), binary=True
                )
                xact_cursor = await conn.execute("SELECT pg_current_xact_id()::text")
            locked = {str(s): (int(sid), int(last)) for s, sid, last in await locked_cursor.fetchall()}
            found = {
                str(event_id): StoredEvent(str(session), int(idx), str(kind), bytes(blob))
                for event_id, session, idx, kind, blob in await found_cursor.fetchall()
            }
            for session, idx, kind, blob in await derived_cursor.fetchall():
                found[derived_event_id(str(session), int(idx))] = StoredEvent(
                    str(session), int(idx), str(kind), bytes(blob)
                )
            xact = await xact_cursor.fetchone()
            assert xact is not None
            xid = str(xact[0])
        except psycopg.Error:
            await _rollback(conn)
            raise
        now = float(self._clock())
        decided = plan(batches, locked, found)
        if not decided.columns[0]:  # nothing new to write (all replays or refusals)
            await _rollback(conn)
            return decided.results
        sids = [sid for sid, _ in decided.last.values()]
        lasts = [last for _, last in decided.last.values()]
        notes = [f"{last} {session}" for session, (_, last) in decided.last.items() if last != locked[session][1]]
        try:
            async with conn.pipeline():
                await conn.execute(_INSERT_EVENTS, decided.columns)
                await conn.execute(_ADVANCE_SESSIONS, (now, now, sids, lasts))
                await conn.execute(_NOTIFY, (notes,))
                await conn.execute("COMMIT")
        except psycopg.Error as error:
            if is_lost(error, conn):
                raise _InDoubt(xid, decided.results, error) from error
            await _rollback(conn)
            raise
        return decided.results

    async def _committed(self, xid: str, retry: Retry) -> bool:
        """Whether transaction ``xid`` committed; ``False`` also when the server cannot tell."""
        while True:
            pool = await self._engine.pool()
            conn: Connection | None = None
            try:
                async with pool.connection(timeout=retry.remaining()) as conn:
                    cursor = await conn.execute("SELECT pg_xact_status(%s::xid8)", (xid,))
                    row = await cursor.fetchone()
            except (psycopg.Error, PoolTimeout) as error:
                if not is_lost(error, conn):
                    raise failure(self._engine.where, "checking whether a commit happened", error) from None
                await retry.wait(error)
                continue
            status = None if row is None else row[0]
            if status != "in progress":  # its backend may still be finishing it: ask again
                return status == "committed"
            await retry.wait(StoreError("the interrupted transaction is still in progress"))


async def _rollback(conn: Connection) -> None:
    """Leave the connection clean for the pool (a broken one is discarded by the pool anyway)."""
    if conn.broken or conn.closed:
        return
    try:
        await conn.execute("ROLLBACK")
    except psycopg.Error:
        pass
