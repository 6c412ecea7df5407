"""``POST /prompt`` with ``wait``: a reused id fails at once with 409, and a wait given up never breaks the next one."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from actors.local import LocalRuntime
from orchestrator.surfaces.http import create_app
from tests.unit.http_helpers import gate, shopper

KEY = "key-prompt"


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with LocalRuntime("memory://", flush_parts=1) as rt:
        app = create_app(rt, shopper, api_keys=[KEY])
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        headers = {"Authorization": f"Bearer {KEY}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=headers) as http:
            yield http


async def session(client: httpx.AsyncClient) -> str:
    created = await client.post("/api/sessions", json={"id": uid("s")})
    assert created.status_code == 201
    sid: str = created.json()["id"]
    return sid


def reused(response: httpx.Response, input_id: str) -> None:
    """A 409 naming ``id``, with the rejected receipt beside the error."""
    assert response.status_code == 409, response.text
    body = response.json()
    assert body["error"]["field"] == "id" and "already used" in body["error"]["message"]
    assert body["receipt"] == {"commandId": input_id, "outcome": "rejected", "reason": "PARTIAL_DUPLICATE_BATCH"}


async def test_an_id_used_in_another_session_is_a_409_at_once(client: httpx.AsyncClient) -> None:
    first, second = await session(client), await session(client)
    input_id = uid("u")
    done = await client.post(f"/api/sessions/{first}/prompt", json={"text": "plain", "id": input_id, "wait": True})
    assert done.status_code == 200 and done.json()["success"] is True
    started = time.monotonic()
    again = await client.post(
        f"/api/sessions/{second}/prompt", json={"text": "plain", "id": input_id, "wait": True, "timeout": 60}
    )
    reused(again, input_id)
    assert time.monotonic() - started < 30  # at once, not after the 60 s wait
    reused(await client.post(f"/api/sessions/{second}/prompt", json={"text": "plain", "id": input_id}), input_id)
    state = (await client.get(f"/api/sessions/{second}/state")).json()
    assert state["state"]["messages"] == []  # nothing of it reached the second session


async def test_the_same_id_with_other_text_is_a_409_never_a_success(client: httpx.AsyncClient) -> None:
    sid = await session(client)
    input_id = uid("u")
    done = await client.post(f"/api/sessions/{sid}/prompt", json={"text": "plain", "id": input_id, "wait": True})
    assert done.status_code == 200 and done.json()["success"] is True
    other = await client.post(f"/api/sessions/{sid}/prompt", json={"text": "count", "id": input_id, "wait": True})
    reused(other, input_id)
    same = await client.post(f"/api/sessions/{sid}/prompt", json={"text": "plain", "id": input_id, "wait": True})
    assert same.status_code == 200 and same.json() == done.json()  # an identical retry replays the answer


async def test_a_wait_that_timed_out_does_not_break_the_retry(client: httpx.AsyncClient) -> None:
    sid = await session(client)
    input_id = uid("u")
    first_gate, second_gate = uid("g"), uid("g")
    body = {"text": f"gate {first_gate} {second_gate}", "id": input_id, "wait": True, "timeout": 0.2}
    gave_up = await client.post(f"/api/sessions/{sid}/prompt", json=body)
    assert gave_up.status_code == 202 and gave_up.json()["outcome"] is None  # the turn waits at the gate
    gate(first_gate).open()
    gate(second_gate).open()
    retried = await client.post(f"/api/sessions/{sid}/prompt", json={**body, "timeout": 60})
    assert retried.status_code == 200, retried.text
    assert retried.json()["success"] is True and retried.json()["text"] == "All done: four."


async def test_a_rejected_prompt_finishes_at_once_in_the_python_api() -> None:
    async with LocalRuntime("memory://") as rt:
        first, second = rt.session(uid("s"), agent=shopper), rt.session(uid("s"), agent=shopper)
        done = await (await first.prompt("plain", id="u-shared")).finished
        assert done.success
        turn = await second.prompt("plain", id="u-shared")
        assert turn.receipt is not None and turn.receipt.reason == "PARTIAL_DUPLICATE_BATCH"
        outcome = await turn.finished  # resolves now: no turn will ever admit it
        assert outcome.outcome == "removed" and outcome.error is not None and "PARTIAL_DUPLICATE_BATCH" in outcome.error
