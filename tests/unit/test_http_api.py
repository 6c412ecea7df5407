"""The HTTP session API over a LocalRuntime: every route, auth, limits, errors, OpenAPI, SSE resume.

Most tests use httpx's ASGITransport; the SSE stream tests (which disconnect and reconnect) run a
real uvicorn server in this event loop.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from actors.local import LocalRuntime
from orchestrator.core.aistate import AIState
from orchestrator.core.mutations import ClientView, diff
from orchestrator.core.wire import parse_state, state_to_wire
from orchestrator.surfaces.http import create_app
from orchestrator.testing import eventually
from tests.fixtures.agents import Counter, approving_tree
from tests.unit.http_helpers import LiveServer, SseEvent, chunks_of, gate, shopper, sse_events, user_message

KEY, OTHER = "key-one", "key-two"
TIMEOUT = 30
"""Seconds a test waits for a state before it fails: a bound, never a pause (generous for a loaded machine)."""


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def uid(prefix: str = "u") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def runtime() -> AsyncIterator[LocalRuntime]:
    async with LocalRuntime("memory://", flush_parts=1) as rt:
        yield rt


@pytest.fixture
async def client(runtime: LocalRuntime) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(runtime, shopper, api_keys=[KEY, OTHER], max_body_bytes=20_000)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=bearer(KEY)) as http:
        yield http


async def new_session(client: httpx.AsyncClient) -> str:
    response = await client.post("/api/sessions", json={"id": uid("s")})
    assert response.status_code == 201, response.text
    session_id: str = response.json()["id"]
    return session_id


async def until(
    rt: LocalRuntime, session_id: str, predicate: Callable[[AIState], bool], timeout: float = TIMEOUT
) -> AIState:
    """Wait until the session's state satisfies ``predicate`` (follow it live, check after every change).

    Checked every half second too: not every change of the full state (the inbox) reaches a
    client as a mutation.
    """
    session = rt.session(session_id, agent=shopper)
    live = await session.live()
    try:

        async def holds() -> AIState | None:
            state = (await session.state()).state
            return state if predicate(state) else None

        return await eventually(holds, timeout, interval=0.5, wake=live.changed, what="the session's state")
    finally:
        await live.close()


def error_of(response: httpx.Response) -> dict[str, Any]:
    """The JSON error of a 4xx response (checking its shape)."""
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    body = response.json()
    extra = {"receipt"} if response.status_code == 409 else set()  # a refused command's receipt
    assert set(body) - extra == {"error"} and set(body["error"]) == {"message", "field"}, body
    error: dict[str, Any] = body["error"]
    return error


# -- sessions ------------------------------------------------------------------------------------------


async def test_create_and_list_sessions(client: httpx.AsyncClient) -> None:
    ids = sorted(uid("s") for _ in range(3))
    for session_id in ids:
        assert (await client.post("/api/sessions", json={"id": session_id})).status_code == 201
    again = await client.post("/api/sessions", json={"id": ids[0]})
    assert again.status_code == 200 and again.json() == {"id": ids[0]}  # idempotent for its owner
    taken = await client.post("/api/sessions", json={"id": ids[0]}, headers=bearer(OTHER))
    assert taken.status_code == 409 and error_of(taken)["field"] == "id"
    fresh = await client.post("/api/sessions")
    assert fresh.status_code == 201 and fresh.json()["id"].startswith("s-")

    first = (await client.get("/api/sessions", params={"limit": 2})).json()
    assert [row["id"] for row in first["items"]] == sorted([*ids, fresh.json()["id"]])[:2]
    rest = (await client.get("/api/sessions", params={"after": first["next"], "limit": 10})).json()
    assert rest["next"] is None
    assert [row["id"] for row in first["items"] + rest["items"]] == sorted([*ids, fresh.json()["id"]])
    assert all(row["createdAt"] > 0 for row in rest["items"])
    assert (await client.get("/api/sessions", headers=bearer(OTHER))).json() == {"items": [], "next": None}


async def test_send_prompt_and_read(client: httpx.AsyncClient, runtime: LocalRuntime) -> None:
    sid = await new_session(client)
    context = await client.post(
        f"/api/sessions/{sid}/messages", json={"text": "Prefer blue.", "role": "system", "generate": False}
    )
    assert context.status_code == 200 and context.json()["outcome"] == "applied"
    assert set(context.json()) == {"commandId", "outcome"}  # no reason on an applied receipt

    input_id = uid()
    waited = await client.post(f"/api/sessions/{sid}/prompt", json={"text": "plain hi", "id": input_id, "wait": True})
    assert waited.status_code == 200
    assert waited.json() == {
        "inputId": input_id,
        "receipt": {"commandId": input_id, "outcome": "applied"},
        "success": True,
        "outcome": "completed",
        "text": "Hello there, friend!",
        "error": None,
        "turnId": "t1",
    }
    replay = await client.post(f"/api/sessions/{sid}/messages", json={"text": "plain hi", "id": input_id})
    assert replay.json() == {"commandId": input_id, "outcome": "applied"}  # a resubmission replays

    later = await client.post(f"/api/sessions/{sid}/prompt", json={"text": "count"})
    assert later.json()["receipt"]["outcome"] == "applied" and later.json()["outcome"] is None
    await until(runtime, sid, lambda s: s.last_turn is not None and s.last_turn[0] == "t2")

    state = (await client.get(f"/api/sessions/{sid}/state")).json()
    assert state["state"]["status"] == "idle" and state["state"]["lastTurn"] == {"id": "t2", "outcome": "completed"}
    assert set(state["state"]) >= {"messages", "status", "inbox", "active", "interactions", "app", "lastTurn"}
    assert [m["role"] for m in state["state"]["messages"]] == ["system", "user", "assistant", "user", "assistant"]
    messages = (await client.get(f"/api/sessions/{sid}/messages")).json()["messages"]
    assert messages == state["state"]["messages"]
    info = (await client.get(f"/api/sessions/{sid}/info")).json()
    assert info["executing"] is False and info["queued"] == [] and info["index"] == state["index"]

    earlier = (await client.get(f"/api/sessions/{sid}/state", params={"through": waited_index(state)})).json()
    assert earlier["index"] < state["index"]
    assert len(earlier["state"]["messages"]) < len(state["state"]["messages"])


def waited_index(state: dict[str, Any]) -> int:
    """An index in the middle of the log (the first turn is long over by then)."""
    return int(state["index"]) // 2


async def test_a_rejection_is_a_normal_result(client: httpx.AsyncClient) -> None:
    sid = await new_session(client)
    response = await client.post(f"/api/sessions/{sid}/queue/edit", json={"inputId": "nope", "text": "x"})
    assert response.status_code == 200
    assert response.json()["outcome"] == "rejected" and response.json()["reason"] == "not-pending"
    retry = await client.post(f"/api/sessions/{sid}/retry")
    assert retry.json()["reason"] == "nothing-to-retry"


async def test_queue_steer_stop_pause_resume(client: httpx.AsyncClient, runtime: LocalRuntime) -> None:
    sid = await new_session(client)
    a, b = uid("gate"), uid("gate")
    first = await client.post(f"/api/sessions/{sid}/messages", json={"text": f"gate {a} {b}"})
    assert first.json()["outcome"] == "applied"
    await until(runtime, sid, lambda s: s.active is not None and s.active.phase == "generating")
    ids = [uid(), uid(), uid()]
    for input_id, text in zip(ids, ["count one", "count two", "count three"], strict=True):
        await client.post(f"/api/sessions/{sid}/messages", json={"text": text, "id": input_id})

    def queued() -> Any:
        return client.get(f"/api/sessions/{sid}/info")

    assert [q["id"] for q in (await queued()).json()["queued"]] == ids
    edit = await client.post(f"/api/sessions/{sid}/queue/edit", json={"inputId": ids[0], "text": "count uno"})
    assert edit.json()["outcome"] == "applied"
    move = await client.post(f"/api/sessions/{sid}/queue/move", json={"inputId": ids[2], "beforeId": ids[0]})
    assert move.json()["outcome"] == "applied"
    remove = await client.post(f"/api/sessions/{sid}/queue/remove", json={"inputId": ids[1]})
    assert remove.json()["outcome"] == "applied"
    info = (await queued()).json()
    assert [(q["id"], q["text"]) for q in info["queued"]] == [(ids[2], "count three"), (ids[0], "count uno")]
    turn_id = info["turn"]["id"]
    steer = await client.post(f"/api/sessions/{sid}/steer", json={"text": "count faster", "turnId": turn_id})
    assert steer.json()["outcome"] == "applied"
    stale = await client.post(f"/api/sessions/{sid}/queue/send-now", json={"inputId": ids[0], "turnId": "t-old"})
    assert stale.json()["reason"] == "stale-turn"
    send_now = await client.post(f"/api/sessions/{sid}/queue/send-now", json={"inputId": ids[0]})
    assert send_now.json()["outcome"] == "applied"

    pause = await client.post(f"/api/sessions/{sid}/pause", json={"when": "after-turn"})
    assert pause.json()["outcome"] == "applied" and (await queued()).json()["paused"] is True
    stop = await client.post(f"/api/sessions/{sid}/stop", json={"cancelQueued": True})
    assert stop.status_code == 200 and stop.json()["receipt"]["outcome"] == "applied"
    assert stop.json()["cancelledQueuedPrompts"] >= 1
    await until(runtime, sid, lambda s: s.active is None)
    gate(a).open()
    gate(b).open()
    nothing = await client.post(f"/api/sessions/{sid}/stop")
    assert nothing.json() == {"receipt": None, "cancelledQueuedPrompts": 0}
    resume = await client.post(f"/api/sessions/{sid}/resume")
    assert resume.json()["outcome"] == "applied" and (await queued()).json()["paused"] is False


async def test_stop_and_retry_name_the_turn_the_client_saw(client: httpx.AsyncClient) -> None:
    sid = await new_session(client)
    done = await client.post(f"/api/sessions/{sid}/prompt", json={"text": "plain hi", "wait": True})
    assert done.json()["turnId"] == "t1"
    late = await client.post(f"/api/sessions/{sid}/stop", json={"turnId": "t1", "commandId": "stop-late"})
    assert late.status_code == 200
    assert late.json() == {
        "receipt": {"commandId": "stop-late", "outcome": "rejected", "reason": "stale-turn"},
        "cancelledQueuedPrompts": 0,
    }
    stale = await client.post(f"/api/sessions/{sid}/retry", json={"turnId": "t0"})
    assert stale.json()["reason"] == "stale-turn"
    retry = await client.post(f"/api/sessions/{sid}/retry", json={"turnId": "t1"})
    assert retry.json()["outcome"] == "applied"


async def test_respond_to_an_approval(client: httpx.AsyncClient, runtime: LocalRuntime) -> None:
    sid = await new_session(client)
    await client.post(f"/api/sessions/{sid}/messages", json={"text": "buy a mug"})
    state = await until(runtime, sid, lambda s: any(i.status == "pending" for i in s.interactions.values()))
    interaction = next(iter(state.interactions.values()))
    wire = (await client.get(f"/api/sessions/{sid}/state")).json()["state"]
    assert wire["interactions"][0]["id"] == interaction.id and wire["interactions"][0]["status"] == "pending"
    answer = await client.post(
        f"/api/sessions/{sid}/respond", json={"interactionId": interaction.id, "approved": True, "reason": "ok"}
    )
    assert answer.json()["outcome"] == "applied"
    again = await client.post(f"/api/sessions/{sid}/respond", json={"interactionId": interaction.id, "approved": True})
    assert again.json()["reason"] == "not-pending"
    done = await until(runtime, sid, lambda s: s.active is None)
    assert "Done." in done.messages.at(len(done.messages) - 1).text


async def test_a_denial_keeps_the_users_reason_everywhere(client: httpx.AsyncClient, runtime: LocalRuntime) -> None:
    sid = await new_session(client)
    await client.post(f"/api/sessions/{sid}/messages", json={"text": "buy a mug"})
    state = await until(runtime, sid, lambda s: any(i.status == "pending" for i in s.interactions.values()))
    interaction = next(iter(state.interactions.values()))
    pending_at = (await client.get(f"/api/sessions/{sid}/state")).json()["index"]
    answer = await client.post(
        f"/api/sessions/{sid}/respond",
        json={"interactionId": interaction.id, "approved": False, "reason": "too pricey"},
    )
    assert answer.json()["outcome"] == "applied"
    await until(runtime, sid, lambda s: s.active is None)
    # the session state (what the web chat and SSE snapshots show) ...
    wire = (await client.get(f"/api/sessions/{sid}/state")).json()["state"]
    assert wire["interactions"] == [
        {
            "id": interaction.id,
            "callId": interaction.call_id,
            "name": "buy",
            "prompt": interaction.prompt,
            "status": "denied",
            "reason": "too pricey",
        }
    ]
    # ... and the AI SDK's reload (useChat's initial messages)
    ui = (await client.get(f"/api/chat/{sid}/messages")).json()
    tool = next(p for m in ui for p in m["parts"] if p["type"] == "tool-buy")
    assert tool["state"] == "output-denied"
    assert tool["approval"] == {"id": interaction.id, "approved": False, "reason": "too pricey"}
    # ... and a live client, in the interaction's mutation
    session = runtime.session(sid, agent=shopper)
    before, after = await session.state(through=pending_at), await session.state()
    changed = [m["interaction"] for m in diff(before.state, after.state, after.index) if m["type"] == "interaction"]
    assert changed == [wire["interactions"][0]]


async def test_respond_to_a_sub_agents_approval_through_the_parent(runtime: LocalRuntime) -> None:
    counter = Counter()
    app = create_app(runtime, approving_tree(counter), api_keys=[KEY])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=bearer(KEY)) as http:
        sid = await new_session(http)
        await http.post(f"/api/sessions/{sid}/messages", json={"text": "a mug please"})

        async def waiting() -> dict[str, Any] | None:
            wire = (await http.get(f"/api/sessions/{sid}/state")).json()["state"]
            return dict(wire["interactions"][0]) if wire["interactions"] else None

        nested = await eventually(waiting, TIMEOUT, interval=0.02, what="the nested approval is pending")
        assert nested["name"] == "add_to_cart" and len(nested["path"]) == 2 and nested["status"] == "pending"
        answer = await http.post(f"/api/sessions/{sid}/respond", json={"interactionId": nested["id"], "approved": True})
        assert answer.json()["outcome"] == "applied"

        async def finished() -> dict[str, Any] | None:
            wire = (await http.get(f"/api/sessions/{sid}/state")).json()["state"]
            return dict(wire) if wire["status"] == "idle" and wire["lastTurn"] else None

        done = await eventually(finished, TIMEOUT, interval=0.02, what="the turn finished")
        assert done["interactions"] == [] and done["lastTurn"]["outcome"] == "completed"
        assert '"output": "Added."' in json.dumps(done)  # the buyer's call ran, deep in the nested runs


async def test_push_app_events(client: httpx.AsyncClient) -> None:
    sid = await new_session(client)
    pushed = await client.post(
        f"/api/sessions/{sid}/events",
        json={"events": [{"type": "note.added", "payload": {"text": "hi"}, "id": uid("e")}]},
    )
    assert pushed.status_code == 200 and pushed.json()["index"] >= 1
    state = (await client.get(f"/api/sessions/{sid}/state")).json()["state"]
    assert state["app"] == {"notes": ["hi"]}

    builtin = await client.post(f"/api/sessions/{sid}/events", json={"events": [{"type": "ai.input", "payload": {}}]})
    assert builtin.status_code == 400 and error_of(builtin)["field"] == "events[0].type"
    assert "'ai.input' is a built-in Troupe event type;" in error_of(builtin)["message"]
    reserved = await client.post(
        f"/api/sessions/{sid}/events",
        json={"events": [{"type": "note.added", "payload": {"text": "x"}, "id": "troupe:mine"}]},
    )
    assert reserved.status_code == 400 and error_of(reserved)["field"] == "events[0].id"
    assert "ids starting with 'troupe:' are Troupe's own" in error_of(reserved)["message"]
    refused = await client.post(
        f"/api/sessions/{sid}/events", json={"events": [{"type": "secret.set", "payload": {"value": "x"}}]}
    )
    assert refused.status_code == 403 and error_of(refused)["message"]
    unknown = await client.post(f"/api/sessions/{sid}/events", json={"events": [{"type": "note.deleted"}]})
    assert unknown.status_code == 422 and error_of(unknown)["field"] == "events[0].type"
    bad = await client.post(
        f"/api/sessions/{sid}/events", json={"events": [{"type": "note.added", "payload": {"text": 3}}]}
    )
    assert bad.status_code == 422 and error_of(bad)["field"] == "events[0].payload.text"
    again = (await client.get(f"/api/sessions/{sid}/state")).json()["state"]
    assert again["app"] == {"notes": ["hi"]}  # nothing was appended by the refused pushes


# -- security -------------------------------------------------------------------------------------------


async def test_auth(client: httpx.AsyncClient) -> None:
    sid = await new_session(client)
    missing = await client.get(f"/api/sessions/{sid}/state", headers={"Authorization": ""})
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert error_of(missing)["message"]
    wrong = await client.get(f"/api/sessions/{sid}/state", headers=bearer("nope"))
    assert wrong.status_code == 401
    for method, path, body in [
        ("GET", "state", None),
        ("GET", "messages", None),
        ("GET", "info", None),
        ("GET", "events", None),
        ("POST", "messages", {"text": "hi"}),
        ("POST", "stop", {}),
        ("POST", "events", {"events": [{"type": "note.added", "payload": {"text": "x"}}]}),
    ]:
        other = await client.request(method, f"/api/sessions/{sid}/{path}", json=body, headers=bearer(OTHER))
        assert other.status_code == 404, (path, other.text)
        assert error_of(other)["field"] == "id"
    never = await client.get(f"/api/sessions/{uid('s')}/state")
    assert never.status_code == 404  # not created: the same answer as another key's
    chat = await client.post(
        "/api/chat", json={"id": sid, "messages": [user_message(uid(), "plain")]}, headers=bearer(OTHER)
    )
    assert chat.status_code == 404
    assert (await client.get(f"/api/chat/{sid}/messages", headers=bearer(OTHER))).status_code == 404
    assert (await client.get(f"/api/sessions/{sid}/state")).status_code == 200


async def test_an_open_server_needs_no_key(runtime: LocalRuntime) -> None:
    app = create_app(runtime, shopper)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
        created = await http.post("/api/sessions", json={"id": uid("s")})
        assert created.status_code == 201
        reply = await http.post(f"/api/sessions/{created.json()['id']}/prompt", json={"text": "plain", "wait": True})
        assert reply.json()["success"] is True


async def test_request_size_limit(client: httpx.AsyncClient) -> None:
    sid = await new_session(client)
    big = await client.post(f"/api/sessions/{sid}/messages", json={"text": "x" * 30_000})
    assert big.status_code == 413 and error_of(big)["field"] == "body"

    async def chunked() -> AsyncIterator[bytes]:
        yield b'{"text": "'
        for _ in range(30):
            yield b"x" * 1000
        yield b'"}'

    streamed = await client.post(
        f"/api/sessions/{sid}/messages", content=chunked(), headers={"content-type": "application/json"}
    )
    assert streamed.status_code == 413 and error_of(streamed)["field"] == "body"
    small = await client.post(f"/api/sessions/{sid}/messages", json={"text": "x" * 1000})
    assert small.status_code == 200


@pytest.mark.parametrize(
    ("path", "body", "status", "field"),
    [
        ("messages", b'{"text": ', 422, "body"),
        ("messages", b"[1, 2]", 422, "body"),
        ("messages", {}, 422, "text"),
        ("messages", {"text": "   "}, 422, "text"),
        ("messages", {"text": 5}, 422, "text"),
        ("messages", {"text": "hi", "txt": "typo"}, 422, "txt"),
        ("messages", {"text": "hi", "generate": "maybe"}, 422, "generate"),
        ("messages", {"text": "hi", "role": "robot"}, 422, "role"),
        ("messages", {"text": "hi", "id": "troupe:mine"}, 400, "id"),
        ("prompt", {"text": "hi", "wait": True, "timeout": -1}, 422, "timeout"),
        ("steer", {"text": ""}, 422, "text"),
        ("stop", {"cancelQueued": "yes"}, 422, "cancelQueued"),
        ("queue/edit", {"text": "x"}, 422, "inputId"),
        ("queue/move", {"inputId": ["a"]}, 422, "inputId"),
        ("pause", {"when": "later"}, 422, "when"),
        ("respond", {"interactionId": "i-1"}, 422, "approved"),
        ("events", {"events": []}, 422, "events"),
        ("events", {"events": [{"payload": {}}]}, 422, "events[0].type"),
        ("events", {"events": "note"}, 422, "events"),
    ],
)
async def test_malformed_bodies_name_the_field(
    client: httpx.AsyncClient, path: str, body: Any, status: int, field: str
) -> None:
    sid = await new_session(client)
    if isinstance(body, bytes):
        response = await client.post(
            f"/api/sessions/{sid}/{path}", content=body, headers={"content-type": "application/json"}
        )
    else:
        response = await client.post(f"/api/sessions/{sid}/{path}", json=body)
    assert response.status_code == status, response.text
    assert error_of(response)["field"] == field


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"id": "c", "messages": []}, 422, "messages"),
        ({"messages": [user_message("m-1", "hi")]}, 422, "id"),
        ({"id": "troupe:x", "messages": [user_message("m-1", "hi")]}, 400, "id"),
        ({"id": "a/b", "messages": [user_message("m-1", "hi")]}, 422, "id"),
        ({"id": "c", "messages": [user_message("troupe:1", "hi")]}, 400, "messages[0].id"),
        (
            {"id": "c", "messages": [{"id": "m-1", "role": "user", "parts": [{"type": "file"}]}]},
            422,
            "messages[0].parts",
        ),
        ({"id": "c", "messages": [{"id": "m-1", "role": "assistant", "parts": []}]}, 422, "messages[0]"),
        ({"id": "c", "messages": [{"id": "m-1", "role": "robot", "parts": []}]}, 422, "messages[0].role"),
        ({"id": "c", "messages": [user_message("m-1", "hi")], "trigger": "guess"}, 422, "trigger"),
        (
            {
                "id": "c",
                "messages": [
                    {"id": "a", "role": "assistant", "parts": [{"type": "tool-buy", "state": "approval-responded"}]}
                ],
            },
            422,
            "messages[0].parts[0].approval",
        ),
    ],
)
async def test_malformed_chat_requests_name_the_field(
    client: httpx.AsyncClient, body: dict[str, Any], status: int, field: str
) -> None:
    response = await client.post("/api/chat", json=body)
    assert response.status_code == status, response.text
    assert error_of(response)["field"] == field


async def test_bad_ids_and_reused_ids(client: httpx.AsyncClient) -> None:
    assert error_of(await client.post("/api/sessions", json={"id": "troupe:x"}))["field"] == "id"
    assert (await client.post("/api/sessions", json={"id": "a/b"})).status_code == 422
    assert (await client.get("/api/sessions/troupe:x/state")).status_code == 400
    first, second = await new_session(client), await new_session(client)
    input_id = uid()
    assert (await client.post(f"/api/sessions/{first}/messages", json={"text": "plain", "id": input_id})).is_success
    reused = await client.post(f"/api/sessions/{second}/messages", json={"text": "plain", "id": input_id})
    assert reused.status_code == 409
    assert first not in error_of(reused)["message"]  # never names the session that holds the id
    assert (await client.get("/api/nowhere")).status_code == 404
    assert error_of(await client.delete("/api/sessions"))["message"]


async def test_the_authorize_hook_decides_commands_too(runtime: LocalRuntime) -> None:
    from dataclasses import replace

    from orchestrator.core.contract import Operation

    def no_stopping(operation: Operation) -> bool:
        return operation.command != "stop"

    assert shopper.contract is not None
    strict = replace(shopper, contract=replace(shopper.contract, authorize=no_stopping))
    app = create_app(runtime, strict)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
        sid = (await http.post("/api/sessions")).json()["id"]
        assert (await http.post(f"/api/sessions/{sid}/stop")).status_code == 403
        assert (await http.post(f"/api/sessions/{sid}/messages", json={"text": "plain"})).status_code == 200


ROUTE_COMMANDS = (
    "messages",
    "prompt",
    "stop",
    "retry",
    "steer",
    "queue/edit",
    "queue/move",
    "queue/remove",
    "queue/send-now",
    "pause",
    "resume",
    "respond",
    "events",
    "reset",
    "fork",
)


async def test_openapi_describes_every_route(runtime: LocalRuntime) -> None:
    app = create_app(runtime, shopper, api_keys=[KEY])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
        document = (await http.get("/openapi.json")).json()
    session = "/api/sessions/{session_id}"
    routes = {("/api/sessions", "post"), ("/api/sessions", "get"), ("/api/chat", "post")}
    routes |= {(f"{session}/{name}", "post") for name in ROUTE_COMMANDS}
    routes |= {(f"{session}/{name}", "get") for name in ("state", "messages", "info", "events", "log", "subagents")}
    routes |= {("/api/chat/{session_id}/stream", "get"), ("/api/chat/{session_id}/messages", "get")}
    documented = {(path, method) for path, item in document["paths"].items() for method in item}
    assert documented == routes and len(routes) == 26  # 22, reset and fork, the inspector's log and sub-agents
    events = document["paths"]["/api/sessions/{session_id}/events"]["get"]["responses"]["200"]["content"]
    assert "text/event-stream" in events
    chat = document["paths"]["/api/chat"]["post"]
    assert "text/event-stream" in chat["responses"]["200"]["content"]
    assert chat["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/ChatRequest")
    schemas = document["components"]["schemas"]
    assert "examples" in schemas["SendRequest"] and "examples" in schemas["ReceiptBody"]
    assert schemas["ErrorBody"]["properties"]["error"]
    assert "HTTPValidationError" not in schemas  # every 422 is documented as our error shape
    assert document["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if path != "/openapi.json":
                assert "422" in operation["responses"] or method == "get", (path, method)


# -- chat endpoints beyond the AI SDK client tests ---------------------------------------------------------


async def test_chat_resubmission_replays_and_resume_stream(client: httpx.AsyncClient, runtime: LocalRuntime) -> None:
    sid = uid("c")
    message = user_message(uid(), "plain hi")
    first = chunks_of((await client.post("/api/chat", json={"id": sid, "messages": [message]})).text)
    again = chunks_of((await client.post("/api/chat", json={"id": sid, "messages": [message]})).text)
    text = [c["delta"] for c in first if c["type"] == "text-delta"]
    assert [c["delta"] for c in again if c["type"] == "text-delta"] == ["".join(text)]  # the same answer, replayed
    assert again[0] == first[0] == {"type": "start", "messageId": "troupe:t1"}
    state = (await client.get(f"/api/sessions/{sid}/state")).json()["state"]
    assert len(state["messages"]) == 2  # one user message, one answer

    nothing = await client.get(f"/api/chat/{sid}/stream")
    assert nothing.status_code == 204
    ui = (await client.get(f"/api/chat/{sid}/messages")).json()
    assert [m["role"] for m in ui] == ["user", "assistant"] and ui[1]["parts"][-1]["text"] == "Hello there, friend!"


async def test_chat_resume_stream_replays_the_active_turn(runtime: LocalRuntime) -> None:
    app = create_app(runtime, shopper)
    async with LiveServer(app) as server, httpx.AsyncClient(base_url=server.url) as http:
        sid = uid("c")
        a, b = uid("gate"), uid("gate")
        async with http.stream(
            "POST", "/api/chat", json={"id": sid, "messages": [user_message(uid(), f"gate {a} {b}")]}
        ) as first:
            await until(runtime, sid, lambda s: "Part one, " in "".join(m.text for m in s.messages))
            async with http.stream("GET", f"/api/chat/{sid}/stream") as resumed:
                assert resumed.headers["x-vercel-ai-ui-message-stream"] == "v1"
                gate(a).open()
                gate(b).open()
                body = "".join([chunk async for chunk in resumed.aiter_text()])
            rest = "".join([chunk async for chunk in first.aiter_text()])
        replayed, original = chunks_of(body), chunks_of(rest)
        assert replayed[0] == {"type": "start", "messageId": "troupe:t1"}
        text = "".join(c["delta"] for c in replayed if c["type"] == "text-delta")
        assert text == "".join(c["delta"] for c in original if c["type"] == "text-delta")
        assert text == "Part one, part two.All done: four."


async def test_a_queued_chat_prompt_waits_for_its_own_turn(runtime: LocalRuntime) -> None:
    app = create_app(runtime, shopper)
    async with LiveServer(app) as server, httpx.AsyncClient(base_url=server.url) as http:
        sid = uid("c")
        a, b = uid("gate"), uid("gate")
        first_message = user_message(uid(), f"gate {a} {b}")
        async with http.stream("POST", "/api/chat", json={"id": sid, "messages": [first_message]}) as first:
            await until(runtime, sid, lambda s: s.active is not None)
            second_message = user_message(uid(), "count please")
            body = {"id": sid, "messages": [first_message, {"id": "x", "role": "assistant"}, second_message]}
            second = asyncio.ensure_future(http.post("/api/chat", json=body))
            await until(runtime, sid, lambda s: s.inbox.get(second_message["id"]) is not None)
            gate(a).open()
            gate(b).open()
            first_body = "".join([chunk async for chunk in first.aiter_text()])
        second_chunks = chunks_of((await second).text)
        assert chunks_of(first_body)[0]["messageId"] == "troupe:t1"
        assert second_chunks[0] == {"type": "start", "messageId": "troupe:t2"}
        assert "".join(c["delta"] for c in second_chunks if c["type"] == "text-delta") == "One, two, three."


async def test_a_removed_chat_prompt_ends_its_response(runtime: LocalRuntime) -> None:
    app = create_app(runtime, shopper)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
        sid = uid("c")
        a, b = uid("gate"), uid("gate")
        await http.post("/api/sessions", json={"id": sid})
        await http.post(f"/api/sessions/{sid}/messages", json={"text": f"gate {a} {b}"})
        await until(runtime, sid, lambda s: s.active is not None)
        queued = user_message(uid(), "count")
        pending = asyncio.ensure_future(http.post("/api/chat", json={"id": sid, "messages": [queued]}))
        await until(runtime, sid, lambda s: s.inbox.get(queued["id"]) is not None)
        await http.post(f"/api/sessions/{sid}/queue/remove", json={"inputId": queued["id"]})
        assert chunks_of((await pending).text) == [{"type": "start"}, {"type": "finish", "finishReason": "other"}]
        gate(a).open()
        gate(b).open()


# -- the SSE mutation stream --------------------------------------------------------------------------------


def view_of(event: SseEvent) -> ClientView:
    data = event.json()
    state = {k: v for k, v in data["state"].items() if k in ("messages", "status", "error")}
    return ClientView.of(parse_state(state), data["index"])


def conversation(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state.items() if k in ("messages", "status", "error")}


async def read_until(
    events: AsyncIterator[SseEvent | None], view: ClientView, ids: list[int], done: Callable[[ClientView], bool]
) -> None:
    """Apply events to ``view`` (recording their ids) until ``done(view)``."""
    while not done(view):
        event = await asyncio.wait_for(anext(events), TIMEOUT)
        if event is None:
            continue
        assert event.id is not None
        ids.append(int(event.id))
        data = event.json()
        assert data["index"] == int(event.id)
        if event.event == "snapshot":
            raise AssertionError("a reconnect with Last-Event-ID must not need a snapshot")
        assert event.event == "mutations"
        for mutation in data["mutations"]:
            assert mutation["index"] == data["index"]
            assert view.apply(mutation)  # nothing the view already holds


def last_text(view: ClientView) -> str:
    messages = view.state.messages
    return messages.at(len(messages) - 1).text if len(messages) else ""


async def test_sse_reconnect_misses_nothing_and_repeats_nothing(runtime: LocalRuntime) -> None:
    app = create_app(runtime, shopper, api_keys=[KEY])
    async with LiveServer(app) as server, httpx.AsyncClient(base_url=server.url, headers=bearer(KEY)) as http:
        sid = await new_session(http)
        a, b = uid("gate"), uid("gate")
        ids: list[int] = []
        async with http.stream("GET", f"/api/sessions/{sid}/events") as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            events = sse_events(response)
            snapshot = await anext(events)
            assert snapshot is not None and snapshot.event == "snapshot"
            view = view_of(snapshot)
            ids.append(view.index)
            await http.post(f"/api/sessions/{sid}/messages", json={"text": f"gate {a} {b}"})
            await read_until(events, view, ids, lambda v: last_text(v) == "Part one, ")
        # Disconnected mid-turn: the turn goes on (the rest of the step, a tool, the next step).
        gate(a).open()
        await until(
            runtime, sid, lambda s: s.active is not None and s.active.steps == 1 and s.active.phase == "generating"
        )
        async with http.stream(
            "GET", f"/api/sessions/{sid}/events", headers={"Last-Event-ID": str(ids[-1])}
        ) as response:
            events = sse_events(response)
            await read_until(events, view, ids, lambda v: "part two." in last_text(v))
            catch_up = ids[-1]
            gate(b).open()
            await read_until(events, view, ids, lambda v: v.state.status == "idle")
        assert ids == sorted(ids) and len(ids) == len(set(ids))  # in order, never twice
        assert catch_up > ids[0]
        state = (await http.get(f"/api/sessions/{sid}/state")).json()
        assert state_to_wire(view.state) == conversation(state["state"])
        assert last_text(view) == "Part one, part two.All done: four."

        # Reconnecting at the end: nothing new, no snapshot; `?after=` works like the header.
        async with http.stream("GET", f"/api/sessions/{sid}/events", params={"after": ids[-1]}) as response:
            events = sse_events(response)
            await http.post(f"/api/sessions/{sid}/messages", json={"text": "count now"})
            await read_until(events, view, ids, lambda v: last_text(v) == "One, two, three.")
        assert ids == sorted(ids) and len(ids) == len(set(ids))
        state = (await http.get(f"/api/sessions/{sid}/state")).json()
        await until(runtime, sid, lambda s: s.active is None)
        state = (await http.get(f"/api/sessions/{sid}/state")).json()
        assert state_to_wire(view.state)["messages"] == state["state"]["messages"]


async def test_sse_snapshot_for_a_client_from_another_history(runtime: LocalRuntime) -> None:
    app = create_app(runtime, shopper, heartbeat=0.05)
    async with LiveServer(app) as server, httpx.AsyncClient(base_url=server.url) as http:
        sid = (await http.post("/api/sessions")).json()["id"]
        await http.post(f"/api/sessions/{sid}/prompt", json={"text": "plain", "wait": True})
        async with http.stream("GET", f"/api/sessions/{sid}/events", headers={"Last-Event-ID": "99999"}) as response:
            events = sse_events(response)
            first = await anext(events)
            assert first is not None and first.event == "snapshot"
            assert conversation(first.json()["state"]) == conversation(
                (await http.get(f"/api/sessions/{sid}/state")).json()["state"]
            )
            assert await asyncio.wait_for(anext(events), 5.0) is None  # a `: ping` heartbeat
        bad = await http.get(f"/api/sessions/{sid}/events", headers={"Last-Event-ID": "soon"})
        assert bad.status_code == 422 and json.loads(bad.text)["error"]["field"] == "Last-Event-ID"


async def test_a_stopped_chat_turn_closes_its_parts_and_aborts(runtime: LocalRuntime) -> None:
    app = create_app(runtime, shopper)
    async with LiveServer(app) as server, httpx.AsyncClient(base_url=server.url) as http:
        sid = uid("c")
        a, b = uid("gate"), uid("gate")
        body = {"id": sid, "messages": [user_message(uid(), f"gate {a} {b}")]}
        async with http.stream("POST", "/api/chat", json=body) as response:
            await until(runtime, sid, lambda s: "Part one, " in "".join(m.text for m in s.messages))
            stop = await http.post(f"/api/sessions/{sid}/stop")
            assert stop.json()["receipt"]["outcome"] == "applied"
            chunks = chunks_of("".join([chunk async for chunk in response.aiter_text()]))
        gate(a).open()
        gate(b).open()
        kinds = [c["type"] for c in chunks]
        assert kinds[-4:] == ["text-end", "finish-step", "abort", "finish"]
        assert chunks[-1] == {"type": "finish", "finishReason": "other"}


class _FakeSubscription:
    """A subscription whose batches the test feeds (to force a ``reset``, which a LocalRuntime never sends)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[list[Any] | None] = asyncio.Queue()
        self.closed = False
        self.pushing: asyncio.Future[None] | None = None

    async def ready(self) -> int:
        return 0

    async def next_batch(self, timeout: float | None = None) -> list[Any] | None:
        return await asyncio.wait_for(self.queue.get(), timeout)

    def attach(self, sink: Callable[[list[Any] | None], None]) -> None:
        async def push() -> None:
            while (batch := await self.queue.get()) is not None:
                sink(batch)
            sink(None)

        self.pushing = asyncio.ensure_future(push())

    def close(self) -> None:
        self.closed = True
        self.queue.put_nowait(None)


