"""The SQLite writer: its claims by row id, and its groups run together or apart.

Row ids (``SqliteStore._sids``, ``_CLAIM_BY_SID``): a batch for a session the writer has written
before claims its indexes by the session's row id. A remembered id can be wrong (the row was
rolled back and its id reused by another session, or the file was replaced): the claim then
matches nothing and the batch takes the general path, so it still lands in its own session's
log, and a stale index is still a conflict.

Groups: the appends made in one turn of the loop are one group commit (``InlineGroupWriter``).
They run together in one savepoint (``_run_together``); when one raises, or needs a savepoint of
its own (a replay rolls its claim back), the group's work is undone and it runs again apart,
each job in its own savepoint (``_run_apart``), so a refused batch fails alone and leaves no
trace.

Opening: with the inline writer, a session with no events is loaded on the loop, on the
writer's connection between transactions (``idle_connection``), not by a reader thread.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from orchestrator.core.errors import ConcurrencyConflict
from orchestrator.core.events import Event
from orchestrator.store import SqliteStore, open_store
from orchestrator.store import sqlite as sqlite_module
from orchestrator.store.base import Snapshot


def _open(path: Path) -> SqliteStore:
    store = open_store(f"sqlite:///{path}?writer=inline")
    assert isinstance(store, SqliteStore)
    return store


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = _open(tmp_path / "s.db")
    yield opened
    await opened.close()


def _note(event_id: str, n: int) -> list[Event]:
    return [Event(event_id, "x.note", {"n": n})]


async def _first_notes(store: SqliteStore, sessions: int) -> None:
    """Sessions ``s0``... each with one event (``s<i>-1``), written in one group."""
    await asyncio.gather(*(store.append(f"s{i}", _note(f"s{i}-1", 1)) for i in range(sessions)))


def _trace(store: SqliteStore) -> list[str]:
    """The statements the store's write connection runs from now on."""
    conn = store._writer._conn  # type: ignore[attr-defined]  # the inline writer's one connection
    assert isinstance(conn, sqlite3.Connection)
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    return statements


# -- row ids ------------------------------------------------------------------------------------


async def test_a_wrong_remembered_row_id_writes_to_the_right_session(store: SqliteStore) -> None:
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


async def test_a_row_id_of_no_row_is_relearned(store: SqliteStore) -> None:
    await store.append("a", _note("a-1", 1))
    store._sids["a"] = 10_000  # no such row (a group that was rolled back)
    await store.append("a", _note("a-2", 2), expected_index=1)
    assert [e.id for e in await store.read("a")] == ["a-1", "a-2"]
    store._sids["new"] = 10_001  # a session that was never written
    await store.append("new", _note("n-1", 1))
    assert [e.id for e in await store.read("new")] == ["n-1"]


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


async def test_the_writer_remembers_a_bounded_number(store: SqliteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_module, "_SIDS_KEPT", 3)
    for i in range(8):
        await store.append(f"s{i}", _note(f"s{i}-1", 1))
        await store.append(f"s{i}", _note(f"s{i}-2", 2), expected_index=1)
        assert len(store._sids) <= 3
    for i in range(8):
        await store.append(f"s{i}", _note(f"s{i}-3", 3), expected_index=2)
        assert [e.index for e in await store.read(f"s{i}")] == [1, 2, 3]


# -- groups --------------------------------------------------------------------------------------


async def test_a_group_that_succeeds_takes_one_savepoint(store: SqliteStore) -> None:
    await _first_notes(store, 5)
    statements = _trace(store)
    results = await asyncio.gather(*(store.append(f"s{i}", _note(f"s{i}-2", 2), expected_index=1) for i in range(5)))
    assert [(r.first_index, r.duplicate) for r in results] == [(2, False)] * 5
    assert [s for s in statements if s.startswith(("SAVEPOINT", "RELEASE", "BEGIN", "COMMIT"))] == [
        "BEGIN IMMEDIATE",
        "SAVEPOINT jobs",
        "RELEASE jobs",
        "COMMIT",
    ]


async def test_a_conflict_in_a_group_fails_alone_and_leaves_no_trace(store: SqliteStore) -> None:
    await _first_notes(store, 3)
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


async def test_a_replay_in_a_group_rolls_back_its_own_claim(store: SqliteStore) -> None:
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


@pytest.mark.parametrize("failing", [0, 2])
async def test_a_failing_job_at_either_end_of_a_group(store: SqliteStore, failing: int) -> None:
    await _first_notes(store, 3)
    results = await asyncio.gather(
        *(store.append(f"s{i}", _note(f"s{i}-2", 2), expected_index=9 if i == failing else 1) for i in range(3)),
        return_exceptions=True,
    )
    for i, result in enumerate(results):
        assert isinstance(result, ConcurrencyConflict) == (i == failing)
        assert len(await store.read(f"s{i}")) == (1 if i == failing else 2)


class _CountedReads:
    """Counts the store's trips to a reader thread."""

    def __init__(self, store: SqliteStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.trips = 0
        read = store._read

        async def counted(query: Callable[[sqlite3.Connection], object]) -> object:
            self.trips += 1
            return await read(query)

        monkeypatch.setattr(store, "_read", counted)


async def test_a_new_session_loads_on_the_loop_and_a_known_one_from_a_reader(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _first_notes(store, 1)  # the writer's connection is open
    reads = _CountedReads(store, monkeypatch)
    assert await store.load_log("new", "ai") == (None, [])
    assert reads.trips == 0
    await store.save_snapshot("bare", "ai", 0, b"state-0")  # a snapshot and no events: answered the same
    assert await store.load_log("bare", "ai") == (Snapshot(0, b"state-0"), [])
    assert reads.trips == 0
    snapshot, events = await store.load_log("s0", "ai")
    assert snapshot is None and [e.id for e in events] == ["s0-1"]
    assert reads.trips == 1


async def test_a_new_session_loads_from_a_reader_when_the_writer_cannot_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threaded = open_store(f"sqlite:///{tmp_path}/t.db")  # the writer's connection is its thread's
    assert isinstance(threaded, SqliteStore)
    try:
        await threaded.append("s", _note("s-1", 1))
        reads = _CountedReads(threaded, monkeypatch)
        assert await threaded.load_log("new", "ai") == (None, [])
        assert reads.trips == 1
    finally:
        await threaded.close()
    inline = _open(tmp_path / "i.db")
    try:
        reads = _CountedReads(inline, monkeypatch)
        assert await inline.load_log("new", "ai") == (None, [])  # nothing written yet: no connection open
        assert reads.trips == 1
        await inline.append("s", _note("s-1", 1))
        conn = inline._writer._conn  # type: ignore[attr-defined]
        assert isinstance(conn, sqlite3.Connection)
        conn.execute("BEGIN IMMEDIATE")  # a write under way on the loop's connection
        try:
            assert await inline.load_log("other", "ai") == (None, [])
        finally:
            conn.rollback()
        assert reads.trips == 2
    finally:
        await inline.close()
