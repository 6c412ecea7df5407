"""The supervisor's directory of live sessions (``actors.live_sessions``), without Ray."""

from __future__ import annotations

import pickle

from actors.live_sessions import Entry, LiveSessions


def _report(sessions: dict[str, str]) -> dict[str, str]:
    """What a report brings: its own copy of every string (it arrives pickled)."""
    copy: dict[str, str] = pickle.loads(pickle.dumps(sessions))
    return copy


def test_a_report_replaces_what_its_host_reported_before() -> None:
    live = LiveSessions()
    live.replace("h-1", _report({"s-1": "agent:shop", "s-1/call-1": "agent:researcher", "s-2": "agent:shop"}))
    live.replace("h-2", _report({"s-3": "agent:shop"}))
    live.replace("h-1", _report({"s-1": "agent:shop", "s-4": "agent:shop"}))
    assert sorted(live) == ["s-1", "s-3", "s-4"]
    assert live.get("s-3") == Entry("h-2", "agent:shop") and live.get("s-2") is None
    assert live.where("s-1/call-1") is None
    live.replace("h-1", _report({"s-1": "agent:shop", "s-1/call-1": "agent:researcher"}))
    assert live.where("s-1/call-1") == {"host": "h-1", "agent": "agent:researcher", "parent": "s-1"}
    assert live.where("s-1") == {"host": "h-1", "agent": "agent:shop", "parent": None}
    assert live.tree("s-1") == ["s-1", "s-1/call-1"] and live.tree("s-3") == ["s-3"]


def test_a_session_that_moved_stays_with_its_new_host_when_the_old_one_reports_it_gone() -> None:
    live = LiveSessions()
    live.replace("h-1", _report({"s-1": "agent:shop"}))
    live.replace("h-2", _report({"s-1": "agent:shop"}))  # activated on h-2 before h-1's report came
    live.replace("h-1", _report({}))
    assert live.get("s-1") == Entry("h-2", "agent:shop") and len(live) == 1


def test_entries_share_one_string_per_name_and_a_report_that_changes_nothing_keeps_them() -> None:
    # At a run's peak every host reports every session and sub-agent several times a second: an
    # entry is a tuple of two shared names, and an unchanged session keeps its entry object.
    live = LiveSessions()
    sessions = {f"s-{i}": "agent:shop" for i in range(100)}
    live.replace("h-1", _report(sessions))
    first = {sid: live.get(sid) for sid in sessions}
    live.replace("h-1", _report({**sessions, "s-100": "agent:shop"}))
    assert all(live.get(sid) is entry for sid, entry in first.items())
    entries = [live.get(sid) for sid in live]
    assert len({id(e.host) for e in entries if e}) == 1 and len({id(e.agent) for e in entries if e}) == 1
    live.replace("h-1", _report({**sessions, "s-1": "agent:other"}))  # a new agent version
    assert live.get("s-1") == Entry("h-1", "agent:other") and live.get("s-2") is first["s-2"]
