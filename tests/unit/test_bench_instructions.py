"""``troupe bench instructions``: a shop session's instructions, counted under callgrind.

Counting is slow (callgrind runs the workload ~50x slower), so the real count runs once, with
the smallest sizes, and is marked slow; the rest checks what surrounds it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.core.errors import UsageError
from orchestrator.surfaces.bench import instructions
from orchestrator.surfaces.bench.instructions import (
    InstructionFigures,
    _count_from_here,
    bench_instructions,
    parse_total,
)
from orchestrator.surfaces.cli.main import app


def test_the_total_is_read_from_callgrinds_summary_or_totals_line() -> None:
    assert parse_total("events: Ir\nsummary: 4770102772\n") == 4770102772
    assert parse_total("fl=x\ntotals: 123\n") == 123
    with pytest.raises(UsageError, match="no summary line"):
        parse_total("not a callgrind file")


def test_a_session_is_the_difference_over_the_sessions_between_the_two_runs() -> None:
    figures = InstructionFigures(20, 40, 4, 4_789_000_000, 5_815_000_000)
    assert figures.per_session == pytest.approx(51_300_000)  # the close and the exit, in both, cancel
    assert figures.per_turn == pytest.approx(17_100_000)


@pytest.mark.parametrize(
    ("low", "high", "chunk", "says"), [(20, 20, 4, "0 < low < high"), (0, 5, 4, "0 < low"), (1, 2, 0, "--chunk")]
)
def test_bad_sizes_say_what_to_pass(low: int, high: int, chunk: int, says: str) -> None:
    with pytest.raises(UsageError, match=says):
        bench_instructions(low=low, high=high, chunk=chunk)


def test_without_valgrind_it_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(UsageError, match="apt-get install valgrind"):
        bench_instructions(low=1, high=2)


def test_a_run_that_ends_before_it_is_warm_fails_with_its_output(tmp_path: Path) -> None:
    # The counted process died before its warm-up was done (a bad store, an import error): the
    # error carries its exit code and its last output, and counting is never turned on.
    run = subprocess.Popen(
        [sys.executable, "-c", "import sys; print('no such store'); sys.exit(3)"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    with pytest.raises(UsageError, match=r"exit 3\); its last output:\nno such store"):
        _count_from_here(run, tmp_path / "go", "callgrind_control")
    assert not (tmp_path / "go").exists()


def test_a_callgrind_control_that_hangs_fails_with_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hangs = tmp_path / "callgrind_control"
    hangs.write_text("#!/bin/sh\nexec sleep 30\n")
    hangs.chmod(0o755)
    monkeypatch.setattr(instructions, "CONTROL_TIMEOUT", 0.2)
    run = subprocess.Popen(
        [sys.executable, "-c", f"print({instructions._WARM!r}.decode(), flush=True); import time; time.sleep(30)"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        with pytest.raises(UsageError, match=r"did not turn counting on within 0.2 s.*Run the bench again"):
            _count_from_here(run, tmp_path / "go", str(hangs))
        assert not (tmp_path / "go").exists()
    finally:
        run.kill()
        run.communicate()


@pytest.mark.slow
def test_the_command_counts_a_session(tmp_path: Path) -> None:
    if shutil.which("valgrind") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("valgrind is missing; CI must run the instruction count (.ci/run installs it)", pytrace=False)
        pytest.skip("valgrind is not installed (apt-get install valgrind)")
    out = tmp_path / "figures.json"
    result = CliRunner().invoke(
        app, ["bench", "instructions", "--low", "1", "--high", "2", "--chunk", "1000", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "M instructions" in result.output
    figures = json.loads(out.read_text())
    # One session, its three turns, a sub-agent and a live view: tens of millions of instructions
    # (~50 M in round thirty-five), never nothing and never the start-up's billions.
    assert 5e6 < figures["per_session"] < 500e6, figures
