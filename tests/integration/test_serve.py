"""The Ray Serve door: Troupe's HTTP API as a Serve application, two replicas sharing one session.

``serve.run`` on the test session's Ray, the demo config, two replicas; the AI SDK's own client
(node's ``ai``, as in ``tests/unit/test_aisdk.py``) reads ``/api/chat``; every replica answers
for the same session. Serve is shut down at the end (``serve.shutdown``).
"""

from __future__ import annotations

import asyncio
import json
import socket
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ray import serve

from actors.runtime import Runtime
from actors.serve import REPLICA_HEADER
from orchestrator.core.errors import UsageError
from orchestrator.surfaces.serve import app, replica_parts, troupe_app
from tests.integration.cli_process import REPO
from tests.unit.http_helpers import ensure_node_modules, run_node, strip_ui, user_message

CONFIG = REPO / "configs" / "shop.yaml"
SAMPLES = 64
"""Requests sent to find both replicas (Serve routes each at random: 2**-63 to miss one)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
async def served(store_url: str) -> AsyncIterator[tuple[str, Runtime]]:
    """Two replicas of the demo's HTTP API on the namespace of a driver runtime (which owns the hosts)."""
    ensure_node_modules()
    owner = Runtime(store=store_url, namespace=f"t-{uuid.uuid4().hex[:8]}", hosts_per_node=2)
    await owner.start()
    port = free_port()
    try:
        await asyncio.to_thread(serve.start, http_options={"host": "127.0.0.1", "port": port})
        application = troupe_app(CONFIG, store=store_url, namespace=owner.namespace, hosts_per_node=2, num_replicas=2)
        await asyncio.to_thread(serve.run, application, name="troupe-test", route_prefix="/")
        yield f"http://127.0.0.1:{port}", owner
    finally:
        await asyncio.to_thread(serve.shutdown)
        await owner.close()


async def by_replica(http: httpx.AsyncClient, path: str) -> dict[str, Any]:
    """``GET path`` until two replicas have answered: each one's JSON."""
    answers: dict[str, Any] = {}
    for _ in range(SAMPLES):
        response = await http.get(path)
        response.raise_for_status()
        answers[response.headers[REPLICA_HEADER]] = response.json()
        if len(answers) == 2:
            break
    assert len(answers) == 2, f"only {list(answers)} answered {path}"
    return answers


@pytest.mark.slow
async def test_two_replicas_serve_one_session(served: tuple[str, Runtime], tmp_path: Path) -> None:
    url, owner = served
    sid = f"s-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        created = await http.post("/api/sessions", json={"id": sid})
        assert created.status_code in (200, 201), created.text

        # Turn 1 through the AI SDK's own client.
        body = json.dumps(
            {"id": sid, "messages": [user_message("u-1", "two mugs please")], "trigger": "submit-message"}
        )
        chat = await run_node("--url", f"{url}/api/chat", "--body", body, timeout=60)
        assert chat["errors"] == [] and chat["chunks"][-1]["type"] == "finish"
        assert chat["headers"]["x-vercel-ai-ui-message-stream"] == "v1"
        assembled = strip_ui(chat["message"])
        for replica, messages in (await by_replica(http, f"/api/chat/{sid}/messages")).items():
            assert [strip_ui(m) for m in messages][-1] == assembled, replica

        # Turn 2 through the session API, then the same state from both replicas and the driver.
        prompt = await http.post(f"/api/sessions/{sid}/prompt", json={"text": "and compare prices", "wait": True})
        assert prompt.json()["success"] is True, prompt.text
        states = await by_replica(http, f"/api/sessions/{sid}/state")
        first, second = states.values()
        assert first == second
        snapshot = await owner.session(sid, agent=troupe_app_agent()).state()
        assert [m.text for m in snapshot.state.messages][::2] == ["two mugs please", "and compare prices"]
        assert snapshot.state.turns == 2


def troupe_app_agent() -> Any:
    from orchestrator.surfaces.config import load_config

    return load_config(CONFIG).agent()


def test_the_serve_run_builder_names_its_arguments() -> None:
    with pytest.raises(UsageError, match="needs config=PATH"):
        app({})
    with pytest.raises(UsageError, match="unknown argument"):
        app({"config": str(CONFIG), "replicas": "2"})


def test_every_replica_gets_the_whole_runtime_section_and_the_keys_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "app.yaml"
    config.write_text(
        CONFIG.read_text()
        + "\nruntime: {store: 'sqlite:///rel.db', placement: dedicated, max_dedicated: 7, dedicated_wait: 9,"
        + " api_keys: [from-config]}\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TROUPE_API_KEYS", "from-env, from-config")
    build, options = replica_parts(config, api_keys=["from-arg"])
    assert build.api_keys == ("from-config", "from-env", "from-arg")
    assert options["store"] == f"sqlite:///{tmp_path / 'rel.db'}"  # every replica opens the same file
    assert (options["placement"], options["max_dedicated"], options["dedicated_wait"]) == ("dedicated", 7, 9)
