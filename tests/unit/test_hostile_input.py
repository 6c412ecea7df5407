# The corpus below is a table, one request per line: long lines read better than wrapped ones.
# ruff: noqa: E501
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


# -- the corpus: every endpoint, every kind of bad input ---------------------------------------------------

OTHER = "s-other"
"""Another session of the same key, holding the input id ``u-taken``."""
LIMIT = 20_000
"""The corpus server's body limit (bytes)."""
DEEP = '{"events": [{"type": "x.any", "payload": {"data": ' + "[" * 5000 + "]" * 5000 + "}}]}"
"""Nesting past what the JSON parser recurses into."""
DEEPISH = '{"events": [{"type": "x.any", "payload": {"data": ' + "[" * 300 + "]" * 300 + "}}]}"
"""Nesting the parser reads but the log refuses (more than 256 levels)."""
S = f"/api/sessions/{SID}"

# (name, method, path, body (JSON text, raw bytes or None), headers, status, field or None, words in the message)
CORPUS: list[tuple[str, str, str, str | bytes | None, dict[str, str], int, str | None, str]] = [
    # sessions
    ("create: reserved id", "POST", "/api/sessions", '{"id": "troupe:x"}', {}, 400, "id", "Troupe's own"),
    ("create: empty id", "POST", "/api/sessions", '{"id": ""}', {}, 422, "id", "not valid"),
    ("create: slash", "POST", "/api/sessions", '{"id": "a/b"}', {}, 422, "id", "not valid"),
    ("create: NUL id", "POST", "/api/sessions", '{"id": "a\\u0000b"}', {}, 422, "id", "not valid"),
    ("create: surrogate id", "POST", "/api/sessions", '{"id": "\\ud800"}', {}, 422, "id", "lone surrogate"),
    ("create: long id", "POST", "/api/sessions", '{"id": "' + "a" * 200 + '"}', {}, 422, "id", "1-128"),
    ("create: not UTF-8", "POST", "/api/sessions", b'{"id": "\xc3\x28"}', {}, 422, "body", "not valid UTF-8"),
    ("list: limit 0", "GET", "/api/sessions?limit=0", None, {}, 422, "limit", "limit"),
    ("list: huge limit", "GET", "/api/sessions?limit=99999999999999999999999", None, {}, 422, "limit", "limit"),
    # inputs
    ("send: empty text", "POST", f"{S}/messages", '{"text": ""}', {}, 422, "text", "at least 1"),
    ("send: blank text", "POST", f"{S}/messages", '{"text": " \\n\\t "}', {}, 422, "text", "empty"),
    ("send: enormous text", "POST", f"{S}/messages", '{"text": "' + "x" * (LIMIT + 1) + '"}', {}, 413, "body", "larger"),
    ("send: NUL text", "POST", f"{S}/messages", '{"text": "a\\u0000b"}', {}, 422, "text", "NUL"),
    ("send: surrogate text", "POST", f"{S}/messages", '{"text": "a\\udfffb"}', {}, 422, "text", "lone surrogate"),
    ("send: reserved id", "POST", f"{S}/messages", '{"text": "hi", "id": "troupe:t1"}', {}, 400, "id", "Troupe's own"),
    ("send: NUL id", "POST", f"{S}/messages", '{"text": "hi", "id": "u\\u0000"}', {}, 422, "id", "NUL"),
    ("send: id of another session", "POST", f"{S}/messages", '{"text": "hi", "id": "u-taken"}', {}, 409, "id", "already used"),
    ("send: bad role", "POST", f"{S}/messages", '{"text": "hi", "role": "robot"}', {}, 422, "role", "role"),
    ("send: huge int", "POST", f"{S}/messages", '{"text": "hi", "generate": 18446744073709551616}', {}, 422, "generate", "64-bit"),
    ("send: not UTF-8", "POST", f"{S}/messages", b'{"text": "\xff"}', {}, 422, "body", "not valid UTF-8"),
    ("send: not JSON", "POST", f"{S}/messages", "{text: hi}", {}, 422, "body", "not valid JSON"),
    ("send: unknown field", "POST", f"{S}/messages", '{"text": "hi", "txet": 1}', {}, 422, "txet", "not a field"),
    ("prompt: id of another session", "POST", f"{S}/prompt", '{"text": "hi", "id": "u-taken", "wait": true}', {}, 409, "id", "already used"),
    ("prompt: zero timeout", "POST", f"{S}/prompt", '{"text": "hi", "wait": true, "timeout": 0}', {}, 422, "timeout", "greater than 0"),
    ("prompt: NaN timeout", "POST", f"{S}/prompt", '{"text": "hi", "wait": true, "timeout": NaN}', {}, 422, "timeout", "timeout"),
    ("steer: empty text", "POST", f"{S}/steer", '{"text": ""}', {}, 422, "text", "at least 1"),
    ("steer: reserved id", "POST", f"{S}/steer", '{"text": "hi", "id": "troupe:x"}', {}, 400, "id", "Troupe's own"),
    # turn controls
    ("stop: empty turn id", "POST", f"{S}/stop", '{"turnId": ""}', {}, 422, "turnId", "at least 1"),
    ("stop: reserved command id", "POST", f"{S}/stop", '{"commandId": "troupe:x"}', {}, 400, "commandId", "Troupe's own"),
    ("retry: huge int", "POST", f"{S}/retry", '{"commandId": -9223372036854775809}', {}, 422, "commandId", "64-bit"),
    ("reset: reserved command id", "POST", f"{S}/reset", '{"commandId": "troupe:x"}', {}, 400, "commandId", "Troupe's own"),
    ("pause: unknown when", "POST", f"{S}/pause", '{"when": "later"}', {}, 422, "when", "when"),
    ("fork: negative at", "POST", f"{S}/fork", '{"at": -1}', {}, 422, "at", "greater than or equal"),
    ("fork: past the log", "POST", f"{S}/fork", '{"at": 1000}', {}, 400, "at", "log ends at"),
    ("fork: taken id", "POST", f"{S}/fork", f'{{"at": 0, "id": "{OTHER}"}}', {}, 409, "id", "taken"),
    ("fork: reserved id", "POST", f"{S}/fork", '{"at": 0, "id": "troupe:f"}', {}, 400, "id", "Troupe's own"),
    # the queue and approvals
    ("edit: empty input id", "POST", f"{S}/queue/edit", '{"inputId": "", "text": "x"}', {}, 422, "inputId", "at least 1"),
    ("edit: NUL text", "POST", f"{S}/queue/edit", '{"inputId": "u-mine", "text": "\\u0000"}', {}, 422, "text", "NUL"),
    ("move: surrogate", "POST", f"{S}/queue/move", '{"inputId": "u-mine", "beforeId": "\\udc00"}', {}, 422, "beforeId", "lone surrogate"),
    ("remove: NUL input id", "POST", f"{S}/queue/remove", '{"inputId": "u\\u0000"}', {}, 422, "inputId", "NUL"),
    ("send-now: empty turn id", "POST", f"{S}/queue/send-now", '{"inputId": "u-mine", "turnId": ""}', {}, 422, "turnId", "at least 1"),
    ("respond: not a bool", "POST", f"{S}/respond", '{"interactionId": "i", "approved": "yes"}', {}, 422, "approved", "boolean"),
    ("respond: surrogate reason", "POST", f"{S}/respond", '{"interactionId": "i", "approved": true, "reason": "\\ud83d"}', {}, 422, "reason", "lone surrogate"),
    # app events
    ("push: built-in type", "POST", f"{S}/events", '{"events": [{"type": "ai.turn.started", "payload": {}}]}', {}, 400, "events[0].type", "built-in"),
    ("push: reserved id", "POST", f"{S}/events", '{"events": [{"type": "x.any", "id": "troupe:e"}]}', {}, 400, "events[0].id", "Troupe's own"),
    ("push: no events", "POST", f"{S}/events", '{"events": []}', {}, 422, "events", "at least 1"),
    ("push: id of another session", "POST", f"{S}/events", '{"events": [{"type": "x.any", "id": "u-taken"}]}', {}, 409, None, "already used"),
    ("push: NaN", "POST", f"{S}/events", '{"events": [{"type": "x.any", "payload": {"data": NaN}}]}', {}, 422, "events[0].payload.data", "cannot represent"),
    ("push: deep", "POST", f"{S}/events", DEEPISH, {}, 422, None, "nested more than 256 levels"),
    ("push: deeper than the parser", "POST", f"{S}/events", DEEP, {}, 422, "body", "nested too deeply"),
    # reading
    ("state: negative through", "GET", f"{S}/state?through=-1", None, {}, 422, "through", "greater than or equal"),
    ("events: Last-Event-ID not a number", "GET", f"{S}/events", None, {"Last-Event-ID": "abc"}, 422, "Last-Event-ID", "integer"),
    ("events: negative after", "GET", f"{S}/events?after=-5", None, {}, 422, "after", "greater than or equal"),
    ("state: reserved session", "GET", "/api/sessions/troupe:x/state", None, {}, 400, "id", "Troupe's own"),
    ("state: no such session", "GET", "/api/sessions/nobody/state", None, {}, 404, "id", "no session"),
    ("state: no key", "GET", f"{S}/state", None, {"Authorization": ""}, 401, None, "API key"),
    # the AI SDK chat
    ("chat: no messages", "POST", "/api/chat", f'{{"id": "{SID}", "messages": []}}', {}, 422, "messages", "empty"),
    ("chat: reserved message id", "POST", "/api/chat", f'{{"id": "{SID}", "messages": [{{"id": "troupe:m", "role": "user", "parts": [{{"type": "text", "text": "hi"}}]}}]}}', {}, 400, "messages[0].id", "Troupe's own"),
    ("chat: empty text", "POST", "/api/chat", f'{{"id": "{SID}", "messages": [{{"id": "m", "role": "user", "parts": [{{"type": "text", "text": " "}}]}}]}}', {}, 422, "messages[0].parts", "no text"),
    ("chat: surrogate", "POST", "/api/chat", f'{{"id": "{SID}", "messages": [{{"id": "m", "role": "user", "parts": [{{"type": "text", "text": "\\ud800"}}]}}]}}', {}, 422, "messages[0].parts[0].text", "lone surrogate"),
    ("chat: message id of another session", "POST", "/api/chat", f'{{"id": "{SID}", "messages": [{{"id": "u-taken", "role": "user", "parts": [{{"type": "text", "text": "hi"}}]}}]}}', {}, 409, "messages[0].id", "already used"),
    ("chat: not UTF-8", "POST", "/api/chat", b'{"id": "\xfe"}', {}, 422, "body", "not valid UTF-8"),
]  # fmt: skip


