"""``sqlite:///x.db?synchronous=full``: every commit synced, for those who need power-loss durability.

The default stays ``synchronous=NORMAL`` in WAL (a commit survives a crash of the process, which
is what DESIGN §3 needs); ``full`` adds an fsync per group commit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.host_options import with_writer
from orchestrator.core.errors import UsageError
from orchestrator.core.events import Event
from orchestrator.store import SqliteStore, open_store
from orchestrator.store._sqlite_schema import connect_writer

_LEVELS = {"normal": 1, "full": 2}  # what PRAGMA synchronous reads back


@pytest.mark.parametrize("synchronous", ["normal", "full"])
def test_the_write_connection_has_the_setting(tmp_path: Path, synchronous: str) -> None:
    conn = connect_writer(str(tmp_path / "s.db"), busy_timeout=1.0, synchronous=synchronous)
    try:
        assert conn.execute("PRAGMA synchronous").fetchone() == (_LEVELS[synchronous],)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        conn.close()


@pytest.mark.parametrize("writer", ["thread", "inline"])
@pytest.mark.parametrize("synchronous", ["normal", "full"])
async def test_the_url_option_reaches_the_store_and_it_works(tmp_path: Path, writer: str, synchronous: str) -> None:
    url = f"sqlite:///{tmp_path}/s.db?writer={writer}&synchronous={synchronous}"
    store = open_store(url)
    try:
        assert isinstance(store, SqliteStore)
        assert store.synchronous == synchronous
        await store.append("s-1", [Event("e-1", "x.note", {"n": 1})])
        assert [e.payload for e in await store.read("s-1")] == [{"n": 1}]
    finally:
        await store.close()


def test_the_default_is_normal(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/s.db")
    assert isinstance(store, SqliteStore)
    assert store.synchronous == "normal"


def test_a_bad_setting_names_the_choices(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="synchronous must be 'normal' or 'full', not 'off'"):
        open_store(f"sqlite:///{tmp_path}/s.db?synchronous=off")
    with pytest.raises(UsageError, match=r"writer=thread\|inline and synchronous=normal\|full"):
        open_store(f"sqlite:///{tmp_path}/s.db?fsync=1")


def test_the_hosts_inline_writer_keeps_the_urls_other_options() -> None:
    assert with_writer("sqlite:///x.db", "inline") == "sqlite:///x.db?writer=inline"
    assert with_writer("sqlite:///x.db?synchronous=full", "inline") == "sqlite:///x.db?synchronous=full&writer=inline"
    assert with_writer("sqlite:///x.db?writer=thread", "inline") == "sqlite:///x.db?writer=thread"
    assert with_writer("sqlite:///x.db?synchronous=full", "thread") == "sqlite:///x.db?synchronous=full"
    assert with_writer("postgresql://h/db", "inline") == "postgresql://h/db"
