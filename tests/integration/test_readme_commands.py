"""The README's commands, run as it writes them: the demo, a real-model config, and the HTTP API by curl."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from orchestrator.testing import eventually
from orchestrator.testing_openai import FakeOpenAIServer, StreamReply, completion_stream, text_stream, tool_call_deltas

from .cli_process import REPO, cli_env, interruptible, troupe, wait_listening

README = (REPO / "README.md").read_text()


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="trc-", dir="/tmp"))  # short: Ray's socket paths live under it
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_the_openai_config_runs_against_a_compatible_endpoint(workdir: Path) -> None:
    command = "OPENAI_BASE_URL=http://localhost:8000/v1 OPENAI_MODEL=Qwen/Qwen3-8B troupe run configs/openai.yaml"
    assert command in README
    replies = [
        StreamReply(
            completion_stream(
                tool_call_deltas(0, "call_1", "add_to_cart", '{"slug": "mug",', ' "qty": 2}'),
                finish_reason="tool_calls",
            )
        ),
        StreamReply(text_stream("Added two ", "mugs.")),
    ]
    with FakeOpenAIServer(replies) as server:
        env = cli_env(OPENAI_BASE_URL=server.base_url, OPENAI_MODEL="Qwen/Qwen3-8B")
        done = troupe("run", str(REPO / "configs" / "openai.yaml"), "-p", "two mugs", cwd=workdir, env=env)
        models = [r.json["model"] for r in server.requests]
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "Added two mugs." in done.stdout and "add_to_cart" in done.stdout
    assert models == ["Qwen/Qwen3-8B", "Qwen/Qwen3-8B"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _curl_lines() -> list[str]:
    block = re.search(r"```bash\n(curl .*?)```", README, re.S)
    assert block is not None, "the README lost its curl example"
    return [line.split("#")[0].strip() for line in block.group(1).replace("\\\n", " ").splitlines() if line.strip()]


@pytest.mark.slow
def test_the_http_examples_work_with_curl(workdir: Path) -> None:
    port = _free_port()
    log = (workdir / "serve.log").open("w")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator.surfaces.cli.main",
            "serve",
            str(REPO / "configs" / "shop.yaml"),
            "--port",
            str(port),
        ],
        cwd=workdir,
        env=cli_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_listening(server, port, workdir / "serve.log")
        outputs = []
        for line in _curl_lines():
            command = line.replace("localhost:8000", f"127.0.0.1:{port}")
            if "/events" in command:
                command = command.replace("curl -sN", "curl -sN --max-time 3")
            ran = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60)
            assert ran.returncode in (0, 28), (command, ran.stderr)  # 28: --max-time ended the SSE stream
            outputs.append(ran.stdout)
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()
    created, prompted, events = outputs
    assert json.loads(created)["id"] == "s-1"
    answer = json.loads(prompted)
    assert answer["success"] is True and "stoneware mug" in answer["text"], answer
    assert "event: " in events and "id: " in events and "data: " in events


@pytest.mark.slow
def test_the_serve_run_command_serves_the_api(workdir: Path) -> None:
    """The README's ``serve run`` line, in a copy of the repo's configs, on a free port and a Ray of its own."""
    block = re.search(r"```bash\n(serve run .*?)\n```", README, re.S)
    assert block is not None, "the README lost its serve run command"
    command = block.group(1).strip()
    assert "port=8000" in command
    port = _free_port()
    (workdir / "configs").mkdir()
    shutil.copy(REPO / "configs" / "shop.yaml", workdir / "configs" / "shop.yaml")
    args = shlex.split(command.replace("port=8000", f"port={port}"))
    args[0] = str(Path(sys.executable).parent / args[0])  # this venv's serve
    log = (workdir / "serve.log").open("w")
    server = subprocess.Popen(
        interruptible(args),  # it stops on SIGINT alone, so SIGINT must reach it
        cwd=workdir,
        env=cli_env(RAY_TMPDIR=str(workdir)),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_listening(server, port, workdir / "serve.log", timeout=180)

        async def deployed() -> bool:  # the proxy listens before the application is up
            assert server.poll() is None, (workdir / "serve.log").read_text()
            async with httpx.AsyncClient(timeout=10) as http:
                with contextlib.suppress(httpx.HTTPError):
                    return (await http.get(f"{url}/api/sessions")).status_code == 200
            return False

        asyncio.run(eventually(deployed, 180, interval=0.2, what="the Serve application to answer"))
        with httpx.Client(base_url=url, timeout=120) as http:
            assert http.post("/api/sessions", json={"id": "s-1"}).status_code in (200, 201)
            answer = http.post("/api/sessions/s-1/prompt", json={"text": "two mugs please", "wait": True}).json()
            assert answer["success"] is True and "stoneware mug" in answer["text"], answer
    finally:
        server.send_signal(signal.SIGINT)  # serve run shuts Serve down, then the Ray it started
        stuck = False
        try:
            server.wait(timeout=90)
        except subprocess.TimeoutExpired:
            stuck = True
            os.killpg(server.pid, signal.SIGKILL)  # our own process group only
            server.wait(timeout=30)
        log.close()
    tail = (workdir / "serve.log").read_text()[-2000:]
    assert not stuck, f"serve run did not stop on SIGINT (Ctrl-C) within 90 s; its log ends:\n{tail}"
    assert (workdir / "troupe.db").exists()  # the config's store, resolved against the command's directory


@pytest.mark.slow
def test_the_mcp_demo_runs_as_the_readme_says(workdir: Path) -> None:
    command = '.venv/bin/troupe run configs/mcp.yaml -p "What time is it in Tokyo?"'
    assert command in README
    done = troupe("run", str(REPO / "configs" / "mcp.yaml"), "-p", "What time is it in Tokyo?", cwd=workdir)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "time_get_current_time" in done.stdout and "Asia/Tokyo" in done.stdout
    assert "That is the current time in Tokyo" in done.stdout
