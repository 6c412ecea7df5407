"""``troupe bench soak``, small: every turn verified, every session evicted, the table printed."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from actors.bench.soak import SoakFigures, SoakSample, _slopes, bench_soak, format_soak, slope_per_1000
from actors.memory import TRIM_EVERY
from actors.runtime import Runtime
from orchestrator.run.agent import Agent
from orchestrator.testing import ScriptedModel, eventually

NUMBER = r"[-+]?\d+(\.\d+)?"


@pytest.mark.slow
async def test_a_short_soak_verifies_every_turn_evicts_every_session_and_prints_the_table(tmp_path: Path) -> None:
    # 200 MB per 1,000 sessions (200 KB a session) is a gross leak; the shipped bound is 5.
    figures = await bench_soak(
        minutes=1 / 3, sessions_per_cycle=3, sample_every=1.0, max_slope=200.0, debug=True, workdir=str(tmp_path)
    )
    table = format_soak(figures)
    assert figures.ok, table
    assert figures.served == figures.cycles * 3 and figures.turns == figures.served * 3, table
    assert figures.left_active == 0 and figures.hosts_slope is not None, table
    lines = table.splitlines()
    assert lines[0].split() == ["minute", "served", "active", "host", "0", "MB", "host", "1", "MB", "driver", "MB"]
    rows = [line for line in lines[1:] if re.fullmatch(rf"\s*{NUMBER}(\s+{NUMBER}){{5}}\s*", line)]
    assert len(rows) >= 3, table
    served = [int(row.split()[1]) for row in rows]
    assert served == sorted(served) and served[-1] == figures.served, table
    assert "MB per 1,000 sessions served: hosts" in table and lines[-1] == "result: memory flat, every turn verified"
    # --debug-memory: every host and the driver say what they hold, and what grew after the warm-up.
    assert len(figures.debug) == 3 and "driver" in figures.debug, figures.debug
    assert sum("of which SQLite" in line for line in lines) == 3, table


def test_the_slope_is_mb_per_thousand_sessions_and_a_steep_one_fails() -> None:
    assert slope_per_1000([(0, 100.0), (1000, 150.0), (2000, 200.0)]) == pytest.approx(50.0)
    assert slope_per_1000([(0, 100.0), (1000, 100.0)]) is None  # too few points to tell
    figures = SoakFigures(minutes=1, sessions_per_cycle=1, max_slope=5.0, warmup_s=0.0, served=3000)
    figures.samples = [SoakSample(float(i), i * 1000, {"h": 100.0 + 50 * i}, 80.0, 0) for i in range(4)]
    _slopes(figures)
    assert figures.hosts_slope == pytest.approx(50.0) and figures.driver_slope == pytest.approx(0.0)
    assert not figures.ok and format_soak(figures).endswith("result: FAILED (see above)")


async def test_a_host_trims_the_allocator_after_deactivations_and_reports_its_memory(runtime: Runtime) -> None:
    agent = Agent("a", "x", ScriptedModel([[{"text": "hello"}]], per_turn=True))
    results = [await (await runtime.session(f"trim-{i}", agent=agent).prompt("hi")).finished for i in range(4)]
    assert all(r.success for r in results), results
    assert await runtime.deactivate_idle() == 4
    hosts = await runtime.hosts()

    async def trimmed() -> int | None:
        reports = [await asyncio.wait_for(h.memory.remote(5), 30) for h in hosts]
        count = sum(int(r["trims"]) for r in reports)
        return count or None

    # Every host that deactivated a session trims within TRIM_EVERY seconds of its last trim.
    await eventually(trimmed, TRIM_EVERY + 30, interval=0.2, what="a host trimmed after its deactivations")
    report = await asyncio.wait_for(hosts[0].memory.remote(5, None, True), 30)
    assert report["active"] == 0 and report["rss"] > 0 and len(report["types"]) == 5
    assert report["trimmed"] is True and report["rss_before_trim"] >= report["rss"] - 2**20
