"""Reads from the server's live views on Ray: the same JSON as a read of the host, and read-your-writes.

The demo shop (text, a tool, a sub-agent streaming inside its delegate call, an approval) runs
on a Ray runtime; the HTTP app follows the session. Every state the view passes through is
compared with the host's fold of the log at the same index; at rest ``/state``, ``/messages``,
``/info`` and the chat messages equal what the Ray calls answer; and a read right after a write
shows the write, whether it came through the server or from the Python API.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from actors.runtime import Runtime
from orchestrator.core.wire import message_to_wire
from orchestrator.surfaces.cli.common import load_target
from orchestrator.surfaces.http import create_app
from orchestrator.surfaces.http.aisdk import to_ui_messages
from orchestrator.surfaces.http.state import state_json
from orchestrator.surfaces.http.views import Views
from orchestrator.testing import eventually
from tests.integration.cli_process import REPO

AGENT, _ = load_target(REPO / "configs" / "shop.yaml")
TIMEOUT = 60.0


@pytest.fixture
async def served(runtime: Runtime) -> AsyncIterator[tuple[httpx.AsyncClient, Views]]:
    app: Any = create_app(runtime, AGENT)
    # A view slower than its catch-up bound gives way to a host read; here it is waited for
    # (bounded), so a read that was not answered from the view is a failure, not a slow machine.
    app.state.troupe.views.catch_up = TIMEOUT
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=TIMEOUT) as http:
        yield http, app.state.troupe.views
        await app.state.troupe.views.close()


async def prompt(http: httpx.AsyncClient, sid: str, text: str) -> dict[str, Any]:
    response = await http.post(f"/api/sessions/{sid}/prompt", json={"text": text, "wait": True, "timeout": TIMEOUT})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def same_as_ray(http: httpx.AsyncClient, runtime: Runtime, sid: str) -> None:
    """Every read route answers what the Ray calls answer (the session is at rest)."""
    session = runtime.session(sid, agent=AGENT)
    snapshot = await session.state()
    assert (await http.get(f"/api/sessions/{sid}/state")).json() == {
        "state": state_json(snapshot.state),
        "index": snapshot.index,
    }
    assert (await http.get(f"/api/sessions/{sid}/messages")).json() == {
        "messages": [message_to_wire(m) for m in snapshot.state.messages]
    }
    assert (await http.get(f"/api/sessions/{sid}/info")).json() == await session.info()
    assert (await http.get(f"/api/chat/{sid}/messages")).json() == to_ui_messages(snapshot.state)


async def test_reads_from_the_view_equal_ray_reads(served: tuple[httpx.AsyncClient, Views], runtime: Runtime) -> None:
    http, views = served
    sid = f"s-{uuid.uuid4().hex[:8]}"
    assert (await http.post("/api/sessions", json={"id": sid})).status_code == 201
    await same_as_ray(http, runtime, sid)  # a first read starts following the session

    followed = views.followed[sid]
    seen: list[tuple[int, dict[str, Any]]] = []
    followed.live.listeners.append(lambda batch: seen.append((followed.index, state_json(followed.state))))

    turns = ["Hi! A gift for a coffee lover?", "Yes, compare prices first.", "What's in my cart?"]
    for text in turns:
        assert (await prompt(http, sid, text))["success"]
        await same_as_ray(http, runtime, sid)
    checkout = await http.post(f"/api/sessions/{sid}/messages", json={"text": "Check out, please."})
    assert checkout.json()["outcome"] == "applied"
    session = runtime.session(sid, agent=AGENT)
    live = await session.live()
    try:
        await live.wait_state(lambda s: any(i.status == "pending" for i in s.interactions.values()), TIMEOUT)
    finally:
        await live.close()
    await same_as_ray(http, runtime, sid)
    state = (await http.get(f"/api/sessions/{sid}/state")).json()["state"]
    pending = [i for i in state["interactions"] if i["status"] == "pending"]
    assert len(pending) == 1
    answered = await http.post(
        f"/api/sessions/{sid}/respond", json={"interactionId": pending[0]["id"], "approved": True}
    )
    assert answered.json()["outcome"] == "applied"
    turn = await session.prompt("Thanks!")
    await turn.finished
    await same_as_ray(http, runtime, sid)

    # Every state the view went through is the host's fold of the log at that index.
    assert len(seen) > 20
    for index, shown in seen:
        at = await session.state(through=index)
        assert at.index == index
        assert shown == state_json(at.state), f"the view differs from the log at index {index}"
    assert views.direct == 0


async def test_a_read_after_a_write_shows_it(served: tuple[httpx.AsyncClient, Views], runtime: Runtime) -> None:
    http, views = served
    sid = f"s-{uuid.uuid4().hex[:8]}"
    assert (await http.post("/api/sessions", json={"id": sid})).status_code == 201
    assert (await prompt(http, sid, "Hi!"))["success"]
    assert (await http.get(f"/api/sessions/{sid}/info")).status_code == 200
    assert sid in views.followed  # followed since that first read: every later read answers from the view
    for n in range(5):
        sent = await http.post(f"/api/sessions/{sid}/messages", json={"text": f"note {n}", "id": f"note-{sid}-{n}"})
        assert sent.json()["outcome"] == "applied"
        body = (await http.get(f"/api/sessions/{sid}/state")).json()
        state = body["state"]
        shown = [m["id"] for m in state["messages"]] + [q["id"] for q in state["inbox"]["items"]]
        assert f"note-{sid}-{n}" in shown
        assert (await http.get(f"/api/sessions/{sid}/info")).json()["index"] >= body["index"]  # never back
    # A write from elsewhere (the Python API) shows once its mutations arrive (within a poll).
    session = runtime.session(sid, agent=AGENT)
    receipt = await session.send("from python", id=f"py-{sid}")
    assert receipt.outcome == "applied"

    async def arrived() -> bool | None:
        state = (await http.get(f"/api/sessions/{sid}/state")).json()["state"]
        ids = [m["id"] for m in state["messages"]] + [q["id"] for q in state["inbox"]["items"]]
        return True if f"py-{sid}" in ids else None

    await eventually(arrived, TIMEOUT, interval=0.05, what="the Python API's input in GET /state")
    assert views.direct == 0