@pytest.fixture
async def corpus_server(tmp_path: Any) -> AsyncIterator[tuple[LocalRuntime, httpx.AsyncClient]]:
    async with LocalRuntime(f"sqlite:///{tmp_path / 'troupe.db'}", flush_parts=1) as rt:
        app = create_app(rt, typed_agent, api_keys=[KEY], max_body_bytes=LIMIT)
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        headers = {"Authorization": f"Bearer {KEY}", "content-type": "application/json"}
        async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=headers) as http:
            for sid in (SID, OTHER):
                assert (await http.post("/api/sessions", json={"id": sid})).status_code == 201
            sent = await http.post(
                f"/api/sessions/{OTHER}/messages", json={"text": "x", "id": "u-taken", "generate": False}
            )
            mine = await http.post(f"{S}/messages", json={"text": "x", "id": "u-mine", "generate": False})
            assert sent.is_success and mine.is_success
            yield rt, http


async def log_lengths(rt: LocalRuntime, http: httpx.AsyncClient) -> tuple[int, int, list[str]]:
    sessions = (await http.get("/api/sessions")).json()["items"]
    return await rt.store.last_index(SID), await rt.store.last_index(OTHER), [row["id"] for row in sessions]


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "status", "field", "words"),
    [case[1:] for case in CORPUS],
    ids=[case[0] for case in CORPUS],
)
async def test_every_bad_request_is_a_clear_4xx_and_writes_nothing(
    corpus_server: tuple[LocalRuntime, httpx.AsyncClient],
    method: str,
    path: str,
    body: str | bytes | None,
    headers: dict[str, str],
    status: int,
    field: str | None,
    words: str,
) -> None:
    rt, http = corpus_server
    before = await log_lengths(rt, http)
    content = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    response = await http.request(method, path, content=content, headers=headers)
    assert response.status_code == status, response.text[:500]
    error = response.json()["error"]
    if field is not None:
        assert error["field"] == field, error
    assert words in error["message"], error
    assert await log_lengths(rt, http) == before


