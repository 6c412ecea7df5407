"""Hostile input through the public surfaces: every bad value is a clear 4xx or ``UsageError``, and nothing is written.

The log's length (and the caller's session list) is read before and after every request: a
refused request must leave both as they were.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, JsonValue

from actors.local import LocalRuntime
from orchestrator.core.contract import Contract
from orchestrator.core.errors import UsageError
from orchestrator.core.events import Event
from orchestrator.run.agent import Agent
from orchestrator.surfaces.http import create_app
from orchestrator.testing import ScriptedModel

KEY = "key-hostile"
SID = "s-hostile"


class Anything(BaseModel):
    """An app event whose payload holds any JSON value (the contract passes it through)."""

    data: JsonValue = None


free_agent = Agent("free", "Answer.", ScriptedModel([[{"text": "ok"}]], per_turn=True))
"""No contract: a pushed payload goes to the log as the client sent it."""
typed_agent = Agent(
    "typed",
    "Answer.",
    ScriptedModel([[{"text": "ok"}]], per_turn=True),
    contract=Contract("anything", {"x.any": Anything}),
)
"""A contract whose model passes any JSON value through."""


@pytest.fixture(params=[free_agent, typed_agent], ids=["no-contract", "contract"])
async def served(request: pytest.FixtureRequest) -> AsyncIterator[tuple[LocalRuntime, httpx.AsyncClient]]:
    agent: Agent = request.param
    async with LocalRuntime("memory://", flush_parts=1) as rt:
        app = create_app(rt, agent, api_keys=[KEY])
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        headers = {"Authorization": f"Bearer {KEY}", "content-type": "application/json"}
        async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=headers) as http:
            assert (await http.post("/api/sessions", json={"id": SID})).status_code == 201
            yield rt, http


async def written(rt: LocalRuntime, http: httpx.AsyncClient) -> tuple[int, list[str]]:
    """What a refused request must not change: the session's log length and the caller's sessions."""
    sessions = (await http.get("/api/sessions")).json()["items"]
    return await rt.store.last_index(SID), [row["id"] for row in sessions]


BIG = 2**64
"""One past the largest integer msgpack encodes."""
SMALL = -(2**63) - 1
"""One below the smallest."""

# Every body field a client can put a number (or any JSON) in, per endpoint: (path, body, field).
UNSTORABLE_NUMBERS: list[tuple[str, dict[str, Any], str]] = [
    (
        f"/api/sessions/{SID}/events",
        {"events": [{"type": "x.any", "payload": {"data": BIG}}]},
        "events[0].payload.data",
    ),
    (
        f"/api/sessions/{SID}/events",
        {"events": [{"type": "x.any", "payload": {"data": {"deep": [1, SMALL]}}}]},
        "events[0].payload.data.deep[1]",
    ),
    (f"/api/sessions/{SID}/messages", {"text": "hi", "generate": BIG}, "generate"),
    (f"/api/sessions/{SID}/prompt", {"text": "hi", "timeout": BIG}, "timeout"),
    (f"/api/sessions/{SID}/steer", {"text": "hi", "turnId": SMALL}, "turnId"),
    (f"/api/sessions/{SID}/stop", {"turnId": BIG}, "turnId"),
    (f"/api/sessions/{SID}/retry", {"commandId": BIG}, "commandId"),
    (f"/api/sessions/{SID}/reset", {"commandId": BIG}, "commandId"),
    (f"/api/sessions/{SID}/fork", {"at": BIG}, "at"),
    (f"/api/sessions/{SID}/queue/edit", {"inputId": "u-1", "text": "x", "commandId": BIG}, "commandId"),
    (f"/api/sessions/{SID}/queue/move", {"inputId": "u-1", "beforeId": BIG}, "beforeId"),
    (f"/api/sessions/{SID}/queue/remove", {"inputId": BIG}, "inputId"),
    (f"/api/sessions/{SID}/queue/send-now", {"inputId": "u-1", "turnId": BIG}, "turnId"),
    (f"/api/sessions/{SID}/pause", {"when": BIG}, "when"),
    (f"/api/sessions/{SID}/respond", {"interactionId": "i-1", "approved": True, "reason": BIG}, "reason"),
    ("/api/sessions", {"id": BIG}, "id"),
    (
        "/api/chat",
        {"id": SID, "messages": [{"id": "u-1", "role": "user", "parts": [{"type": "text", "text": "hi"}], "n": BIG}]},
        "messages[0].n",
    ),
    (
        "/api/chat",
        {"id": SID, "messages": [{"id": "u-2", "role": "user", "parts": [], "metadata": {"n": [SMALL]}}]},
        "messages[0].metadata.n[0]",
    ),
]


@pytest.mark.parametrize(("path", "body", "field"), UNSTORABLE_NUMBERS)
async def test_an_integer_msgpack_cannot_carry_is_a_422_naming_the_field(
    served: tuple[LocalRuntime, httpx.AsyncClient], path: str, body: dict[str, Any], field: str
) -> None:
    rt, http = served
    before = await written(rt, http)
    response = await http.post(path, content=json.dumps(body))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == field
    assert "outside the 64-bit range" in error["message"] and error["message"].startswith(field)
    assert await written(rt, http) == before


async def test_a_lone_surrogate_in_a_payload_is_a_422_naming_the_field(
    served: tuple[LocalRuntime, httpx.AsyncClient],
) -> None:
    rt, http = served
    before = await written(rt, http)
    body = '{"events": [{"type": "x.any", "payload": {"data": ["ok", "\\ud800"]}}]}'
    response = await http.post(f"/api/sessions/{SID}/events", content=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == "events[0].payload.data[1]"
    assert "lone surrogate (U+D800)" in response.json()["error"]["message"]
    assert await written(rt, http) == before


@pytest.mark.parametrize("agent", [free_agent, typed_agent], ids=["no-contract", "contract"])
@pytest.mark.parametrize(
    ("payload", "words"),
    [
        ({"data": BIG}, "payload.data is the integer 18446744073709551616"),
        ({"data": [SMALL]}, "payload.data[0] is the integer"),
        ({"data": {"k": "\udc80"}}, "payload.data.k holds a lone surrogate (U+DC80)"),
    ],
)
async def test_push_refuses_what_msgpack_cannot_carry_before_writing(
    agent: Agent, payload: dict[str, Any], words: str
) -> None:
    async with LocalRuntime("memory://") as rt:
        session = rt.session("p-1", agent=agent)
        await session.push(("x.any", {"data": 1}))
        before = await rt.store.last_index("p-1")
        with pytest.raises(UsageError, match="payloads must be JSON") as caught:
            await session.push(Event("e-ok", "x.any", {"data": 2}), Event("e-bad", "x.any", payload))
        assert words in caught.value.message and "'e-bad'" in caught.value.message
        assert await rt.store.last_index("p-1") == before  # not even the good event before it


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda s: s.send("hi \ud800"), "SendInput text holds a lone surrogate (U+D800)"),
        (lambda s: s.send("hi", id="u-\udfff"), "SendInput id holds a lone surrogate (U+DFFF)"),
        (lambda s: s.steer("hi \ud800"), "SendInput text holds a lone surrogate"),
        (lambda s: s.queue.edit("u-1", "x\ud800"), "EditInput text holds a lone surrogate"),
        (lambda s: s.respond("i-1", True, reason="\ud800"), "Respond reason holds a lone surrogate"),
        (lambda s: s.send("a NUL \x00 here"), "SendInput text contains a NUL character"),
        (lambda s: s.queue.remove("u-\x00"), "RemoveInput input_id 'u-\\x00' contains a NUL character"),
    ],
)
async def test_commands_refuse_text_the_log_cannot_hold_before_writing(call: Any, words: str) -> None:
    async with LocalRuntime("memory://") as rt:
        session = rt.session("c-1", agent=free_agent)
        await session.send("hello", id="u-0", generate=False)
        before = await rt.store.last_index("c-1")
        with pytest.raises(UsageError) as caught:
            await call(session)
        assert words in caught.value.message
        assert await rt.store.last_index("c-1") == before
