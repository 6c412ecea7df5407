"""The README's runnable example runs as it is, in a process of its own, on a Ray of its own."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.integration.cli_process import REPO

MARKER = "<!-- example: runnable -->"


def readme_example() -> str:
    text = (REPO / "README.md").read_text()
    assert MARKER in text, "README.md lost its runnable example's marker"
    found = re.search(r"```python\n(.*?)```", text.split(MARKER, 1)[1], re.S)
    assert found is not None, f"no python block follows {MARKER}"
    return found.group(1)


@pytest.mark.slow
def test_the_readme_example_runs_as_written(tmp_path: Path) -> None:
    (tmp_path / "example.py").write_text(readme_example())
    ray_tmp = tempfile.mkdtemp(prefix="trx", dir="/tmp")  # short: Ray's socket paths live under it
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "RAY_TMPDIR": ray_tmp}
    env.pop("RAY_ADDRESS", None)  # a Ray of its own, never the test session's
    try:
        done = subprocess.run(
            [sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert "turn: True Done: two mugs, 4.99 each." in lines
    assert "assistant: Adding them now.Done: two mugs, 4.99 each." in lines
    assert "  delegate_to_researcher -> ['compare mug prices', 'Mugs are 4.99 each.']" in lines
    assert (tmp_path / "example.db").exists()
