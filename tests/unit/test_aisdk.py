"""``POST /api/chat`` read by the real AI SDK client (the ``ai`` npm package 6.x, in ``tests/js``).

A uvicorn server runs a LocalRuntime in this event loop; ``node tests/js/read-stream.mjs``
posts to it and assembles the response with ai's own ``parseJsonEventStream`` +
``readUIMessageStream`` (or drives ai's ``AbstractChat`` with ``DefaultChatTransport``: the
class behind ``useChat``). Every assembled message must equal the session's state.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from actors.local import LocalRuntime
from orchestrator.core._pvec import PVec
from orchestrator.core.mutations import ClientView
from orchestrator.core.parts import AgentMessage, DataPart, NestedRun, TextPart, ToolPart
from orchestrator.surfaces.http import MessageStream, create_app, run_output, to_ui_message, to_ui_messages
from orchestrator.surfaces.http.aisdk import Approval, approvals_of
from tests.unit.http_helpers import (
    JS_DIR,
    LiveServer,
    chunks_of,
    ensure_node_modules,
    gate,
    run_node,
    shopper,
    strip_ui,
    user_message,
)

KEY = "test-key"
AUTH = f"Authorization: Bearer {KEY}"


@pytest.fixture(scope="module", autouse=True)
def _node_modules() -> None:
    ensure_node_modules()


@pytest.fixture
async def server() -> AsyncIterator[tuple[LiveServer, LocalRuntime]]:
    async with LocalRuntime("memory://", flush_parts=1) as rt:
        app = create_app(rt, shopper, api_keys=[KEY])
        async with LiveServer(app) as live:
            yield live, rt


def uid() -> str:
    """A fresh message id (ids are unique across the whole store, as useChat's random ids are)."""
    return f"u-{uuid.uuid4().hex[:12]}"


def chat_body(session_id: str, *messages: dict[str, Any], trigger: str = "submit-message") -> str:
    return json.dumps({"id": session_id, "messages": list(messages), "trigger": trigger})


async def post_chat(server: LiveServer, body: str, message: dict[str, Any] | None = None) -> dict[str, Any]:
    args = ["--url", f"{server.url}/api/chat", "--body", body, "--header", AUTH]
    if message is not None:
        args += ["--message", json.dumps(message)]
    result: dict[str, Any] = await run_node(*args)
    return result


async def server_message(rt: LocalRuntime, session_id: str, message_id: str) -> dict[str, Any]:
    """The session's message as a UIMessage (what a client must have assembled)."""
    snapshot = await rt.session(session_id, agent=shopper).state()
    for message in snapshot.state.messages:
        if message.id == message_id:
            return to_ui_message(message, approvals_of(snapshot.state))
    raise AssertionError(f"no message {message_id} in {session_id}")


def types(chunks: list[dict[str, Any]]) -> list[str]:
    return [c["type"] for c in chunks]


def check_framing(chunks: list[dict[str, Any]], *, continued: bool = False) -> None:
    """One start first, one finish last, steps balanced, every text/reasoning part closed.

    A tool call's input chunks come before its output chunks (``continued``: a call the client
    already had may get only its output).
    """
    kinds = types(chunks)
    assert kinds[0] == "start" and kinds.count("start") == 1
    assert kinds[-1] == "finish" and kinds.count("finish") == 1
    depth = 0
    for kind in kinds:
        depth += {"start-step": 1, "finish-step": -1}.get(kind, 0)
        assert depth in (0, 1), kinds
    assert depth == 0
    for prefix in ("text", "reasoning"):
        started = [c["id"] for c in chunks if c["type"] == f"{prefix}-start"]
        ended = [c["id"] for c in chunks if c["type"] == f"{prefix}-end"]
        assert sorted(started) == sorted(ended)
    for call in {c["toolCallId"] for c in chunks if "toolCallId" in c}:
        order = [c["type"] for c in chunks if c.get("toolCallId") == call]
        if continued and "tool-input-start" not in order:
            continue
        assert order[0] == "tool-input-start"
        last_input = max(i for i, k in enumerate(order) if k.startswith("tool-input"))
        first_output = min((i for i, k in enumerate(order) if k.startswith("tool-output")), default=len(order))
        assert last_input < first_output, order


async def test_a_plain_reply(server: tuple[LiveServer, LocalRuntime]) -> None:
    live, rt = server
    sid = f"c-{uuid.uuid4().hex[:8]}"
    result = await post_chat(live, chat_body(sid, user_message(uid(), "plain hello")))
    assert result["headers"]["content-type"].startswith("text/event-stream")
    assert result["headers"]["x-vercel-ai-ui-message-stream"] == "v1"
    chunks = result["chunks"]
    check_framing(chunks)
    assert chunks[0] == {"type": "start", "messageId": "troupe:t1"}
    assert chunks[-1] == {"type": "finish", "finishReason": "stop"}
    assert "reasoning-delta" in types(chunks) and types(chunks).count("text-delta") >= 2  # streamed in pieces
    assert result["errors"] == []
    assert strip_ui(result["message"]) == await server_message(rt, sid, "troupe:t1")
    assert [p["text"] for p in result["message"]["parts"] if p["type"] == "text"] == ["Hello there, friend!"]


async def test_a_tool_call_streams_its_input_then_its_output(server: tuple[LiveServer, LocalRuntime]) -> None:
    live, rt = server
    sid = f"c-{uuid.uuid4().hex[:8]}"
    result = await post_chat(live, chat_body(sid, user_message(uid(), "tool please")))
    chunks = result["chunks"]
    check_framing(chunks)
    assert types(chunks).count("start-step") == 2
    assert "tool-input-delta" in types(chunks)
    tool = next(p for p in result["message"]["parts"] if p["type"] == "tool-add")
    assert tool["state"] == "output-available" and tool["input"] == {"a": 1, "b": 2} and tool["output"] == 3
    assert strip_ui(result["message"]) == await server_message(rt, sid, "troupe:t1")


async def test_a_failing_tool_is_an_output_error(server: tuple[LiveServer, LocalRuntime]) -> None:
    live, rt = server
    sid = f"c-{uuid.uuid4().hex[:8]}"
    result = await post_chat(live, chat_body(sid, user_message(uid(), "fail now")))
    check_framing(result["chunks"])
    tool = next(p for p in result["message"]["parts"] if p["type"] == "tool-boom")
    assert tool["state"] == "output-error"
    assert tool["errorText"] == "boom failed: the warehouse is on fire"
    assert strip_ui(result["message"]) == await server_message(rt, sid, "troupe:t1")


@pytest.mark.parametrize("approved", [True, False])
async def test_an_approval_through_the_ai_sdk_chat(server: tuple[LiveServer, LocalRuntime], approved: bool) -> None:
    """ai's own Chat (useChat's engine): the stream ends at the request; the answer continues it."""
    live, rt = server
    sid = f"c-{uuid.uuid4().hex[:8]}"
    script = [{"send": "buy a mug"}, {"approve": approved, "reason": "too pricey"}]
    result = await run_node(
        "--chat", "--url", f"{live.url}/api/chat", "--id", sid, "--script", json.dumps(script), "--header", AUTH
    )
    assert result["error"] is None and result["errors"] == [] and result["status"] == "ready"
    user, assistant = result["messages"]
    assert assistant["id"] == "troupe:t1"  # one assistant message: the answer continued it
    tool = next(p for p in assistant["parts"] if p["type"] == "tool-buy")
    assert tool["approval"]["approved"] is approved
    if approved:
        assert tool["state"] == "output-available" and tool["output"] == "bought mug"
    else:
        assert tool["state"] == "output-denied"
    snapshot = await rt.session(sid, agent=shopper).state()
    assert [strip_ui(m) for m in result["messages"]] == [strip_ui(m) for m in to_ui_messages(snapshot.state)]
    assert user["id"] == snapshot.state.messages.at(0).id  # the client's id is the input id


async def test_an_approval_answered_with_a_continued_stream(server: tuple[LiveServer, LocalRuntime]) -> None:
    """The same flow by hand: readUIMessageStream continues the message the client holds."""
    live, rt = server
    sid = f"c-{uuid.uuid4().hex[:8]}"
    question = user_message(uid(), "buy one")
    first = await post_chat(live, chat_body(sid, question))
    assert first["chunks"][-1] == {"type": "finish", "finishReason": "tool-calls"}
    message = first["message"]
    tool = next(p for p in message["parts"] if p["type"] == "tool-buy")
    assert tool["state"] == "approval-requested"
    tool["state"] = "approval-responded"
    tool["approval"] = {**tool["approval"], "approved": False, "reason": "no"}
    second = await post_chat(live, chat_body(sid, question, message), message=message)
    check_framing(second["chunks"], continued=True)
    assert second["chunks"][0] == {"type": "start", "messageId": "troupe:t1"}
    assert "tool-input-start" not in types(second["chunks"])  # only what the client did not have
    assert strip_ui(second["message"]) == await server_message(rt, sid, "troupe:t1")
    assert next(p for p in second["message"]["parts"] if p["type"] == "tool-buy")["state"] == "output-denied"


async def test_a_nested_sub_agent_two_levels_deep(server: tuple[LiveServer, LocalRuntime]) -> None:
    live, rt = server
    sid = f"c-{uuid.uuid4().hex[:8]}"
    result = await post_chat(live, chat_body(sid, user_message(uid(), "deep dive")))
    chunks = result["chunks"]
    check_framing(chunks)
    outputs = [c for c in chunks if c["type"] == "tool-output-available"]
    assert outputs[0]["preliminary"] is True and "preliminary" not in outputs[-1]
    tool = next(p for p in result["message"]["parts"] if p["type"] == "tool-delegate_to_researcher")
    assert tool["output"]["status"] == "idle" and tool["output"]["text"] == "Deep: $5."
    nested = tool["output"]["messages"][-1]
    inner = next(p for p in nested["parts"] if p["type"] == "tool-delegate_to_checker")
    assert inner["output"]["text"] == "Yes, $5."
    assert [p["text"] for p in inner["output"]["messages"][-1]["parts"]] == ["Yes, $5."]
    assert strip_ui(result["message"]) == await server_message(rt, sid, "troupe:t1")


async def test_preliminary_outputs_are_throttled() -> None:
    """Without a throttle every change of the nested run is sent; with one, at most one per interval.

    (A change is what one parent write applies: the sub-agent's batches due together go in one.)
    """
    async with LocalRuntime("memory://", flush_parts=1) as rt:
        for throttle in (0.0, 60.0):
            app = create_app(rt, shopper, throttle=throttle)
            async with LiveServer(app) as live, httpx.AsyncClient(base_url=live.url) as client:
                sid, name = f"c-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
                body = {"id": sid, "messages": [user_message(uid(), f"relay {name}")], "trigger": "submit-message"}
                async with client.stream("POST", "/api/chat", json=body) as response:
                    await until_nested_text(rt, sid, "First, ")
                    gate(name).open()
                    chunks = chunks_of("".join([text async for text in response.aiter_text()]))
            preliminary = [c for c in chunks if c.get("preliminary")]
            texts = [c["output"]["text"] for c in preliminary]
            if throttle == 0.0:
                assert len(preliminary) >= 2 and "First, " in texts
                assert texts == sorted(texts, key=len)  # each shows more of the run
                # The run's last text may come in the write that ends the call: then the final
                # output shows it (a host diffs each write as a whole, so no preliminary before it).
                assert all("First, then more.".startswith(text) for text in texts)
            else:
                assert len(preliminary) == 1  # the first is immediate; later ones wait for the interval
            final = [c for c in chunks if c["type"] == "tool-output-available"][-1]
            assert final["output"]["text"] == "First, then more." and "preliminary" not in final


async def until_nested_text(rt: LocalRuntime, session_id: str, text: str) -> None:
    """Wait until the delegate call's nested run shows ``text`` (subscribe, then check after each change)."""
    session = rt.session(session_id, agent=shopper)
    live = await session.live()
    try:

        def shows(view: ClientView) -> bool:
            for message in view.state.messages:
                for part in message.parts:
                    if isinstance(part, ToolPart) and part.agent is not None:
                        if any(text in m.text for m in part.agent.messages):
                            return True
            return False

        await live.wait_for(shows, timeout=5.0)
    finally:
        await live.close()


async def test_a_model_error_is_an_error_chunk_before_finish(server: tuple[LiveServer, LocalRuntime]) -> None:
    live, rt = server
    sid = f"c-{uuid.uuid4().hex[:8]}"
    result = await post_chat(live, chat_body(sid, user_message(uid(), "error please")))
    chunks = result["chunks"]
    check_framing(chunks)
    assert chunks[-2:] == [
        {"type": "error", "errorText": "The model is over capacity"},
        {"type": "finish", "finishReason": "error"},
    ]
    assert result["errors"] == ["The model is over capacity"]  # what useChat's onError gets
    assert strip_ui(result["message"]) == await server_message(rt, sid, "troupe:t1")
    snapshot = await rt.session(sid, agent=shopper).state()
    assert snapshot.state.error is not None and snapshot.state.error.code == "rate_limited"


async def test_captured_bytes_read_from_stdin(server: tuple[LiveServer, LocalRuntime]) -> None:
    """Python captures the raw response; node assembles it from stdin (data parts included)."""
    live, rt = server
    sid = f"c-{uuid.uuid4().hex[:8]}"
    headers = {"Authorization": f"Bearer {KEY}", "content-type": "application/json"}
    async with httpx.AsyncClient(base_url=live.url, headers=headers) as client:
        response = await client.post("/api/chat", content=chat_body(sid, user_message(uid(), "card please")))
    raw = response.content
    assert raw.endswith(b"data: [DONE]\n\n")
    result = await run_node(stdin=raw)
    assert strip_ui(result["message"]) == await server_message(rt, sid, "troupe:t1")
    card = next(p for p in result["message"]["parts"] if p["type"] == "data-card")
    assert card["data"] == {"title": "Mug", "price": 5}


async def test_a_conversation_and_a_regenerate_through_the_ai_sdk_chat(
    server: tuple[LiveServer, LocalRuntime],
) -> None:
    live, rt = server
    sid = f"c-{uuid.uuid4().hex[:8]}"
    script = [{"send": "plain hi"}, {"send": "tool time"}, {"send": "count to three"}, {"regenerate": True}]
    result = await run_node(
        "--chat", "--url", f"{live.url}/api/chat", "--id", sid, "--script", json.dumps(script), "--header", AUTH
    )
    assert result["error"] is None and result["errors"] == []
    snapshot = await rt.session(sid, agent=shopper).state()
    assert len(snapshot.state.messages) == 6
    assert [strip_ui(m) for m in result["messages"]] == [strip_ui(m) for m in to_ui_messages(snapshot.state)]
    assert snapshot.state.last_turn is not None and snapshot.state.last_turn[0] == "t4"  # regenerate = a new turn


def test_the_lockfile_pins_the_ai_package() -> None:
    lock = json.loads((JS_DIR / "package-lock.json").read_text())
    version = lock["packages"]["node_modules/ai"]["version"]
    assert version.startswith("6."), version
    installed = json.loads((JS_DIR / "node_modules" / "ai" / "package.json").read_text())["version"]
    assert installed == version


# -- the translator on its own (no server): throttling, baselines, data parts ----------------------------


def _run(text: str) -> NestedRun:
    return NestedRun(PVec([AgentMessage("n:1", "assistant", (TextPart("n:1:0", text),))]))


def _delegate(agent: NestedRun, state: str = "running", output: Any = None) -> AgentMessage:
    call = ToolPart("c1", "delegate_to_x", {"task": "t"}, state, agent=agent, output=output)  # type: ignore[arg-type]
    return AgentMessage("m", "assistant", (TextPart("m:0", "Asking."), call))


def test_preliminary_outputs_wait_for_the_throttle_interval() -> None:
    stream = MessageStream(throttle=0.1)
    first = stream.sync(_delegate(_run("A")), {}, now=0.0)
    assert [c["type"] for c in first] == [
        "text-start",
        "text-delta",
        "text-end",
        "tool-input-start",
        "tool-input-available",
        "tool-output-available",
    ]
    assert first[-1]["preliminary"] is True and first[-1]["output"]["text"] == "A"
    assert stream.sync(_delegate(_run("AB")), {}, now=0.05) == []  # too soon: it waits
    assert stream.next_due() == 0.1
    due = stream.sync(_delegate(_run("ABC")), {}, now=0.1)
    assert [c["output"]["text"] for c in due] == ["ABC"] and stream.next_due() is None
    final = stream.sync(_delegate(_run("ABC"), "done", "ABC!"), {}, now=0.11)  # the final output is never held
    assert final == [{"type": "tool-output-available", "toolCallId": "c1", "output": run_output(_run("ABC"), "ABC!")}]
    assert stream.sync(_delegate(_run("ABC"), "done", "ABC!"), {}, now=1.0) == []


def test_a_baseline_sends_only_what_is_new() -> None:
    message = AgentMessage(
        "m", "assistant", (TextPart("m:0", "Buying."), ToolPart("c1", "buy", {}, "awaiting-confirmation"))
    )
    approvals = {"c1": Approval("c1:approval", "pending")}
    stream = MessageStream()
    stream.baseline(message, approvals)
    assert stream.sync(message, approvals, 0.0) == []
    answered = AgentMessage(
        "m",
        "assistant",
        (TextPart("m:0", "Buying."), ToolPart("c1", "buy", {}, "done", output="ok"), TextPart("m:2", "Done")),
    )
    assert stream.sync(answered, {"c1": Approval("c1:approval", "approved")}, 0.0) == [
        {"type": "tool-output-available", "toolCallId": "c1", "output": "ok"},
        {"type": "text-start", "id": "m:2"},
        {"type": "text-delta", "id": "m:2", "delta": "Done"},
    ]
    assert stream.close() == [{"type": "text-end", "id": "m:2"}]


def test_a_changed_data_part_is_sent_again_by_id() -> None:
    stream = MessageStream()
    card = AgentMessage("m", "assistant", (DataPart("m:0", "card", {"n": 1}),))
    assert stream.sync(card, {}, 0.0) == [{"type": "data-card", "id": "m:0", "data": {"n": 1}}]
    assert stream.sync(card, {}, 0.0) == []
    changed = AgentMessage("m", "assistant", (DataPart("m:0", "card", {"n": 2}),))
    assert stream.sync(changed, {}, 0.0) == [{"type": "data-card", "id": "m:0", "data": {"n": 2}}]