class _FakeSession:
    def __init__(self, states: list[tuple[AIState, int]]) -> None:
        self.states = states
        self.subscription = _FakeSubscription()
        self.id = "s-fake"

    def subscribe(self) -> _FakeSubscription:
        return self.subscription

    async def subscribe_and_snapshot(self) -> tuple[_FakeSubscription, None]:
        return self.subscription, None

    async def live(self) -> Any:
        from actors.live import LiveView

        view: LiveView[Any, Any] = LiveView(self)
        await view.start()
        return view

    async def state(self) -> Any:
        from orchestrator.run.log import Snapshot

        state, index = self.states.pop(0)
        return Snapshot(state, index)


async def test_a_reset_becomes_a_fresh_snapshot_event() -> None:
    from actors.client import Mutation
    from orchestrator.core.parts import AgentMessage, TextPart
    from orchestrator.core.state import SessionState
    from orchestrator.surfaces.http.views import Views, session_events

    later = AIState(session=SessionState.of([AgentMessage("u-1", "user", (TextPart("u-1:0", "hi"),))]))
    session = _FakeSession([(AIState(), 3), (later, 9)])
    views = Views()
    stream = session_events(views, session, None, None)  # type: ignore[arg-type]
    first = await anext(stream)
    assert first.startswith(b"event: snapshot\nid: 3\n")
    session.subscription.queue.put_nowait([Mutation(type="status", path=[], status="streaming", index=2)])
    session.subscription.queue.put_nowait([Mutation(type="reset", index=9)])
    second = await anext(stream)  # index 2 is older than the snapshot: skipped, never sent
    assert second.startswith(b"event: snapshot\nid: 9\n")
    assert json.loads(second.split(b"data: ", 1)[1])["state"]["messages"][0]["id"] == "u-1"
    session.subscription.queue.put_nowait([Mutation(type="status", path=[], status="idle", index=10)])
    third = await anext(stream)
    assert third.startswith(b"event: mutations\nid: 10\n")
    await stream.aclose()
    assert not views.followed[session.id].feeds  # the stream let go of the session's view
    await views.close()
    assert session.subscription.closed


