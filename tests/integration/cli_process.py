"""Run the ``troupe`` CLI as a user does: a separate process, with a Ray of its own."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

from orchestrator.testing import eventually

REPO = Path(__file__).resolve().parents[2]


DRIVER_START = """
import asyncio, os, signal, sys
import ray
from orchestrator import Agent, Runtime, ScriptedModel
from orchestrator.testing import eventually

agent = Agent("echo", "Answer.", ScriptedModel([[{"text": "ok"}]], per_turn=True))

async def started() -> Runtime:
    rt = Runtime(store=sys.argv[1], ray_options={"_temp_dir": sys.argv[2], "num_cpus": 2})
    await rt.start()
    turn = await rt.session("s-1", agent=agent).prompt("hello")
    assert (await asyncio.wait_for(turn.finished, 60)).success
    return rt
"""
"""The head of a driver script for ``python -c SCRIPT STORE_URL RAY_TEMP_DIR``: ``started()`` is a
``Runtime`` on a Ray of its own that has run one turn (a test appends its ``main``)."""


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


SIGINT_DEFAULT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"
)
"""``python -c`` source that runs ``argv[1:]`` with SIGINT at its default disposition (see ``interruptible``)."""


def interruptible(args: list[str]) -> list[str]:
    """``args`` as a command that a SIGINT interrupts even when the tests run as a background job.

    A shell starts a background job with SIGINT ignored, and an ignored signal stays ignored across
    ``exec``: Python then installs no ``KeyboardInterrupt`` handler, and a process that stops on
    Ctrl-C (``serve run``) never sees the test's SIGINT. ``.ci/run`` started in the background did
    that: the test waited out its 90 s and killed the server's process group instead.
    """
    return [sys.executable, "-c", SIGINT_DEFAULT, *args]


def wait_listening(server: subprocess.Popen[bytes], port: int, log: Path, timeout: float = 120) -> None:
    """Wait until ``server`` accepts connections on ``port``; fail at once (with its log) if it exits."""

    def listening() -> bool:
        assert server.poll() is None, log.read_text()
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0

    asyncio.run(eventually(listening, timeout, interval=0.1, what=f"a server listening on port {port}"))
