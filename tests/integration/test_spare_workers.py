"""Spare Ray workers (``actors.spare_workers``): a restarted host takes one instead of booting its own."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest
import ray

from actors.runtime import Runtime
from actors.spare_workers import prestart

TIMEOUT = 60.0


async def _spares(rt: Runtime, asked: int) -> dict[str, int]:
    """The supervisor's spare-worker counts, once it has asked for at least ``asked``."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        spares: dict[str, int] = (await asyncio.wait_for(rt.supervisor.info.remote(), TIMEOUT))["spares"]
        if spares["asked"] >= asked or time.monotonic() > deadline:
            return spares
        await asyncio.sleep(0.05)


def _idle_workers() -> set[int]:
    """The pids of Ray's idle workers on this machine (a worker that has booted and waits for work)."""
    found = set()
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if cmdline and cmdline[0].startswith("ray::IDLE"):
            found.add(process.pid)
    return found


async def _a_new_idle_worker(before: set[int]) -> None:
    """Wait until an idle worker that was not there ``before`` has booted (a spare boots for ~0.5 s or more)."""
    deadline = time.monotonic() + TIMEOUT
    while not _idle_workers() - before:
        assert time.monotonic() < deadline, "no spare worker booted"
        await asyncio.sleep(0.05)


async def _restarted(host: Any, pid: int) -> dict[str, Any]:
    """``ready()`` of the host once it answers from another process than ``pid``."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            info: dict[str, Any] = await asyncio.wait_for(host.ready.remote(), TIMEOUT)
            if info["pid"] != pid:
                return info
        except ray.exceptions.RayActorError:
            pass  # not back yet
        assert time.monotonic() < deadline, "the host did not come back"
        await asyncio.sleep(0.05)


async def test_a_restarted_host_runs_in_a_worker_started_ahead(tmp_path: Path) -> None:
    rt = Runtime(store=f"sqlite:///{tmp_path / 'troupe.db'}", namespace=f"t-{uuid.uuid4().hex[:8]}", hosts_per_node=2)
    idle = _idle_workers()  # those left by earlier tests: the hosts and the supervisor may take them
    await rt.start()
    try:
        spares = await _spares(rt, asked=1)
        assert spares == {"per_node": 1, "asked": 1, "refused": 0}
        await _a_new_idle_worker(idle)  # a restart right after the ask, while the spare boots, boots its own
        host = rt.router.host(rt.host_names[0])
        before = await asyncio.wait_for(host.ready.remote(), TIMEOUT)
        killed = time.time()
        ray.kill(host, no_restart=False)
        after = await _restarted(host, before["pid"])
        # Without a spare, Ray boots a new worker process after the kill (~0.5 s on 2 vCPUs).
        assert after["boot"]["process"] < killed < after["boot"]["init"], after["boot"]
        assert (await _spares(rt, asked=2))["asked"] == 2  # the restart took the spare: the next is asked for
    finally:
        await rt.close()


async def test_no_spares_when_asked_for_none(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'troupe.db'}"
    rt = Runtime(store=url, namespace=f"t-{uuid.uuid4().hex[:8]}", hosts_per_node=1, spare_workers=0)
    await rt.start()
    try:
        assert (await asyncio.wait_for(rt.supervisor.info.remote(), TIMEOUT))["spares"] == {
            "per_node": 0,
            "asked": 0,
            "refused": 0,
        }
    finally:
        await rt.close()


def test_a_node_that_is_not_there_gets_no_spare_and_no_error() -> None:
    assert prestart("ff" * 28, 1) is False  # logged, not raised: a restart then boots its own worker
    assert prestart("ff" * 28, 0) is True  # nothing to ask for


_WITH_TOKEN = textwrap.dedent(
    """
    import sys
    import ray
    from actors.spare_workers import prestart

    ray.init(_temp_dir=sys.argv[1], num_cpus=1, include_dashboard=False)
    try:
        print("agreed" if prestart(ray.get_runtime_context().get_node_id(), 1) else "refused")
    finally:
        ray.shutdown()
    """
)


@pytest.mark.slow
def test_a_node_behind_token_authentication_starts_spares() -> None:
    # Ray 2.60 turns token authentication on for a local cluster unless RAY_AUTH_MODE says
    # otherwise; the raylet then refuses a call without the token (UNAUTHENTICATED), and every
    # restart booted its own worker. A Ray of its own in a child process: the suite's has it off.
    env = {**os.environ, "RAY_AUTH_MODE": "token"}
    temp = tempfile.mkdtemp(prefix="troupe-auth-", dir="/tmp")  # short: Ray's socket paths end up under it
    try:
        done = subprocess.run(
            [sys.executable, "-c", _WITH_TOKEN, temp], env=env, capture_output=True, text=True, timeout=TIMEOUT * 2
        )
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1:] == ["agreed"], done.stdout[-2000:] + done.stderr[-2000:]
