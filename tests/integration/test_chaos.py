"""``troupe bench chaos``, small: sessions under every kind of fault keep every promise.

A bounded run per fault: hosts SIGKILLed, the supervisor killed and a host frozen (in this
process's Ray), the PostgreSQL server restarted (a private server), and, as a user runs them (the
CLI in a process of its own: they start a Ray cluster of their own), the driver SIGKILLed and
replaced, and a node removed. Faults are spread over the run's progress, so they land mid-run
however busy the machine. Every run also checks each session's live view against its log; that
check is shown to catch a view that differs (a missing part, a repeated delta, a lost message).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from actors.bench.chaos import bench_chaos, format_chaos
from actors.bench.chaos_cluster import Journal
from actors.bench.chaos_views import SessionViews, describe_difference
from actors.bench.chaos_work import chaos_agent, drive_session
from actors.bench.faults import fault_plan
from actors.runtime import Runtime
from orchestrator.core._pvec import PVec
from orchestrator.core.mutations import ClientView
from orchestrator.core.parts import AgentMessage, NestedRun, TextPart, ToolPart
from orchestrator.core.state import SessionState
from orchestrator.surfaces.cli.main import app
from tests.pg import PgServer

from .cli_process import troupe


@pytest.mark.slow
async def test_sessions_survive_killed_hosts_and_supervisor_with_no_lost_input_or_repeated_report(
    tmp_path: Path,
) -> None:
    figures = await bench_chaos(
        sessions=12, turns=3, faults=3, concurrency=12, hosts=2, limit=240, workdir=str(tmp_path)
    )
    report = format_chaos(figures)
    # The last host kill comes due at 3/4 of the turns; when the supervisor's heal outlasts the rest of
    # the run on a busy machine, the run ends first. Every kind asked for was injected (figures.ok).
    assert figures.injected["supervisor"] == 1 and 1 <= figures.injected["host"] <= 2, report
    assert figures.ok, report
    assert figures.finished == 12 and figures.views_checked == 12 and not figures.view_mismatches, report
    # A report call cut before its effect ran is reported interrupted, never run again: at most one each.
    assert 0 < figures.report_calls <= 36 and figures.rerun_calls <= 36, report


@pytest.mark.slow
async def test_sessions_survive_a_postgresql_restart_with_no_lost_input(tmp_path: Path) -> None:
    server = PgServer.private()  # its own: restarting the tests' shared server would cut the others
    try:
        figures = await bench_chaos(
            sessions=12,
            turns=3,
            faults=3,
            kinds=("host", "db"),
            store=server.create_database(),
            store_label="postgres",
            restart_db=server.restart,
            concurrency=12,
            hosts=2,
            limit=240,
            workdir=str(tmp_path),
        )
    finally:
        server.stop()
    report = format_chaos(figures)
    assert figures.injected["db"] == 1 and 1 <= figures.injected["host"] <= 2, report  # as above
    assert figures.ok and figures.finished == 12 and not figures.lost_inputs, report
    assert figures.views_checked == 12 and not figures.view_mismatches, report
    assert "heal: PostgreSQL restart" in report, report


def _cli_chaos(tmp_path: Path, faults: str, spread: int) -> dict[str, Any]:
    out = tmp_path / "figures.json"
    done = troupe(
        "bench", "chaos", "--sessions", "8", "--turns", "3", "--concurrency", "8", "--hosts", "1",
        "--faults", faults, "--spread", str(spread), "--limit", "300", "--json", str(out),
        cwd=tmp_path, timeout=480,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures: dict[str, Any] = json.loads(out.read_text())
    # The live views, held by the run's owner (no fault kills it), each ended where its log ends.
    assert figures["views_checked"] == 8 and figures["view_mismatches"] == [], figures
    return figures


@pytest.mark.slow
def test_a_killed_driver_is_replaced_by_a_new_one_that_finishes_every_session(tmp_path: Path) -> None:
    figures = _cli_chaos(tmp_path, "host,driver", 3)  # host, driver, host
    assert figures["injected"]["driver"] == 1 and 1 <= figures["injected"]["host"] <= 2, figures  # as above
    assert figures["ok"] and figures["finished"] == 8 and figures["lost_inputs"] == 0, figures
    assert set(figures["heal"]) == {"host", "driver"}, figures


@pytest.mark.slow
def test_sessions_on_a_removed_node_heal_on_the_remaining_one(tmp_path: Path) -> None:
    figures = _cli_chaos(tmp_path, "node", 1)
    assert figures["injected"] == {"node": 1}, figures
    assert figures["ok"] and figures["finished"] == 8 and figures["lost_inputs"] == 0, figures


@pytest.mark.slow
async def test_a_stalled_host_resumes_its_sessions_and_every_live_view_ends_where_its_log_ends(
    tmp_path: Path,
) -> None:
    figures = await bench_chaos(
        sessions=10,
        turns=3,
        faults=2,  # a host kill at 1/3 of the turns, the stall at 2/3
        kinds=("host", "stall"),
        stall_seconds=3.0,
        concurrency=10,
        hosts=2,
        limit=240,
        workdir=str(tmp_path),
    )
    report = format_chaos(figures)
    assert figures.injected == {"host": 1, "stall": 1} and len(figures.heal["stall"]) == 1, report
    assert figures.ok and figures.finished == 10 and not figures.lost_inputs, report
    # A frozen host is not dead: the same process answered (else it is unhealed), and nothing ran twice.
    assert not figures.unhealed and not figures.unexplained_reruns and not figures.duplicate_reports, report
    assert figures.views_checked == 10 and figures.view_mismatches == [], report
    assert "heal: host SIGSTOP + SIGCONT" in report and "0 (of 10 checked;" in report, report


@pytest.mark.slow
async def test_a_stall_longer_than_the_hosts_interest_leaves_every_live_view_where_its_log_ends(
    tmp_path: Path,
) -> None:
    # The frozen host's clock runs on: at the SIGCONT its pollers were last seen longer ago than
    # interest_seconds. A poll still waiting there keeps its interest (the host keeps the
    # mutations for it); one that arrives after the sweep forgot its poller registers again, and
    # its view re-reads the snapshot if the session appended meanwhile. Which of the two a view
    # meets depends on where its poll was when the host froze: either way it must miss nothing.
    figures = await bench_chaos(
        sessions=10,
        turns=3,
        faults=1,
        kinds=("stall",),
        stall_seconds=3.0,
        interest_seconds=1.0,
        concurrency=10,
        hosts=2,
        limit=240,
        workdir=str(tmp_path),
    )
    report = format_chaos(figures)
    assert figures.injected == {"stall": 1} and figures.ok and figures.finished == 10, report
    assert not figures.unhealed and not figures.unexplained_reruns and not figures.duplicate_reports, report
    assert figures.views_checked == 10 and figures.view_mismatches == [], report


def _conversation() -> SessionState:
    audit = NestedRun(PVec([AgentMessage("a-1", "assistant", (TextPart("a-1:0", "The books balance."),))]), "idle")
    reply = AgentMessage(
        "m-2",
        "assistant",
        (
            TextPart("m-2:0", "Charging your card now. "),
            ToolPart("call-1", "charge", {"item": "order"}, "done", output="charge order: ok"),
            ToolPart("call-2", "delegate_to_auditor", {"task": "audit"}, "done", output="ok", agent=audit),
        ),
        revision=4,
    )
    return SessionState.of([AgentMessage("m-1", "user", (TextPart("m-1:0", "Turn 0: charge me."),)), reply])


def _altered(state: SessionState, message: int, parts: tuple[Any, ...]) -> SessionState:
    messages = list(state.messages)
    messages[message] = replace(messages[message], parts=parts)
    return SessionState.of(messages, state.status)


def test_the_view_check_names_a_missing_part_a_repeated_delta_a_lost_message_and_a_stale_tool() -> None:
    stored = _conversation()
    text, charge, delegate = stored.messages[1].parts
    assert describe_difference(_conversation(), stored) is None
    missing = describe_difference(_altered(stored, 1, (text, delegate)), stored)
    assert missing is not None and "a tool part call-2 where the log has a tool part call-1" in missing, missing
    repeated = _altered(stored, 1, (TextPart("m-2:0", "Charging your card now. card now. "), charge, delegate))
    found = describe_difference(repeated, stored)
    assert found is not None and found.startswith("session message 1 (m-2) part m-2:0: text"), found
    running = _altered(stored, 1, (text, ToolPart("call-1", "charge", {"item": "order"}, "running"), delegate))
    found = describe_difference(running, stored)
    assert found is not None and "tool state 'running' where the log has 'done'" in found, found
    assert "1 messages where the log has 2 (extra: none; missing: m-2)" in str(
        describe_difference(SessionState.of(stored.messages[:1]), stored)
    )
    assert isinstance(delegate, ToolPart) and delegate.agent is not None
    nested = NestedRun(PVec([AgentMessage("a-1", "assistant", (TextPart("a-1:0", "The books"),))]), "idle")
    found = describe_difference(_altered(stored, 1, (text, charge, delegate.with_agent(nested))), stored)
    assert found is not None and "(nested run) message 0 (a-1) part a-1:0: text 'The books'" in found, found
    assert describe_difference(replace(stored, status="streaming"), stored) == (
        "session: status 'streaming' where the log has 'idle'"
    )


async def test_the_view_check_reports_a_live_view_that_differs_from_its_log(runtime: Runtime, tmp_path: Path) -> None:
    agent = chaos_agent(str(tmp_path), pause=0)
    views = SessionViews(runtime, agent, wait=30)
    for session_id in ("kept", "tampered"):
        await views.open(session_id)
        assert await drive_session(runtime, agent, session_id, 1, accepted=lambda *_: None, done=lambda *_: None)
    tampered = views.views["tampered"]
    await tampered.wait_for(lambda _: tampered.index >= 1 and not tampered.confirmed.active, timeout=30)
    state = tampered.view.state
    dropped = replace(state.messages[-1], parts=state.messages[-1].parts[:-1])  # the closing text never came
    tampered.view = ClientView.of(SessionState.of([*state.messages[:-1], dropped], state.status), tampered.view.index)
    assert await views.check(["kept", "tampered"]) == 2
    assert [m.session_id for m in views.mismatches] == ["tampered"], views.mismatches
    assert "parts [" in views.mismatches[0].difference, views.mismatches[0]


def test_the_fault_plan_puts_a_host_kill_between_the_others_then_kills_hosts_only() -> None:
    plan = fault_plan({"host", "supervisor", "driver", "node", "db", "stall"})
    assert [next(plan) for _ in range(12)] == [
        "host", "supervisor", "host", "driver", "host", "node", "host", "db", "host", "stall", "host", "host",
    ]  # fmt: skip
    assert list(fault_plan({"node", "db"})) == ["node", "db"]  # each other kind once, then the plan ends
    assert list(fault_plan({"stall"})) == ["stall"]


def test_the_journal_reads_whole_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "driver.journal"
    Journal.append(path, "accepted s-1 s-1-in-0 7\ndone s-1 0 1 7\ndone s-1 1 0 7\ndone s-1 2")
    journal = Journal(path)
    assert journal.poll() == 2  # the torn last line waits for its end
    assert journal.accepted["s-1"] == ["s-1-in-0"] and journal.done["s-1"] == {0: True, 1: False}
    Journal.append(path, " 1 8\n")
    assert journal.poll() == 1 and journal.done["s-1"][2] and journal.done_by == {7: 2, 8: 1}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--faults", "db"], "add --store postgres"),
        (["--faults", "host,earthquake"], "give some of host,supervisor,driver,node,db,stall"),
    ],
)
def test_bench_chaos_refuses_a_fault_it_cannot_inject_before_starting_anything(args: list[str], says: str) -> None:
    result = CliRunner().invoke(app, ["bench", "chaos", *args])
    assert result.exit_code == 1 and says in result.output, result.output
