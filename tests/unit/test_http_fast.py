"""The hot reads answered before FastAPI's routing (``orchestrator.surfaces.http.fast``).

They answer the same bytes and headers as the routes, see a write made just before, and leave
every other case to the app: no key, a wrong key, another key's session, a bad id, a query, a
body, and an app with middleware of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from actors.local import LocalRuntime
from orchestrator.core.wire import message_to_wire
from orchestrator.surfaces.http import create_app
from orchestrator.surfaces.http.aisdk import to_ui_messages
from orchestrator.surfaces.http.fast import FastReads
from orchestrator.surfaces.http.state import state_json
from tests.unit.http_helpers import shopper

KEY, OTHER = "key-one", "key-two"
TIMEOUT = 30.0


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
async def runtime() -> AsyncIterator[LocalRuntime]:
    async with LocalRuntime("memory://", flush_parts=1) as rt:
        yield rt


@pytest.fixture
async def app(runtime: LocalRuntime) -> AsyncIterator[Any]:
    app: Any = create_app(runtime, shopper, api_keys=[KEY, OTHER])
    app.state.troupe.views.catch_up = TIMEOUT  # a lagging view is waited for here, not read around
    yield app
    await app.state.troupe.views.close()


def client(app: Any, key: str | None = KEY) -> httpx.AsyncClient:
    headers = bearer(key) if key is not None else {}
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test", headers=headers)


def fast_of(app: Any) -> FastReads:
    fast: FastReads = app.fast
    return fast


READS = ("/api/sessions/{}/state", "/api/sessions/{}/messages", "/api/sessions/{}/info", "/api/chat/{}/messages")


async def test_reads_answer_from_the_view_and_see_the_write_before_them(app: Any, runtime: LocalRuntime) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    async with client(app) as http:
        assert (await http.post("/api/sessions", json={"id": sid})).status_code == 201
        for path in READS:  # the first read follows the session
            assert (await http.get(path.format(sid))).status_code == 200
        fast = fast_of(app)
        before = fast.answered
        sent = await http.post(
            f"/api/sessions/{sid}/prompt", json={"text": "plain hi", "wait": True, "timeout": TIMEOUT}
        )
        assert sent.json()["success"], sent.text
        session = runtime.session(sid, agent=shopper)
        snapshot = await session.state()
        state = await http.get(f"/api/sessions/{sid}/state")
        assert state.headers["content-type"] == "application/json"
        assert int(state.headers["content-length"]) == len(state.content)
        assert state.json() == {"state": state_json(snapshot.state), "index": snapshot.index}
        assert (await http.get(f"/api/sessions/{sid}/messages")).json() == {
            "messages": [message_to_wire(m) for m in snapshot.state.messages]
        }
        assert (await http.get(f"/api/sessions/{sid}/info")).json() == await session.info()
        assert (await http.get(f"/api/chat/{sid}/messages")).json() == to_ui_messages(snapshot.state)
        assert fast.answered == before + 4  # every one of them from the view, the write included
        assert any(m["role"] == "assistant" for m in state.json()["state"]["messages"])


async def test_everything_else_goes_on_to_the_app(app: Any) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    async with client(app) as http:
        assert (await http.post("/api/sessions", json={"id": sid})).status_code == 201
        assert (await http.get(f"/api/sessions/{sid}/state")).status_code == 200
    fast = fast_of(app)
    before = fast.answered
    async with client(app, None) as anonymous:
        response = await anonymous.get(f"/api/sessions/{sid}/state")
        assert response.status_code == 401
        assert "Authorization: Bearer" in response.json()["error"]["message"]
    async with client(app, "not-a-key") as wrong:
        assert (await wrong.get(f"/api/sessions/{sid}/info")).status_code == 401
    async with client(app, OTHER) as other:
        assert (await other.get(f"/api/sessions/{sid}/messages")).status_code == 404
    async with client(app) as http:
        assert (await http.get("/api/sessions/troupe:x/state")).status_code == 400
        assert (await http.get(f"/api/sessions/{sid}/state?through=0")).json()["index"] == 0
        assert (await http.request("GET", f"/api/sessions/{sid}/info", content=b"{}")).status_code == 200
        assert (await http.get(f"/api/sessions/{sid}/nothing")).status_code == 404
    assert fast.answered == before  # the app answered every one


async def test_middleware_of_ones_own_sees_every_read(app: Any) -> None:
    seen: list[str] = []

    class Seen:
        def __init__(self, inner: ASGIApp) -> None:
            self.inner = inner

        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http":
                seen.append(scope["path"])
            await self.inner(scope, receive, send)

    app.add_middleware(Seen)
    sid = f"s-{uuid.uuid4().hex[:8]}"
    async with client(app) as http:
        assert (await http.post("/api/sessions", json={"id": sid})).status_code == 201
        assert (await http.get(f"/api/sessions/{sid}/state")).status_code == 200
        assert (await http.get(f"/api/sessions/{sid}/state")).status_code == 200
    assert seen.count(f"/api/sessions/{sid}/state") == 2
    assert fast_of(app).answered == 0