# The Python API: (name, call on (session, other session), words in the UsageError)
PY_CORPUS: list[tuple[str, Any, str]] = [
    ("send: empty", lambda s, o: s.send(""), "text is empty"),
    ("send: blank", lambda s, o: s.send(" \n "), "text is empty"),
    ("send: NUL", lambda s, o: s.send("a\x00"), "NUL"),
    ("send: surrogate", lambda s, o: s.send("\ud800"), "lone surrogate"),
    ("send: reserved id", lambda s, o: s.send("hi", id="troupe:x"), "reserved prefix"),
    ("send: bad role", lambda s, o: s.send("hi", role="robot"), "role must be"),
    ("steer: empty", lambda s, o: s.steer(""), "text is empty"),
    ("edit: empty", lambda s, o: s.queue.edit("u-mine", ""), "text is empty"),
    ("pause: unknown when", lambda s, o: s.pause("later"), "must be 'after-turn' or 'now'"),
    ("push: built-in type", lambda s, o: s.push(("ai.turn.started", {})), "built-in"),
    ("push: unknown type", lambda s, o: s.push(("x.unknown", {})), "no event type"),
    ("push: huge int", lambda s, o: s.push(("x.any", {"data": 2**70})), "64-bit"),
    ("push: NaN", lambda s, o: s.push(("x.any", {"data": float("nan")})), "cannot represent"),
    ("push: deep", lambda s, o: s.push(("x.any", {"data": _nested(300)})), "nested more than"),
    ("push: surrogate key", lambda s, o: s.push(("x.any", {"data": {"\udc00": 1}})), "lone surrogate"),
    ("push: bytes", lambda s, o: s.push(("x.any", {"data": b"raw"})), "not JSON"),
    ("fork: past the log", lambda s, o: s.fork(at=1000, id="s-fork"), "1000"),
]


