"""A SQLite file deleted or replaced while a store has it open: writes fail loudly, none is acknowledged.

SQLite itself keeps writing to the unlinked inode and reports success; a later reader (a new
process, a restarted host) opens the path and sees none of it. The store checks the path before
every commit.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from actors.local import LocalRuntime
from orchestrator.core.errors import StoreError
from orchestrator.core.events import Event
from orchestrator.run.agent import Agent
from orchestrator.store import open_store
from orchestrator.testing import ScriptedModel

agent = Agent("echo", "Answer.", ScriptedModel([[{"text": "ok"}]], per_turn=True))


def remove_database(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


@pytest.mark.parametrize("writer", ["thread", "inline"])
async def test_a_deleted_file_fails_every_later_write(tmp_path: Path, writer: str) -> None:
    path = tmp_path / "troupe.db"
    store = open_store(f"sqlite:///{path}?writer={writer}")
    try:
        await store.append("s-1", [Event("e-1", "x.note", {"n": 1})])
        remove_database(path)
        for attempt in ("e-2", "e-3"):  # the first write finds out, and every later one is refused too
            with pytest.raises(StoreError, match=r"was deleted \(or moved\) while the store had it open"):
                await store.append("s-1", [Event(attempt, "x.note", {"n": 2})])
    finally:
        await store.close()


@pytest.mark.parametrize("writer", ["thread", "inline"])
async def test_a_replaced_file_fails_writes_and_keeps_the_new_file_untouched(tmp_path: Path, writer: str) -> None:
    path = tmp_path / "troupe.db"
    store = open_store(f"sqlite:///{path}?writer={writer}")
    try:
        await store.append("s-1", [Event("e-1", "x.note", {"n": 1})])
        other = tmp_path / "other.db"
        sqlite3.connect(other).close()
        os.replace(other, path)
        with pytest.raises(StoreError, match="was replaced by another file"):
            await store.append("s-1", [Event("e-2", "x.note", {"n": 2})])
    finally:
        await store.close()
    with sqlite3.connect(path) as conn:  # the new file: nothing of the refused write, no schema even
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)


async def test_a_session_send_is_never_acknowledged_into_a_deleted_file(tmp_path: Path) -> None:
    path = tmp_path / "troupe.db"
    async with LocalRuntime(f"sqlite:///{path}") as rt:
        session = rt.session("s-1", agent=agent)
        assert (await (await session.prompt("hello")).finished).success
        remove_database(path)
        with pytest.raises(StoreError, match="was deleted"):
            await session.send("nobody would ever read this", id="u-lost")
