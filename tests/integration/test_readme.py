"""The README's runnable examples run as they are, each in a process of its own, on a Ray of its own.

Each prints only its own lines on stdout: library logs go to stderr (``actors.logs``).
"""

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


def readme_examples() -> list[str]:
    """The python block after each runnable marker, in README order."""
    text = (REPO / "README.md").read_text()
    chunks = text.split(MARKER)[1:]
    assert chunks, "README.md lost its runnable examples' marker"
    blocks = []
    for chunk in chunks:
        found = re.match(r"\s*```python\n(.*?)```", chunk, re.S)
        assert found is not None, f"no python block right after a {MARKER}"
        blocks.append(found.group(1))
    return blocks


def run_example(tmp_path: Path, source: str) -> list[str]:
    """Run ``source`` as ``example.py`` on a Ray of its own; its stdout lines."""
    (tmp_path / "example.py").write_text(source)
    ray_tmp = tempfile.mkdtemp(prefix="trx", dir="/tmp")  # short: Ray's socket paths live under it
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "RAY_TMPDIR": ray_tmp}
    env.pop("RAY_ADDRESS", None)  # a Ray of its own, never the test session's
    for name in ("TROUPE_LOG_LEVEL", "TROUPE_LOG_FORMAT"):
        env.pop(name, None)  # the library's defaults, as a user's script gets them
    try:
        done = subprocess.run(
            [sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout.splitlines()


def test_the_readme_has_three_runnable_examples() -> None:
    assert len(readme_examples()) == 3


@pytest.mark.slow
def test_the_readme_example_runs_as_written(tmp_path: Path) -> None:
    lines = run_example(tmp_path, readme_examples()[0])
    assert lines == [
        "turn: True Done: two mugs, 4.99 each.",
        "user: Two mugs, please, and compare prices",
        "assistant: Adding them now.Done: two mugs, 4.99 each.",
        "  delegate_to_researcher -> ['compare mug prices', 'Mugs are 4.99 each.']",
    ]
    assert (tmp_path / "example.db").exists()


@pytest.mark.slow
def test_the_readme_handle_tour_runs_as_written(tmp_path: Path) -> None:
    lines = run_example(tmp_path, readme_examples()[1])
    assert lines == [
        "turn: Your mug is ordered.",
        "queued: ['a saucer', 'three mugs']",
        "answers: ['a saucer', 'A saucer, coming up.', 'three mugs', 'Three mugs, coming up.']",
        "stopped: applied 0",
        "retried: Back where we were.",
        "orders: ['o-1']",
    ]


@pytest.mark.slow
def test_the_readme_ray_data_example_runs_as_written(tmp_path: Path) -> None:
    lines = run_example(tmp_path, readme_examples()[2])
    assert lines == [f"t-{i} completed Your refund is on its way." for i in range(3)]
    assert (tmp_path / "pipeline.db").exists()