def _nested(levels: int) -> object:
    value: object = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(("call", "words"), [case[1:] for case in PY_CORPUS], ids=[case[0] for case in PY_CORPUS])
async def test_every_bad_call_is_a_usage_error_and_writes_nothing(tmp_path: Any, call: Any, words: str) -> None:
    async with LocalRuntime(f"sqlite:///{tmp_path / 'troupe.db'}") as rt:
        session, other = rt.session("p-1", agent=typed_agent), rt.session("p-2", agent=typed_agent)
        await session.send("x", id="u-mine", generate=False)
        await other.send("x", id="u-taken", generate=False)
        before = (await rt.store.last_index("p-1"), await rt.store.last_index("p-2"))
        with pytest.raises(UsageError) as caught:
            await call(session, other)
        assert words in caught.value.message
        assert (await rt.store.last_index("p-1"), await rt.store.last_index("p-2")) == before


async def test_an_id_of_another_session_is_rejected_in_the_python_api_and_writes_nothing(tmp_path: Any) -> None:
    async with LocalRuntime(f"sqlite:///{tmp_path / 'troupe.db'}") as rt:
        session, other = rt.session("p-1", agent=typed_agent), rt.session("p-2", agent=typed_agent)
        await other.send("x", id="u-taken", generate=False)
        await session.send("x", id="u-mine", generate=False)
        before = await rt.store.last_index("p-1")
        receipt = await session.send("hi", id="u-taken")
        assert (receipt.outcome, receipt.reason) == ("rejected", "PARTIAL_DUPLICATE_BATCH")
        assert await rt.store.last_index("p-1") == before
