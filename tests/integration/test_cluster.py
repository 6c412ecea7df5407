"""Two nodes: sessions spread over both; when one node is removed, its sessions resume on the other."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_sessions_spread_over_two_nodes_and_survive_losing_one(tmp_path: Path) -> None:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.cluster_scenario", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    before = result["sessions_by_node_before"]
    assert len(before) == 2 and all(count > 0 for count in before.values()), before  # spread over both nodes
    assert result["nodes_after"] == [result["head"]]  # the lost node's hosts restarted on the head
    assert result["succeeded"] == 16
    assert result["texts"] == ["working... done"]
