"""``actors.memory``: what a host reports about its memory, and trimming the allocator after deactivations."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3

import pytest

from actors.memory import TrimSchedule, malloc_trim, memory_report, sqlite_memory
from orchestrator.core.errors import UsageError


def test_the_report_counts_live_objects_by_type_and_says_what_a_trim_gave_back() -> None:
    class Marker:
        pass

    kept = [Marker() for _ in range(5000)]
    report = memory_report(top=50, trim=True)
    assert (
        report["types"]["test_the_report_counts_live_objects_by_type_and_says_what_a_trim_gave_back.<locals>.Marker"]
        == 5000
    )
    assert report["gc_objects"] >= 5000 and report["rss"] > 0 and report["trimmed"] is malloc_trim()
    assert report["rss_before_trim"] > 0 and "traced" not in report
    assert report["sqlite"] is None or report["sqlite"] >= 0
    assert len(kept) == 5000


def test_sqlite_memory_counts_the_page_cache_of_this_process() -> None:
    before = sqlite_memory()
    if before is None:  # no libsqlite3 to ask
        return
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (x BLOB)")
    conn.executemany("INSERT INTO t VALUES (?)", [(b"x" * 1000,)] * 5000)
    grown = sqlite_memory()
    assert grown is not None and grown - before > 2**20  # ~5 MB of pages
    conn.close()


async def test_deactivations_in_a_burst_cost_one_trim_and_a_later_one_another() -> None:
    clock = [100.0]
    schedule = TrimSchedule(every=5.0, clock=lambda: clock[0])
    if not malloc_trim():  # not glibc: nothing to schedule
        schedule.note()
        assert schedule._task is None
        return
    clock[0] = 106.0  # the last trim (at creation) is old enough: the first note trims at once
    for _ in range(50):
        schedule.note()
    assert schedule._task is not None
    await schedule._task
    assert schedule.trims == 1
    schedule.note()  # within 5 s of that trim: it waits for the schedule
    await asyncio.sleep(0.05)
    assert schedule.trims == 1
    waiting = schedule._task
    schedule.cancel()
    schedule.note()  # a host shutting down deactivates its sessions: no trim is scheduled any more
    assert schedule._task is waiting
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    assert waiting.cancelled() and schedule.trims == 1


def test_a_negative_schedule_never_trims() -> None:
    schedule = TrimSchedule(every=-1)
    schedule.note()
    assert schedule._task is None and schedule.trims == 0


def test_a_trim_schedule_that_is_not_a_number_is_refused_when_the_runtime_is_made() -> None:
    from actors.runtime import Runtime

    with pytest.raises(UsageError, match="trim_every must be a number of seconds"):
        Runtime(store="sqlite:////tmp/troupe-never-opened.db", trim_every="5")  # type: ignore[arg-type]
