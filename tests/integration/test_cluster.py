"""Two nodes: sessions spread over both; when one node is removed, its sessions resume on the other."""

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
def test_sessions_spread_over_two_nodes_and_survive_losing_one(tmp_path: Path) -> None:
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
            [sys.executable, "-m", "tests.integration.cluster_scenario", str(tmp_path)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    before = result["sessions_by_node_before"]
    assert len(before) == 2 and all(count > 0 for count in before.values()), before  # spread over both nodes
    assert result["nodes_after"] == [result["head"]]  # the lost node's hosts restarted on the head
    assert result["succeeded"] == 16
    assert result["texts"] == ["working... done"]
