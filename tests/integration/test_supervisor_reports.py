"""A host's reports to the supervisor are never retried: nothing of them reaches the user's terminal.

Ray prints a retried actor call on the driver's stdout (``(raylet) Task Supervisor.report
failed. There are infinite retries remaining...``). A report on its way when the supervisor is
stopped (``Runtime.close`` kills it last) printed that line under a user's own output: the
README's Ray Data example failed on it in CI. A driver of its own, in a child process, holds a
report in flight for certain: it stops the supervisor's process (SIGSTOP), has the host report a
change, then kills the supervisor, and prints ``done``; its stdout must hold nothing else.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.integration.cli_process import DRIVER_START, REPO, cli_env

DRIVER = (
    DRIVER_START
    + """
async def main() -> None:
    rt = await started()
    hosts = await rt.hosts()

    async def reports() -> int:
        return sum([(await asyncio.wait_for(h.stats.remote(), 60))["reports"] for h in hosts])

    async def listed() -> object:  # the session's activation reported: no report of it still to come
        return await asyncio.wait_for(rt.supervisor.where.remote("s-1"), 60)

    await eventually(listed, 60, what="the supervisor's entry for s-1")
    before = await reports()

    async def reported() -> bool:
        return await reports() > before

    pid = (await asyncio.wait_for(rt.supervisor.info.remote(), 60))["pid"]
    os.kill(pid, signal.SIGSTOP)  # it takes calls and answers none
    try:
        for host in hosts:
            await asyncio.wait_for(host.deactivate_idle.remote(), 60)  # a change the host reports
        # Counted as the report is sent (in the same step of the host's loop): it is on its way.
        await eventually(reported, 60, what="the host's report of the change")
        ray.kill(rt.supervisor, no_restart=True)
    finally:
        os.kill(pid, signal.SIGCONT)
    await asyncio.sleep(3.0)  # Ray's notice of a retry reaches the driver well within this
    print("done", flush=True)
    await rt.close()

asyncio.run(main())
"""
)


@pytest.mark.slow
def test_a_report_on_its_way_to_a_stopped_supervisor_prints_nothing(tmp_path: Path) -> None:
    temp = tempfile.mkdtemp(prefix="troupe-r-", dir="/tmp")  # short: Ray's socket paths live under it
    try:
        done = subprocess.run(
            [sys.executable, "-c", DRIVER, f"sqlite:///{tmp_path / 'troupe.db'}", temp],
            cwd=REPO,
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.splitlines() == ["done"], done.stdout
