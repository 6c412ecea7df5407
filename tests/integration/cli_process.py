"""Run the ``troupe`` CLI as a user does: a separate process, with a Ray of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a CLI process: quiet telemetry, and a Ray of its own."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", **extra}
    env.pop("RAY_ADDRESS", None)  # start a Ray of its own, never join the test session's
    env.pop("TROUPE_RAY_TEMP_DIR", None)
    return env


def troupe(
    *args: str, cwd: Path, timeout: float = 240, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m orchestrator.surfaces.cli.main ARGS`` in ``cwd`` (short: Ray's socket paths live under it)."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.surfaces.cli.main", *args],
        cwd=cwd,
        env=env or cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
