"""The SQLite file layout, and how every connection to it is opened.

Layout (``PRAGMA user_version = 2``), chosen for a small file:

- ``sessions(sid, session_id, last_index, created_at, updated_at)``: one row per session. The
  session id text is stored once (plus its unique index); events refer to the session by the
  small integer ``sid`` (1-3 bytes) instead of repeating a 20-60 byte id in every event.
- ``events(seq, sid, idx, event_id, type, at, payload)``: a rowid table whose rowid ``seq``
  grows with every insert. Appends from many sessions all land at the right edge of the
  b-tree, so its pages fill completely, whereas a table keyed by ``(sid, idx)`` splits pages in
  the middle as interleaved sessions grow; and rowid leaves hold up to ~4 KB of a row before
  spilling to an overflow page, where a WITHOUT ROWID table spills past ~1 KB. (Measured on
  the store bench: the ``(sid, idx)`` WITHOUT ROWID layout was 4-8 % larger and slower.) Two
  small indexes remain: ``(sid, idx)`` reads a log in order, ``event_id`` keeps ids unique
  across the store (partial: it holds only the ids stored, not the ``NULL`` ones below).
- ``snapshots(session_id, reducer, idx, data)``: a cache; keyed by the session's text id so it
  needs no session row.

``payload`` is msgpack, deflated when large (see ``_codec``). An event's session id and index
live in ``sid``/``idx`` only, never inside the payload. The event id is stored, and indexed for
uniqueness across the store, except the id Troupe derives from the position itself
(``troupe:<session>#<index>``, most of a session's events): that one is ``NULL`` and rebuilt on
read, which saves about a fifth of a session's bytes. Version 1 files (``event_id NOT NULL``)
stay readable and writable; they store every id.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Final

from orchestrator.core.errors import StoreError

__all__ = ["SCHEMA_VERSION", "SYNCHRONOUS", "connect_reader", "connect_writer", "stores_derived_ids"]

SCHEMA_VERSION: Final = 2
_BUSY: Final = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)

_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS sessions (
        sid INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL UNIQUE,
        last_index INTEGER NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS events (
        seq INTEGER PRIMARY KEY,
        sid INTEGER NOT NULL,
        idx INTEGER NOT NULL,
        event_id TEXT,
        type TEXT NOT NULL,
        at REAL NOT NULL,
        payload BLOB NOT NULL
    )""",
    "CREATE UNIQUE INDEX IF NOT EXISTS events_by_position ON events (sid, idx)",
    # Partial: the derived ids stored as NULL (most events) take no entry. Files made before
    # keep their full index, which answers the same lookups (``event_id = ?`` and ``IN``).
    "CREATE UNIQUE INDEX IF NOT EXISTS events_by_id ON events (event_id) WHERE event_id IS NOT NULL",
    """CREATE TABLE IF NOT EXISTS snapshots (
        session_id TEXT NOT NULL,
        reducer TEXT NOT NULL,
        idx INTEGER NOT NULL,
        data BLOB NOT NULL,
        UNIQUE (session_id, reducer)
    )""",
)


SYNCHRONOUS: Final = ("normal", "full")
"""The ``synchronous`` settings a store URL may ask for (``sqlite:///x.db?synchronous=full``)."""


def connect_writer(path: str, *, busy_timeout: float, synchronous: str = "normal") -> sqlite3.Connection:
    """Open the write connection: WAL, ``synchronous=NORMAL`` (or ``FULL``), and the schema in place.

    WAL lets readers (this process's reader threads, the CLI in another process) run while a
    write transaction is open, and with ``synchronous=NORMAL`` a commit appends to the WAL
    without an fsync: a committed batch survives a process crash (a killed actor), and only an
    OS crash or power loss can drop the last commits, never corrupt the file. That is what
    DESIGN §3 asks (events are persisted before their effects: another process, or this one
    restarted, reads them back). ``synchronous=FULL`` also syncs the WAL at every commit, so an
    acknowledged batch survives an OS crash or power loss too, for an fsync per group commit.

    Raises:
        StoreError: the file cannot be opened, or was written by a newer schema.
    """
    conn = _connect(path, busy_timeout)
    try:
        _set_wal(conn, path, busy_timeout)
        if synchronous not in SYNCHRONOUS:
            raise StoreError(f"synchronous must be one of {', '.join(SYNCHRONOUS)}, not {synchronous!r}")
        conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
        # A bigger page cache than the 2 MB default keeps the indexes' hot pages in memory.
        conn.execute("PRAGMA cache_size = -16000")
        # Keep the WAL file from staying large after a burst (it is reused, not shrunk, otherwise).
        conn.execute("PRAGMA journal_size_limit = 67108864")
        _ensure_schema(conn, path)
        # From here on the writer takes the write lock itself, retrying quickly (see
        # _writer._begin_immediate): SQLite's own busy handler would sleep in coarse steps.
        conn.execute("PRAGMA busy_timeout = 0")
    except BaseException:
        conn.close()
        raise
    return conn


def stores_derived_ids(conn: sqlite3.Connection) -> bool:
    """Whether the file stores derived event ids as ``NULL`` (version 2 layout)."""
    for _, name, _, notnull, _, _ in conn.execute("PRAGMA table_info(events)").fetchall():
        if name == "event_id":
            return not notnull
    return False


def connect_reader(path: str, *, busy_timeout: float) -> sqlite3.Connection:
    """Open a read connection (used from one thread at a time; never writes)."""
    conn = _connect(path, busy_timeout)
    conn.execute("PRAGMA query_only = ON")
    return conn


def _connect(path: str, busy_timeout: float) -> sqlite3.Connection:
    # isolation_level=None: no implicit transactions; the writer issues BEGIN/COMMIT itself and
    # each reader SELECT is its own consistent snapshot. check_same_thread=False: the store
    # hands connections between its own threads, never using one from two threads at once.
    return sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)


def _set_wal(conn: sqlite3.Connection, path: str, busy_timeout: float) -> None:
    # Switching a new file to WAL needs a brief exclusive lock; when several processes open a new
    # file at once, one switches and the others see "locked" and retry until it is WAL.
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.OperationalError as error:
            if error.sqlite_errorcode not in _BUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.01)
            continue
        if str(mode).lower() != "wal":
            raise StoreError(f"{path} could not be switched to WAL mode (it is in {mode!r} mode)")
        return


def _ensure_schema(conn: sqlite3.Connection, path: str) -> None:
    # BEGIN IMMEDIATE: two processes creating the schema of a new file at once serialize here.
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{path} has store schema version {version}, newer than this Troupe's "
                f"{SCHEMA_VERSION}: upgrade Troupe to open it"
            )
        for statement in _SCHEMA:
            conn.execute(statement)
        if version == 0:  # a new file; an older one keeps its version (and its layout)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
