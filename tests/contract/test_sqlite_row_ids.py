"""The SQLite writer's remembered row ids (``SqliteStore._sids``, ``_CLAIM_BY_SID``).

A batch for a session the writer has written before claims its indexes by the session's row id.
A remembered id can be wrong (the row was rolled back and its id reused by another session, or
the file was replaced): the claim then matches nothing and the batch takes the general path, so
it still lands in its own session's log, and a stale index is still a conflict.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.core.errors import ConcurrencyConflict
from orchestrator.core.events import Event
from orchestrator.store import SqliteStore, open_store
from orchestrator.store import sqlite as sqlite_module


def _open(path: Path) -> SqliteStore:
    store = open_store(f"sqlite:///{path}?writer=inline")
    assert isinstance(store, SqliteStore)
    return store


def _note(event_id: str, n: int) -> list[Event]:
    return [Event(event_id, "x.note", {"n": n})]


async def test_a_wrong_remembered_row_id_writes_to_the_right_session(tmp_path: Path) -> None:
    store = _open(tmp_path / "s.db")
    try:
        await store.append("a", _note("a-1", 1))
        await store.append("b", _note("b-1", 1))
        store._sids["a"] = store._sids["b"]  # as if a's row had been rolled back and b had its id
        result = await store.append("a", _note("a-2", 2), expected_index=1)
        assert (result.first_index, result.last_index) == (2, 2)
        assert [e.id for e in await store.read("a")] == ["a-1", "a-2"]
        assert [e.id for e in await store.read("b")] == ["b-1"]
        assert store._sids["a"] != store._sids["b"]  # relearned
        await store.append("b", _note("b-2", 2), expected_index=1)  # b's own claim is untouched
        assert [e.id for e in await store.read("b")] == ["b-1", "b-2"]
    finally:
        await store.close()


async def test_a_row_id_of_no_row_is_relearned(tmp_path: Path) -> None:
    store = _open(tmp_path / "s.db")
    try:
        await store.append("a", _note("a-1", 1))
        store._sids["a"] = 10_000  # no such row (a group that was rolled back)
        await store.append("a", _note("a-2", 2), expected_index=1)
        assert [e.id for e in await store.read("a")] == ["a-1", "a-2"]
        store._sids["new"] = 10_001  # a session that was never written
        await store.append("new", _note("n-1", 1))
        assert [e.id for e in await store.read("new")] == ["n-1"]
    finally:
        await store.close()


async def test_a_stale_owner_with_a_remembered_id_still_conflicts(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    first, second = _open(path), _open(path)  # two writers on one file: two hosts
    try:
        await first.append("s", _note("s-1", 1))
        await second.append("s", _note("s-2", 2), expected_index=1)  # the session moved on
        assert "s" in first._sids
        with pytest.raises(ConcurrencyConflict):
            await first.append("s", _note("s-x", 3), expected_index=1)
        assert [e.id for e in await second.read("s")] == ["s-1", "s-2"]
        # A retry of what the other writer stored is a replay, not a conflict.
        replay = await first.append("s", _note("s-2", 2), expected_index=1)
        assert replay.duplicate
    finally:
        await first.close()
        await second.close()


async def test_the_writer_remembers_a_bounded_number(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_module, "_SIDS_KEPT", 3)
    store = _open(tmp_path / "s.db")
    try:
        for i in range(8):
            await store.append(f"s{i}", _note(f"s{i}-1", 1))
            await store.append(f"s{i}", _note(f"s{i}-2", 2), expected_index=1)
            assert len(store._sids) <= 3
        for i in range(8):
            await store.append(f"s{i}", _note(f"s{i}-3", 3), expected_index=2)
            assert [e.index for e in await store.read(f"s{i}")] == [1, 2, 3]
    finally:
        await store.close()
