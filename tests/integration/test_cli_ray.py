"""``troupe run`` end to end on a real (local) Ray, as a user runs it: a separate process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_troupe_run_on_ray() -> None:
    # A short working folder: the CLI puts Ray's files in ./.troupe/ray, under Unix socket limits.
    workdir = Path(tempfile.mkdtemp(prefix="tcr-", dir="/tmp"))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)  # start a Ray of its own, never join the test session's
    env.pop("TROUPE_RAY_TEMP_DIR", None)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "run", str(REPO / "configs" / "shop.yaml"), "-p", "two mugs"],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
        out = done.stdout
        assert "two mugs" in out and "A000A001" in out and "C000C001" in out
        assert '⚙ add_to_cart {"slug": "mug", "qty": 2} → Added.  ✓ done' in out
        assert '⚙ lookup_price {"slug": "mug"} → 4.99  ✓ done' in out  # the sub-agent ran in its own actor
        assert "turn results" in out and "completed" in out
        assert (workdir / "troupe.db").is_file() and (workdir / ".troupe" / "ray").is_dir()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
