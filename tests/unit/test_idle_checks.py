"""A host's idle checks: one heap and one loop timer for every session it holds."""

from __future__ import annotations

import asyncio

from actors.idle_checks import IdleChecks


class Sessions:
    """The due check of each session, as a host records it, and the checks that ran."""

    def __init__(self) -> None:
        self.due: dict[str, float] = {}
        self.checked: list[str] = []
        self.checks = IdleChecks(self.check, self.due.get)

    def check(self, session_id: str) -> None:
        self.checked.append(session_id)
        del self.due[session_id]

    def at(self, session_id: str, delay: float) -> None:
        if session_id in self.due:
            self.checks.dropped()
        when = self.due[session_id] = asyncio.get_running_loop().time() + delay
        self.checks.at(when, session_id)

    def leave(self, session_id: str) -> None:
        del self.due[session_id]
        self.checks.dropped()


async def test_checks_run_when_due_in_order_on_one_timer() -> None:
    sessions = Sessions()
    sessions.at("b", 0.06)
    sessions.at("a", 0.02)
    sessions.at("c", 0.04)
    await asyncio.sleep(0.01)
    assert sessions.checked == []
    await asyncio.sleep(0.1)
    assert sessions.checked == ["a", "c", "b"]
    assert len(sessions.checks) == 0
    sessions.checks.close()


async def test_a_check_moved_sooner_or_a_session_that_left_is_skipped() -> None:
    sessions = Sessions()
    sessions.at("a", 0.05)
    sessions.at("a", 0.01)  # sooner: the first entry no longer counts
    sessions.at("gone", 0.02)
    sessions.leave("gone")
    await asyncio.sleep(0.1)
    assert sessions.checked == ["a"]  # once, and not the one that left
    assert len(sessions.checks) == 0
    sessions.checks.close()


async def test_a_check_that_schedules_again_runs_later_not_in_the_same_pass() -> None:
    due: dict[str, float] = {}
    runs: list[float] = []

    def check(session_id: str) -> None:
        runs.append(asyncio.get_running_loop().time())
        if len(runs) < 3:
            due[session_id] = when = asyncio.get_running_loop().time() + 0.01
            checks.at(when, session_id)

    checks = IdleChecks(check, due.get)
    due["a"] = asyncio.get_running_loop().time()
    checks.at(due["a"], "a")
    await asyncio.sleep(0.1)
    assert len(runs) == 3 and runs[1] - runs[0] >= 0.009 and runs[2] - runs[1] >= 0.009
    checks.close()


async def test_entries_that_no_longer_count_are_dropped_once_they_are_most_of_the_heap() -> None:
    sessions = Sessions()
    for i in range(200):
        sessions.at(f"s{i}", 3600)
    for i in range(150):
        sessions.leave(f"s{i}")
    assert len(sessions.checks) <= 100  # not 200 entries kept for an hour
    kept = {sid for _, sid in sessions.checks._heap}
    assert kept >= {f"s{i}" for i in range(150, 200)}  # every one that counts is kept
    sessions.checks.close()
    assert len(sessions.checks) == 0
