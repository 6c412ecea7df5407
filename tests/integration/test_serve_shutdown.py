"""``troupe serve`` stops on the first SIGTERM or SIGINT, promptly, with SSE streams and long polls open.

The server runs as a user runs it (a separate process on 127.0.0.1, with a Ray of its own or
``--local``); clients hold several event streams and a ``/prompt`` that waits on a paused
session; one signal must end the process within a few seconds, never needing a second one.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.cli_process import REPO, cli_env, wait_listening
from tests.integration.test_readme_commands import _free_port

STREAMS = 6
"""Open event streams when the signal arrives."""
EXIT_WITHIN = 10.0
"""Seconds from the signal to the process's exit (a few, with room for a loaded machine)."""


async def hold_streams_and_signal(server: subprocess.Popen[bytes], url: str, sig: signal.Signals) -> float:
    """Open the streams and the long poll, send ``sig`` once; the seconds until the process exited."""
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(60, read=None)) as http:
        assert (await http.post("/api/sessions", json={"id": "s-1"})).status_code == 201
        assert (await http.post("/api/sessions/s-1/pause", json={"when": "after-turn"})).is_success
        opened = 0
        ready = asyncio.Event()

        async def follow() -> None:
            nonlocal opened
            async with http.stream("GET", "/api/sessions/s-1/events") as response:
                assert response.status_code == 200
                async for line in response.aiter_lines():
                    if line.startswith("event: snapshot"):
                        opened += 1
                        if opened == STREAMS:
                            ready.set()

        async def long_poll() -> None:  # the session is paused: this waits until its timeout
            await http.post("/api/sessions/s-1/prompt", json={"text": "hello", "wait": True, "timeout": 3600})

        clients = [asyncio.ensure_future(follow()) for _ in range(STREAMS)]
        clients.append(asyncio.ensure_future(long_poll()))
        try:
            await asyncio.wait_for(ready.wait(), 60)
            await asyncio.sleep(0.5)  # let the long poll reach its wait
            server.send_signal(sig)
            sent = time.monotonic()
            while server.poll() is None:
                assert time.monotonic() - sent < 60, "the server is still running a minute after the signal"
                await asyncio.sleep(0.05)
            return time.monotonic() - sent
        finally:
            for client in clients:
                client.cancel()
            await asyncio.gather(*clients, return_exceptions=True)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("runtime", "sig"),
    [("--local", signal.SIGTERM), ("ray", signal.SIGTERM), ("--local", signal.SIGINT)],
    ids=["local-SIGTERM", "ray-SIGTERM", "local-SIGINT"],
)
def test_one_signal_stops_the_server_with_streams_open(tmp_path: Path, runtime: str, sig: signal.Signals) -> None:
    port = _free_port()
    log_path = tmp_path / "serve.log"
    args = [sys.executable, "-m", "orchestrator.surfaces.cli.main", "serve", str(REPO / "configs" / "shop.yaml")]
    args += ["--port", str(port), "--store", f"sqlite:///{tmp_path / 'troupe.db'}"]
    args += ["--local"] if runtime == "--local" else []
    with log_path.open("w") as log:
        server = subprocess.Popen(args, cwd=tmp_path, env=cli_env(), stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_listening(server, port, log_path)
            took = asyncio.run(hold_streams_and_signal(server, f"http://127.0.0.1:{port}", sig))
        finally:
            if server.poll() is None:
                server.kill()
                server.wait(30)
    print(f"{runtime} {sig.name}: exited {took:.2f} s after one signal")
    assert took < EXIT_WITHIN, f"exit took {took:.1f} s after one signal:\n{log_path.read_text()}"
    assert server.returncode is not None
