"""Two Ray nodes on one PostgreSQL store: sessions spread over both, a driver that leaves, a node lost
mid-turn, a `troupe serve` following a session of the lost node through NOTIFY, a second driver."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_cluster_on_postgresql_survives_a_lost_node_and_a_departed_driver(tmp_path: Path, pg_url: str) -> None:
    # Ray's Cluster writes the head's address under RAY_TMPDIR/ray: a short directory of this run's
    # own (socket paths stay under 107 bytes), never a /tmp/ray that may not exist or be another's.
    ray_tmp = Path(tempfile.mkdtemp(prefix="troupe-rt-"))
    (ray_tmp / "ray").mkdir()
    env = {
        **os.environ,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",
        "PYTHONPATH": str(ROOT),
        "RAY_TMPDIR": str(ray_tmp),
    }
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tests.integration.cluster_scenario", str(tmp_path), pg_url],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=420,
            check=False,
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    before = result["sessions_by_node_before"]
    assert len(before) == 2 and all(count > 0 for count in before.values()), before  # spread over both nodes
    # The server followed a session of the worker through the store: it listens, and saw the turn end
    # after the worker was gone and the session resumed on the head.
    assert result["listeners"] >= 1 and result["serve_saw_done"], json.dumps(result, indent=1)
    # Driver B, joining after driver A left, reached every session: each first turn had finished
    # (on the head, for the worker's sessions), and a second turn ran on each.
    assert result["nodes_after"] == [result["head"]]
    assert result["first_outcomes"] == ["completed"]
    assert result["second_succeeded"] == 16
    assert result["texts"] == ["working... done"]
    assert result["refolded_equal"] == 16  # every log, refolded, equals the live state
