"""``troupe bench chaos``, small: sessions under every kind of fault keep every promise.

A bounded run per fault: hosts SIGKILLed and the supervisor killed (in this process's Ray), the
PostgreSQL server restarted (a private server), and, as a user runs them (the CLI in a process of
its own: they start a Ray cluster of their own), the driver SIGKILLed and replaced, and a node
removed. Faults are spread over the run's progress, so they land mid-run however busy the machine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from actors.bench.chaos import bench_chaos, format_chaos
from actors.bench.chaos_cluster import Journal
from actors.bench.faults import fault_plan
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
    assert figures.finished == 12, report
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


def test_the_fault_plan_puts_a_host_kill_between_the_others_then_kills_hosts_only() -> None:
    plan = fault_plan({"host", "supervisor", "driver", "node", "db"})
    assert [next(plan) for _ in range(10)] == [
        "host", "supervisor", "host", "driver", "host", "node", "host", "db", "host", "host",
    ]  # fmt: skip
    assert list(fault_plan({"node", "db"})) == ["node", "db"]  # each other kind once, then the plan ends


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
        (["--faults", "host,earthquake"], "give some of host,supervisor,driver,node,db"),
    ],
)
def test_bench_chaos_refuses_a_fault_it_cannot_inject_before_starting_anything(args: list[str], says: str) -> None:
    result = CliRunner().invoke(app, ["bench", "chaos", *args])
    assert result.exit_code == 1 and says in result.output, result.output
