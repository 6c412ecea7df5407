"""A script using ``Runtime`` on Ray prints only its own lines on stdout: library logs go to stderr."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.integration.cli_process import REPO

SCRIPT = """
import asyncio

from orchestrator import Runtime


async def main() -> None:
    async with Runtime(store="sqlite:///quiet.db"):
        print("only this line")


asyncio.run(main())
"""


@pytest.mark.slow
def test_a_script_on_ray_prints_only_its_own_line(tmp_path: Path) -> None:
    (tmp_path / "quiet.py").write_text(SCRIPT)
    ray_tmp = tempfile.mkdtemp(prefix="trq", dir="/tmp")  # short: Ray's socket paths live under it
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "RAY_TMPDIR": ray_tmp}
    env["PYTHONPATH"] = str(REPO)
    env.pop("RAY_ADDRESS", None)  # a Ray of its own
    for name in ("TROUPE_LOG_LEVEL", "TROUPE_LOG_FORMAT"):
        env.pop(name, None)
    try:
        done = subprocess.run(
            [sys.executable, "quiet.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout == "only this line\n"
    assert "runtime_started" not in done.stderr  # an info line: below the default WARNING
