"""The web pages and what the inspector reads, over HTTP (the pages themselves run in tests/browser)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from actors.local import LocalRuntime
from orchestrator.surfaces.http import create_app
from orchestrator.surfaces.http.web import CSP, WEB_DIR
from tests.unit.http_helpers import shopper
from tests.unit.test_http_api import KEY, OTHER, bearer, until


@pytest.fixture
async def runtime() -> AsyncIterator[LocalRuntime]:
    async with LocalRuntime("memory://", flush_parts=1) as rt:
        yield rt


@pytest.fixture
async def client(runtime: LocalRuntime) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(runtime, shopper, api_keys=[KEY, OTHER])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test", headers=bearer(KEY)
    ) as http:
        yield http


@pytest.mark.parametrize(
    ("path", "kind", "marker"),
    [
        ("/", "text/html", 'src="/web/chat.js"'),
        ("/inspect/s-1", "text/html", 'src="/web/inspect.js"'),
        ("/web/chat.js", "text/javascript", "openSession"),
        ("/web/style.css", "text/css", ".transcript"),
    ],
)
async def test_the_pages_are_served_with_a_strict_csp_and_no_key(
    runtime: LocalRuntime, path: str, kind: str, marker: str
) -> None:
    app = create_app(runtime, shopper, api_keys=[KEY])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
        page = await http.get(path)  # no key: the page itself asks for one
    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith(kind)
    assert page.headers["content-security-policy"] == CSP
    assert "script-src 'self'" in CSP and "unsafe-inline" not in CSP and "unsafe-eval" not in CSP
    assert page.headers["x-content-type-options"] == "nosniff"
    assert marker in page.text


def test_nothing_is_fetched_from_another_origin() -> None:
    for path in WEB_DIR.iterdir():
        text = path.read_text()
        assert "http://" not in text and "https://" not in text and "//cdn" not in text, path.name
        assert "innerHTML" not in text and "insertAdjacentHTML" not in text, f"{path.name} writes HTML"


@pytest.mark.parametrize("path", ["/web/missing.js", "/web/.hidden.js", "/web/..%2Fweb.py", "/web/web.py"])
async def test_only_the_shipped_files_are_served(client: httpx.AsyncClient, path: str) -> None:
    response = await client.get(path)
    assert response.status_code == 404


async def test_the_log_and_a_sub_agents_log_state_and_replay(client: httpx.AsyncClient, runtime: LocalRuntime) -> None:
    sid = (await client.post("/api/sessions", json={"id": f"s-{uuid.uuid4().hex[:8]}"})).json()["id"]
    await client.post(f"/api/sessions/{sid}/messages", json={"text": "research mugs", "id": "u-1"})
    await until(runtime, sid, lambda s: s.last_turn is not None)
    log = (await client.get(f"/api/sessions/{sid}/log")).json()
    events = log["events"]
    assert [e["index"] for e in events] == list(range(1, log["last"] + 1))
    assert (
        events[0]["type"] == "ai.input" and events[0]["id"] == "u-1" and events[0]["payload"]["text"] == "research mugs"
    )
    assert all(isinstance(e["at"], float) for e in events)
    page = (await client.get(f"/api/sessions/{sid}/log", params={"after": 2, "limit": 3})).json()
    assert [e["index"] for e in page["events"]] == [3, 4, 5]

    subagents = (await client.get(f"/api/sessions/{sid}/subagents")).json()["items"]
    assert len(subagents) == 1 and subagents[0]["session"] == f"{sid}/{subagents[0]['sub']}"
    sub = subagents[0]["sub"]
    nested_log = (await client.get(f"/api/sessions/{sid}/log", params={"sub": sub})).json()
    assert nested_log["session"] == f"{sid}/{sub}" and nested_log["last"] == subagents[0]["lastIndex"]
    whole = (await client.get(f"/api/sessions/{sid}/state", params={"sub": sub})).json()
    assert whole["index"] == nested_log["last"]
    assert whole["state"]["messages"][-1]["parts"][-1]["text"] == "A mug costs $5."
    first = (await client.get(f"/api/sessions/{sid}/state", params={"sub": sub, "through": 1})).json()
    assert first["index"] == 1 and first["state"]["messages"] == []  # the task, not yet admitted

    # replay through an index: the state as it was then, folded on the server
    admitted = next(e["index"] for e in events if e["type"] == "ai.turn.started")
    then = (await client.get(f"/api/sessions/{sid}/state", params={"through": admitted})).json()
    assert then["index"] == admitted and [m["role"] for m in then["state"]["messages"]] == ["user"]


async def test_the_log_is_the_owners_only(client: httpx.AsyncClient) -> None:
    sid = (await client.post("/api/sessions", json={})).json()["id"]
    other = await client.get(f"/api/sessions/{sid}/log", headers=bearer(OTHER))
    assert other.status_code == 404
    missing = await client.get(f"/api/sessions/{sid}/state", params={"sub": "call-9"})
    assert missing.status_code == 404 and "no sub-agent session" in missing.json()["error"]["message"]
    bad = await client.get(f"/api/sessions/{sid}/log", params={"sub": "a//b"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "sub"
