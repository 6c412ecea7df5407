"""Every contract test runs against every store backend (the way eventsourcing runs one suite).

``store_url`` names a fresh store per test: a uniquely named ``memory://`` store, a SQLite file
in the test's temporary directory, a fresh PostgreSQL database (``tests/pg.py``), and a
``sharded://`` store over two SQLite files (sessions split between them by root id). Reopening
the same URL gives the same data for each (the memory store keeps a name's data for the life of
the process), so durability tests are backend-neutral too.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from orchestrator.store import EventStore, SqliteStore, open_store

_names = itertools.count()


@pytest.fixture(params=["memory", "sqlite", "sqlite-inline", "postgres", "sharded"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":  # a fresh database on the session's server (tests/pg.py)
        url: str = request.getfixturevalue("pg_url")
        return url
    if request.param == "memory":
        return f"memory://contract-{next(_names)}"
    if request.param == "sharded":
        return f"sharded://sqlite:///{tmp_path}/a.db|sqlite:///{tmp_path}/b.db"
    if request.param == "sqlite-inline":  # group commit on the loop thread (what hosts use)
        return f"sqlite:///{tmp_path}/s.db?writer=inline"
    return f"sqlite:///{tmp_path}/s.db"


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[EventStore]:
    opened = open_store(store_url)
    yield opened
    await opened.close()


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    """For the few tests of what only the SQLite backend has (group commit, several writers)."""
    opened = SqliteStore(tmp_path / "only.db")
    yield opened
    await opened.close()