# -- reset and fork ------------------------------------------------------------------------------


async def prompted(client: httpx.AsyncClient, sid: str, text: str) -> None:
    response = await client.post(f"/api/sessions/{sid}/prompt", json={"text": text, "wait": True, "timeout": 10})
    assert response.status_code == 200 and response.json()["success"], response.text


async def test_reset_starts_a_new_conversation(client: httpx.AsyncClient) -> None:
    sid = await new_session(client)
    await prompted(client, sid, "plain")
    index = (await client.get(f"/api/sessions/{sid}/state")).json()["index"]
    reset = await client.post(f"/api/sessions/{sid}/reset", json={"commandId": "reset-1"})
    assert reset.json() == {"commandId": "reset-1", "outcome": "applied"}
    assert (await client.get(f"/api/sessions/{sid}/messages")).json()["messages"] == []
    before = (await client.get(f"/api/sessions/{sid}/state", params={"through": index})).json()
    assert len(before["state"]["messages"]) == 2  # the log keeps the old conversation
    assert (await client.post(f"/api/sessions/{sid}/reset", json={"commandId": "reset-1"})).json() == reset.json()


async def test_fork_makes_a_session_the_caller_owns(client: httpx.AsyncClient) -> None:
    sid = await new_session(client)
    await prompted(client, sid, "plain")
    at = (await client.get(f"/api/sessions/{sid}/state")).json()["index"]
    await prompted(client, sid, "count")
    new = uid("fork")

    forked = await client.post(f"/api/sessions/{sid}/fork", json={"at": at, "id": new})

    assert forked.status_code == 201 and forked.json() == {"id": new, "source": sid, "at": at}
    source_then = (await client.get(f"/api/sessions/{sid}/state", params={"through": at})).json()["state"]
    assert (await client.get(f"/api/sessions/{new}/state")).json()["state"] == source_then
    assert new in [row["id"] for row in (await client.get("/api/sessions")).json()["items"]]
    other = await client.get(f"/api/sessions/{new}/state", headers=bearer(OTHER))
    assert other.status_code == 404
    fresh = await client.post(f"/api/sessions/{sid}/fork", json={"at": 0})
    assert fresh.status_code == 201 and fresh.json()["id"].startswith("s-")


async def test_a_bad_fork_is_refused_and_writes_nothing(client: httpx.AsyncClient, runtime: LocalRuntime) -> None:
    sid = await new_session(client)
    await prompted(client, sid, "plain")
    taken = await new_session(client)
    before = await runtime.store.list_sessions(limit=1000)
    beyond = await client.post(f"/api/sessions/{sid}/fork", json={"at": 999, "id": uid("f")})
    assert beyond.status_code == 400 and "pass an `at` from 0 to" in beyond.json()["error"]["message"]
    negative = await client.post(f"/api/sessions/{sid}/fork", json={"at": -1, "id": uid("f")})
    assert negative.status_code == 422
    clash = await client.post(f"/api/sessions/{sid}/fork", json={"at": 1, "id": taken})
    assert clash.status_code == 409 and "taken" in clash.json()["error"]["message"]
    assert await runtime.store.list_sessions(limit=1000) == before
    missing = await client.post(f"/api/sessions/{sid}/fork", headers=bearer(OTHER), json={"at": 1})
    assert missing.status_code == 404
