"""``troupe bench chaos``, small: sessions under SIGKILLed hosts and a killed supervisor keep every promise."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.bench.chaos import bench_chaos, format_chaos


@pytest.mark.slow
async def test_sessions_survive_killed_hosts_and_supervisor_with_no_lost_input_or_repeated_report(
    tmp_path: Path,
) -> None:
    figures = await bench_chaos(
        sessions=12, turns=3, faults=3, concurrency=12, hosts=2, limit=240, workdir=str(tmp_path)
    )
    report = format_chaos(figures)
    assert figures.injected == {"host": 2, "supervisor": 1}, report
    assert figures.ok, report
    assert figures.finished == 12, report
    # A report call cut before its effect ran is reported interrupted, never run again: at most one each.
    assert 0 < figures.report_calls <= 36 and figures.rerun_calls <= 36, report
