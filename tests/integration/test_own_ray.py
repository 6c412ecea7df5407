"""The Ray a ``Runtime`` starts itself: only what sessions need, and nothing left behind by a killed driver.

A separate driver process starts a ``Runtime`` (so a Ray of its own, in a temp dir of its own),
runs a turn, asks a Ray task whether its worker had Troupe imported ahead, and prints its Ray
session name; every process of that Ray carries the name in its command line. Then the driver
is SIGKILLed, as a crash would, and every one of them must go.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from orchestrator.testing import eventually
from tests.integration.cli_process import DRIVER_START, REPO, cli_env

DRIVER = (
    DRIVER_START
    + """
async def main() -> None:
    rt = await started()

    @ray.remote
    def preloaded() -> bool:  # defined here, so running it imports nothing of Troupe's
        import gc

        return "actors.supervisor" in sys.modules and gc.get_freeze_count() > 0  # actors.preload

    loaded = ray.get(preloaded.remote(), timeout=60)
    print("session", ray.get_runtime_context().get_session_name(), loaded, flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""
)


def processes_of(session: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if session in " ".join(process.info["cmdline"] or []):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


@pytest.mark.slow
def test_a_killed_drivers_own_ray_goes_with_it(tmp_path: Path) -> None:
    temp = tempfile.mkdtemp(prefix="troupe-k-", dir="/tmp")  # short: Ray's socket paths live under it
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, f"sqlite:///{tmp_path / 'troupe.db'}", temp],
        cwd=REPO,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert driver.stdout is not None
    session = ""
    try:
        line = driver.stdout.readline()
        assert line.startswith("session "), f"the driver did not start: {line!r}"
        session, preloaded = line.split()[1:]
        assert preloaded == "True", "a worker of the runtime's own Ray did not have Troupe imported and frozen ahead"
        started = processes_of(session)
        commands = [" ".join(p.cmdline()) for p in started]
        assert any("raylet" in c for c in commands), commands
        # Ray 2.60 always runs its API server process; include_dashboard=False leaves it without the UI
        # and with one module (usage stats, which RAY_USAGE_STATS_ENABLED=0 keeps quiet).
        (gcs,) = [p.cmdline() for p in started if "gcs_server" in " ".join(p.cmdline())]
        (encoded,) = [a.split("=", 1)[1] for a in gcs if a.startswith("--config_list=")]
        config = json.loads(base64.b64decode(encoded))
        assert config["enable_metrics_collection"] is False and config["enable_timeline"] is False, config
        assert config["preload_python_modules"] == ["actors.preload"], config  # actors.options.PRELOAD_MODULES
        heads = [c for c in commands if "dashboard/dashboard.py" in c]
        assert all("--disable-frontend" in c and "--modules-to-load=UsageStatsHead" in c for c in heads), heads
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(30)
        driver.stdout.close()

    async def gone() -> bool:
        return not processes_of(session)

    try:
        asyncio.run(eventually(gone, 60, interval=0.5, what=f"every process of Ray session {session} to exit"))
    finally:
        for process in processes_of(session) if session else []:  # never leave them on a shared machine
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
