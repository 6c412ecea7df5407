"""The SQLite writer's groups: every job together in one savepoint, and apart when one fails.

The appends made in one turn of the loop are one group commit (``InlineGroupWriter``). They run
together in one savepoint (``_run_together``); when one raises, or needs a savepoint of its own
(a replay rolls its claim back), the group's work is undone and it runs again apart, each job in
its own savepoint (``_run_apart``), so a refused batch fails alone and leaves no trace.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from orchestrator.core.errors import ConcurrencyConflict
from orchestrator.core.events import Event
from orchestrator.store import SqliteStore, open_store


def _open(path: Path) -> SqliteStore:
    store = open_store(f"sqlite:///{path}?writer=inline")
    assert isinstance(store, SqliteStore)
    return store


def _note(event_id: str, n: int) -> list[Event]:
    return [Event(event_id, "x.note", {"n": n})]


def _trace(store: SqliteStore) -> list[str]:
    """The statements the store's write connection runs from now on."""
    conn = store._writer._conn  # type: ignore[attr-defined]  # the inline writer's one connection
    assert isinstance(conn, sqlite3.Connection)
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    return statements


async def test_a_group_that_succeeds_takes_one_savepoint(tmp_path: Path) -> None:
    store = _open(tmp_path / "s.db")
    try:
        await asyncio.gather(*(store.append(f"s{i}", _note(f"s{i}-1", 1)) for i in range(5)))
        statements = _trace(store)
        results = await asyncio.gather(
            *(store.append(f"s{i}", _note(f"s{i}-2", 2), expected_index=1) for i in range(5))
        )
        assert [(r.first_index, r.duplicate) for r in results] == [(2, False)] * 5
        assert [s for s in statements if s.startswith(("SAVEPOINT", "RELEASE", "BEGIN", "COMMIT"))] == [
            "BEGIN IMMEDIATE",
            "SAVEPOINT jobs",
            "RELEASE jobs",
            "COMMIT",
        ]
    finally:
        await store.close()


async def test_a_conflict_in_a_group_fails_alone_and_leaves_no_trace(tmp_path: Path) -> None:
    store = _open(tmp_path / "s.db")
    try:
        await asyncio.gather(*(store.append(f"s{i}", _note(f"s{i}-1", 1)) for i in range(3)))
        statements = _trace(store)
        results = await asyncio.gather(
            store.append("s0", _note("s0-2", 2), expected_index=1),
            store.append("s1", _note("s1-2", 2), expected_index=5),  # stale: a conflict
            store.append("s2", _note("s2-2", 2), expected_index=1),
            return_exceptions=True,
        )
        assert not isinstance(results[0], BaseException) and results[0].first_index == 2
        assert isinstance(results[1], ConcurrencyConflict)
        assert not isinstance(results[2], BaseException) and results[2].first_index == 2
        assert [e.id for e in await store.read("s0")] == ["s0-1", "s0-2"]
        assert [e.id for e in await store.read("s1")] == ["s1-1"]
        assert [e.id for e in await store.read("s2")] == ["s2-1", "s2-2"]
        assert "ROLLBACK TO jobs" in statements  # run together first, then apart
        assert statements.count("SAVEPOINT job") == 3
    finally:
        await store.close()


async def test_a_replay_in_a_group_rolls_back_its_own_claim(tmp_path: Path) -> None:
    store = _open(tmp_path / "s.db")
    try:
        await store.append("s", _note("a-1", 1))
        statements = _trace(store)
        # The same event again at the next index: it is claimed, its insert clashes on the id,
        # and the claim is rolled back to the job's own savepoint before the replay is answered.
        replay, other = await asyncio.gather(
            store.append("s", _note("a-1", 1), expected_index=1), store.append("t", _note("t-1", 1))
        )
        assert replay.duplicate and (replay.first_index, replay.last_index) == (1, 1)
        assert not other.duplicate
        assert [e.id for e in await store.read("s")] == ["a-1"]
        assert [e.id for e in await store.read("t")] == ["t-1"]
        assert "ROLLBACK TO jobs" in statements and "ROLLBACK TO job" in statements
        after = await store.append("s", _note("a-2", 2), expected_index=1)  # the claim was undone
        assert after.first_index == 2
    finally:
        await store.close()


@pytest.mark.parametrize("failing", [0, 2])
async def test_a_failing_job_at_either_end_of_a_group(tmp_path: Path, failing: int) -> None:
    store = _open(tmp_path / "s.db")
    try:
        await asyncio.gather(*(store.append(f"s{i}", _note(f"s{i}-1", 1)) for i in range(3)))
        results = await asyncio.gather(
            *(store.append(f"s{i}", _note(f"s{i}-2", 2), expected_index=9 if i == failing else 1) for i in range(3)),
            return_exceptions=True,
        )
        for i, result in enumerate(results):
            assert isinstance(result, ConcurrencyConflict) == (i == failing)
            assert len(await store.read(f"s{i}")) == (1 if i == failing else 2)
    finally:
        await store.close()
