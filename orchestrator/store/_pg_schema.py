"""The PostgreSQL layout, its versions, and how a store connects and says what failed.

Tables (all named ``troupe_*``, so a database can hold other things too):

- ``troupe_schema(version, applied_at)``: one row per migration applied; the schema's version
  is the largest. Migrations run on open, in one transaction under an advisory lock, so two
  stores opening a new database at once migrate it once (the second waits, then finds nothing
  to do). A database whose version is newer than this code knows is refused, never touched.
- ``troupe_sessions(sid, session_id, last_index, created_at, updated_at)``: one row per session.
  Its row lock serializes the writers of one session (``SELECT … FOR UPDATE``), and events refer
  to it by the 8-byte ``sid`` rather than repeating a 20-60 byte session id in every row. A row
  with ``last_index = 0`` is a session a refused batch would have started: listings skip it.
- ``troupe_events(sid, idx, at, event_id, type, payload)``: the log. The primary key
  ``(sid, idx)`` keeps each session's indexes unique (with the row lock, gap-free) and reads a
  log in order; the unique key on ``event_id`` keeps ids unique across the store. ``payload``
  is ``bytea``: msgpack, deflated when large, exactly as SQLite stores it (``_codec``). Since
  version 2, as in SQLite, the id Troupe derives from the position itself
  (``troupe:<session>#<index>``, most of a session's events) is ``NULL`` and rebuilt on read:
  it costs neither its bytes in the row nor an entry in the unique index (a unique key skips
  ``NULL``), and the writer looks such an id up by its position instead. Rows written by
  version 1 keep their ids, and read the same.
- ``troupe_snapshots(session_id, reducer, idx, data)``: the snapshot cache, ``bytea``.

``session_id`` is ``COLLATE "C"``: byte order of UTF-8, which is code point order, the order
``list_sessions`` promises on every backend whatever the database's default collation.
"""

from __future__ import annotations

import re
import time
from typing import Any, Final

import psycopg

from orchestrator.core.errors import StoreError

__all__ = ["CHANNEL", "MIGRATIONS", "SCHEMA_VERSION", "connect", "failure", "migrate", "schema_version"]

CHANNEL: Final = "troupe_events"
"""The ``LISTEN``/``NOTIFY`` channel; a payload is ``"<last index> <session id>"``, never events."""

MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (  # 1: the first layout
        """CREATE TABLE troupe_sessions (
            sid bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            session_id text COLLATE "C" NOT NULL UNIQUE,
            last_index bigint NOT NULL DEFAULT 0,
            created_at double precision NOT NULL DEFAULT 0,
            updated_at double precision NOT NULL DEFAULT 0
        )""",
        # Fixed-width columns first: no alignment padding between them.
        """CREATE TABLE troupe_events (
            sid bigint NOT NULL,
            idx bigint NOT NULL,
            at double precision NOT NULL,
            event_id text COLLATE "C" NOT NULL,
            type text NOT NULL,
            payload bytea NOT NULL,
            PRIMARY KEY (sid, idx),
            UNIQUE (event_id)
        )""",
        """CREATE TABLE troupe_snapshots (
            session_id text COLLATE "C" NOT NULL,
            reducer text NOT NULL,
            idx bigint NOT NULL,
            data bytea NOT NULL,
            PRIMARY KEY (session_id, reducer)
        )""",
    ),
    (  # 2: derived ids are NULL (rebuilt from the position on read), as in SQLite's layout 2
        "ALTER TABLE troupe_events ALTER COLUMN event_id DROP NOT NULL",
    ),
)
"""Migration N is ``MIGRATIONS[N - 1]``: statements run in order, in one transaction."""

SCHEMA_VERSION: Final = len(MIGRATIONS)

_LOCK_KEY: Final = 0x74726F757065  # "troupe": the advisory lock that serializes migrations
_VERSION_TABLE: Final = (
    "CREATE TABLE IF NOT EXISTS troupe_schema (version integer PRIMARY KEY, applied_at double precision NOT NULL)"
)


def failure(where: str, doing: str, error: BaseException) -> StoreError:
    """One clear ``StoreError``: which store, what it was doing, and what the server or libpq said."""
    return StoreError(f"PostgreSQL store {where}: {doing} failed: {_detail(error)}")


def _detail(error: BaseException) -> str:
    """The message of libpq or the server on one line (it spreads hints over several)."""
    return re.sub(r"\s+", " ", str(error)).strip() or type(error).__name__


async def connect(
    url: str, where: str, *, timeout: float, application_name: str = "troupe"
) -> psycopg.AsyncConnection[Any]:
    """Open one autocommit connection, or raise the one error that says the server is unreachable."""
    try:
        return await psycopg.AsyncConnection.connect(
            url, autocommit=True, connect_timeout=max(1, round(timeout)), application_name=application_name
        )
    except psycopg.Error as error:
        raise StoreError(
            f"cannot reach PostgreSQL at {where}: {_detail(error)}; check that the server is running "
            "and that the URL's host, port, user and database are right"
        ) from None


async def schema_version(conn: psycopg.AsyncConnection[Any]) -> int:
    """The database's schema version (0: no Troupe tables yet)."""
    cursor = await conn.execute("SELECT to_regclass('troupe_schema') IS NOT NULL")
    row = await cursor.fetchone()
    if row is None or not row[0]:
        return 0
    cursor = await conn.execute("SELECT coalesce(max(version), 0) FROM troupe_schema")
    row = await cursor.fetchone()
    return int(row[0]) if row is not None else 0


async def migrate(conn: psycopg.AsyncConnection[Any], where: str) -> tuple[int, int]:
    """Bring the schema up to ``SCHEMA_VERSION``; returns (version before, version after).

    Raises:
        StoreError: the database was written by a newer Troupe (it is left untouched).
    """
    async with conn.transaction():
        # Transaction-scoped: released by the commit (or by the rollback of a failed migration).
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        await conn.execute(_VERSION_TABLE)
        before = await schema_version(conn)
        if before > SCHEMA_VERSION:
            raise StoreError(
                f"the PostgreSQL store {where} was written by a newer Troupe (schema {before}, this one "
                f"knows {SCHEMA_VERSION}): upgrade raytroupe"
            )
        for version in range(before + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version - 1]:
                await conn.execute(statement)
            await conn.execute(
                "INSERT INTO troupe_schema (version, applied_at) VALUES (%s, %s)", (version, time.time())
            )
    return before, SCHEMA_VERSION
