"""Crash safety of the SQL stores: a writer process dies mid-batch; no batch is ever half-written.

A child process appends 50-event batches to four sessions at once (so group commit puts several
batches in one transaction) and prints each batch's id once its append has returned. It is
killed either from inside SQLite's writer thread, between two row inserts of a batch (the
``_after_row`` test hook calling ``os._exit``: SQLite only, the one store that inserts row by
row in the writing process), or from outside with SIGKILL after a random number of
acknowledgements (SQLite and PostgreSQL: there the kill cuts the group's transaction at any of
its round trips, and the server must roll it back). The parent then reopens the store and
checks that every stored batch is whole and in order, that every acknowledged batch is stored,
and that the store still accepts appends.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
from collections import defaultdict
from pathlib import Path
from typing import Final

import pytest

from orchestrator.core.events import Event
from orchestrator.store import EventStore, SqliteStore, open_store

BATCH: Final = 50
SESSIONS: Final = 4
_ROOT: Final = str(Path(__file__).resolve().parents[2])

_CHILD: Final = "import sys; from tests.contract.test_store_crash import child; child(sys.argv[1], int(sys.argv[2]))"


def _batch(session_id: str, n: int) -> list[Event]:
    """Batch ``n`` of a session, exactly as the child writes it."""
    bid = f"{session_id}-b{n}"
    return [Event(f"{bid}-{i}", "crash.test", {"batch": bid, "count": BATCH, "i": i}) for i in range(BATCH)]


def child(url: str, exit_at_row: int) -> None:
    """The writer process: append batches to every session until killed.

    With ``exit_at_row`` set, the process exits between two row inserts once that many rows
    have been inserted: inside an open transaction, in the middle of a batch.
    """

    def after_row(rows: int) -> None:
        if rows == exit_at_row:
            os._exit(1)

    async def write(store: EventStore, sid: str) -> None:
        n = await store.last_index(sid) // BATCH  # resume after an earlier crash
        while True:
            await store.append(sid, _batch(sid, n), expected_index=n * BATCH)
            print(f"{sid}-b{n}", flush=True)
            n += 1

    async def main() -> None:
        store = SqliteStore(url.removeprefix("sqlite:///"), _after_row=after_row) if exit_at_row else open_store(url)
        await asyncio.gather(*(write(store, f"s{k}") for k in range(SESSIONS)))

    asyncio.run(main())


def _start(url: str, exit_at_row: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, url, str(exit_at_row)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=_ROOT,
    )


def _run_until_it_exits(path: Path, exit_at_row: int) -> set[str]:
    """Run a child that kills itself at a row; returns the batch ids it acknowledged."""
    child = _start(f"sqlite:///{path}", exit_at_row)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 1, err
    return set(out.split())


def _run_and_kill(url: str, after_acks: int) -> set[str]:
    """Run a child, SIGKILL it once it has acknowledged ``after_acks`` batches."""
    child = _start(url, 0)
    watchdog = threading.Timer(60, child.kill)  # a hung child ends the test instead of hanging it
    watchdog.start()
    try:
        assert child.stdout is not None
        acked: set[str] = set()
        while len(acked) < after_acks:
            line = child.stdout.readline()
            assert line, f"the writer died early: {child.stderr.read() if child.stderr else ''}"
            acked.add(line.strip())
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        acked.update(child.stdout.read().split())  # acknowledged before the kill, still in the pipe
        assert child.returncode == -signal.SIGKILL
    finally:
        watchdog.cancel()
        if child.stdout is not None:
            child.stdout.close()
        if child.stderr is not None:
            child.stderr.close()
    return acked


def _integrity(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


async def _check(url: str, acked: set[str]) -> int:
    """Assert every stored batch is whole and every acknowledged one is stored; return rows."""
    store = open_store(url)
    try:
        stored: set[str] = set()
        total = 0
        for summary in await store.list_sessions():
            events = await store.read(summary.session_id)
            assert [e.index for e in events] == list(range(1, summary.last_index + 1))
            assert summary.last_index % BATCH == 0, "a batch was cut short"
            batches: dict[str, list[Event]] = defaultdict(list)
            for event in events:
                batches[str(event.payload["batch"])].append(event)
            for n, (bid, members) in enumerate(batches.items()):
                assert bid == f"{summary.session_id}-b{n}"
                assert [e.payload["i"] for e in members] == list(range(BATCH))
                assert all(e.payload["count"] == BATCH for e in members)
            stored.update(batches)
            total += len(events)
        assert acked <= stored, f"acknowledged but lost: {sorted(acked - stored)}"
        # The store still takes appends where each log left off (the batch the child would write
        # next, so a later run resumes after it).
        for summary in await store.list_sessions():
            after = summary.last_index
            result = await store.append(
                summary.session_id, _batch(summary.session_id, after // BATCH), expected_index=after
            )
            assert (result.first_index, result.last_index) == (after + 1, after + BATCH)
        if isinstance(store, SqliteStore):
            assert await asyncio.to_thread(_integrity, Path(store.path)) == "ok"
        return total
    finally:
        await store.close()


async def test_killed_in_the_middle_of_a_batch(tmp_path: Path) -> None:
    # 23: the first batches are cut after 23 rows; 6 * 50 + 23: later, after earlier commits.
    for exit_at_row in (23, 6 * BATCH + 23):
        path = tmp_path / f"exit-{exit_at_row}.db"
        acked = await asyncio.to_thread(_run_until_it_exits, path, exit_at_row)
        rows = await _check(f"sqlite:///{path}", acked)
        # The transaction holding the cut batch never committed. (Committed batches may outnumber
        # acknowledged ones: the process can die after a commit, before its loop prints the acks.)
        assert rows < exit_at_row


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_sigkilled_at_random_moments_while_appending(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    url = str(request.getfixturevalue("pg_url")) if backend == "postgres" else f"sqlite:///{tmp_path / 'sigkill.db'}"
    rng = random.Random(20240611)
    acked: set[str] = set()
    for _ in range(3):  # the same store, killed again and again, each run resuming the logs
        acked |= await asyncio.to_thread(_run_and_kill, url, rng.randint(3, 40))
        await _check(url, acked)
