"""OpenAIChatModel against a real local HTTP server speaking the Chat Completions wire format."""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import pickle
import time
from collections.abc import AsyncIterator
from typing import Final

import pytest
import structlog

from orchestrator.core.errors import ConfigError, ModelError
from orchestrator.core.parts import AgentMessage, DataPart, ReasoningPart, TextPart, ToolPart
from orchestrator.core.stream import AgentStreamPart, Reasoning, StepFinish, TextDelta, ToolCall, ToolInputDelta
from orchestrator.models.base import CancelSignal, ModelAdapter, ModelRequest, ToolSpec
from orchestrator.models.openai import DEFAULT_RETRIES, NO_RETRIES, OpenAIChatModel, RetrySchedule
from orchestrator.models.openai_errors import retry_after
from orchestrator.testing import eventually
from orchestrator.testing_openai import (
    ErrorReply,
    FakeOpenAIServer,
    Reply,
    StreamReply,
    Usage,
    completion_stream,
    reasoning_deltas,
    text_deltas,
    text_stream,
    tool_call_deltas,
)

HELLO = ModelRequest(messages=[AgentMessage("u1", "user", (TextPart("u1:0", "hi"),))])


FAST: Final = RetrySchedule((0.0, 0.0, 0.0))
"""The default schedule's three retries, without the waiting."""


@contextlib.asynccontextmanager
async def served(
    *replies: Reply, retries: RetrySchedule = NO_RETRIES
) -> AsyncIterator[tuple[FakeOpenAIServer, OpenAIChatModel]]:
    """A model talking to a fake server; it does not retry unless ``retries`` says so."""
    with FakeOpenAIServer(replies) as server:
        async with OpenAIChatModel(
            "fake-model", base_url=server.base_url, api_key="test", timeout=5.0, retries=retries
        ) as model:
            yield server, model


async def collect(
    model: OpenAIChatModel,
    request: ModelRequest = HELLO,
    signal: CancelSignal | None = None,
    into: list[AgentStreamPart] | None = None,
) -> list[AgentStreamPart]:
    parts: list[AgentStreamPart] = [] if into is None else into
    async with asyncio.timeout(2.0):
        async for part in model.stream(request, signal or CancelSignal()):
            parts.append(part)
    return parts


# --- streaming ----------------------------------------------------------------------------------


async def test_streams_text_and_ends_with_usage_and_stop() -> None:
    reply = StreamReply(text_stream("Hel", "lo, ", "world", usage=Usage(12, 3)))
    async with served(reply) as (server, model):
        parts = await collect(model)

    assert parts == [TextDelta("Hel"), TextDelta("lo, "), TextDelta("world"), parts[-1]]
    assert parts[-1] == StepFinish(
        usage={"inputTokens": 12, "outputTokens": 3, "totalTokens": 15}, finish_reason="stop"
    )
    body = server.requests[0].json
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["model"] == "fake-model"
    assert "tools" not in body
    assert server.requests[0].headers["authorization"] == "Bearer test"


async def test_streams_tool_call_fragments_then_the_parsed_call() -> None:
    chunks = completion_stream(
        tool_call_deltas(0, "call_1", "search", '{"q":', ' "py', 'thon"}'),
        finish_reason="tool_calls",
        usage=Usage(),
    )
    async with served(StreamReply(chunks)) as (_, model):
        parts = await collect(model)

    assert parts == [
        ToolInputDelta("call_1", '{"q":', name="search"),
        ToolInputDelta("call_1", ' "py'),
        ToolInputDelta("call_1", 'thon"}'),
        ToolCall("call_1", "search", {"q": "python"}),
        StepFinish(usage={"inputTokens": 10, "outputTokens": 5, "totalTokens": 15}, finish_reason="tool-calls"),
    ]


async def test_parallel_tool_calls_complete_in_index_order_and_bad_json_stays_raw() -> None:
    deltas = [
        *text_deltas("Checking both."),
        *tool_call_deltas(0, "call_a", "weather", '{"city": ', '"Oslo"}'),
        *tool_call_deltas(1, "call_b", "clock", '{"tz": '),  # the model never closes the object
        *tool_call_deltas(2, "call_c", "ping"),  # no arguments at all
    ]
    async with served(StreamReply(completion_stream(deltas, finish_reason="tool_calls"))) as (_, model):
        parts = await collect(model)

    assert parts == [
        TextDelta("Checking both."),
        ToolInputDelta("call_a", '{"city": ', name="weather"),
        ToolInputDelta("call_a", '"Oslo"}'),
        ToolInputDelta("call_b", '{"tz": ', name="clock"),
        ToolCall("call_a", "weather", {"city": "Oslo"}),
        ToolCall("call_b", "clock", '{"tz": '),
        ToolCall("call_c", "ping", {}),
        StepFinish(usage=None, finish_reason="tool-calls"),
    ]


async def test_a_missing_tool_call_id_is_derived_from_the_step_position() -> None:
    chunks = completion_stream(tool_call_deltas(0, None, "ping", "{}"), finish_reason="tool_calls")
    request = ModelRequest(messages=HELLO.messages, session_id="s1", turn_index=2, step_index=3)
    async with served(StreamReply(chunks)) as (_, model):
        parts = await collect(model, request)

    assert parts[:2] == [
        ToolInputDelta("call_s1_2_3_0", "{}", name="ping"),
        ToolCall("call_s1_2_3_0", "ping", {}),
    ]


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
async def test_reasoning_becomes_one_part_before_the_text(key: str) -> None:
    deltas = [*reasoning_deltas("The user ", "greets me.", key=key), *text_deltas("Hi", "!")]
    async with served(StreamReply(completion_stream(deltas, usage=Usage(4, 9)))) as (_, model):
        parts = await collect(model)

    assert parts[:3] == [Reasoning("The user greets me."), TextDelta("Hi"), TextDelta("!")]
    assert isinstance(parts[3], StepFinish)
    assert len(parts) == 4


async def test_reasoning_alone_is_emitted_at_the_end() -> None:
    deltas = reasoning_deltas("hmm")
    async with served(StreamReply(completion_stream(deltas, finish_reason="length"))) as (_, model):
        parts = await collect(model)

    assert parts == [Reasoning("hmm"), StepFinish(usage=None, finish_reason="length")]


@pytest.mark.parametrize(
    ("wire", "expected"),
    [("stop", "stop"), ("length", "length"), ("content_filter", "content-filter"), ("eos_token", "other")],
)
async def test_finish_reasons_map_to_the_loop_vocabulary(wire: str, expected: str) -> None:
    async with served(StreamReply(completion_stream(text_deltas("x"), finish_reason=wire))) as (_, model):
        parts = await collect(model)

    assert parts[-1] == StepFinish(usage=None, finish_reason=expected)


# --- the prompt ---------------------------------------------------------------------------------


async def test_the_request_carries_the_converted_history_and_tools() -> None:
    history = [
        AgentMessage("s1", "system", (TextPart("s1:0", "Answer briefly."),)),
        AgentMessage("u1", "user", (TextPart("u1:0", "Find "), TextPart("u1:1", "x"))),
        AgentMessage(
            "a1",
            "assistant",
            (
                TextPart("a1:0", "Let me look."),
                ReasoningPart("a1:1", "search, then fetch"),
                ToolPart("c1", "search", {"q": "x"}, "done", output={"hits": 1}),
                ToolPart("c2", "fetch", {"url": "http://x"}, "error", error="timed out"),
                ToolPart("c3", "run", {"cmd": "ls"}, "running"),
                ToolPart("c4", "rm", {"path": "/"}, "awaiting-confirmation", prompt="Really?"),
                TextPart("a1:6", "Found it."),
            ),
        ),
        AgentMessage("u2", "user", (TextPart("u2:0", "Thanks"),)),
        AgentMessage(
            "a2",
            "assistant",
            (
                ToolPart("c5", "note", {"text": "x"}, "done", output="saved"),
                ToolPart("c6", "mail", {}, "cancelled"),
                DataPart("a2:2", "card", {"title": "x"}),
            ),
        ),
        AgentMessage("a3", "assistant", (ReasoningPart("a3:0", "nothing to say"),)),
    ]
    tools = [
        ToolSpec("search", "Search the web.", {"type": "object", "properties": {"q": {"type": "string"}}}),
        ToolSpec("ping", "Ping."),
    ]
    request = ModelRequest(messages=history, tools=tools, instructions="You are Troupe.")
    async with served(StreamReply(text_stream("ok"))) as (server, model):
        await collect(model, request)

    body = server.requests[0].json
    assert body["messages"] == [
        {"role": "system", "content": "You are Troupe."},
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Find x"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}},
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "fetch", "arguments": '{"url": "http://x"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"hits": 1}'},
        {"role": "tool", "tool_call_id": "c2", "content": "Error: timed out"},
        {"role": "assistant", "content": "Found it."},
        {"role": "user", "content": "Thanks"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c5", "type": "function", "function": {"name": "note", "arguments": '{"text": "x"}'}},
                {"id": "c6", "type": "function", "function": {"name": "mail", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c5", "content": "saved"},
        {"role": "tool", "tool_call_id": "c6", "content": "Cancelled by the user."},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "search",
                "description": "Search the web.",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            },
        },
        {
            "type": "function",
            "function": {
                "name": "ping",
                "description": "Ping.",
                "parameters": {"type": "object", "properties": {}},
            },
        },
    ]


async def test_request_settings_override_model_settings_and_extensions_reach_the_body() -> None:
    with FakeOpenAIServer([StreamReply(text_stream("ok"))]) as server:
        model = OpenAIChatModel(
            "fake-model",
            base_url=server.base_url,
            api_key="test",
            settings={"temperature": 0.2, "max_tokens": 50, "top_k": 40},
        )
        async with model:
            await collect(model, ModelRequest(messages=HELLO.messages, settings={"temperature": 0.9}))

    body = server.requests[0].json
    assert (body["temperature"], body["max_tokens"], body["top_k"]) == (0.9, 50, 40)


async def test_request_settings_may_not_replace_the_messages() -> None:
    async with served() as (server, model):
        with pytest.raises(ModelError) as caught:
            await collect(model, ModelRequest(messages=HELLO.messages, settings={"messages": []}))

    assert caught.value.code == "bad_request"
    assert "messages" in caught.value.message
    assert server.requests == []


# --- errors -------------------------------------------------------------------------------------


async def test_http_429_is_rate_limited() -> None:
    reply = ErrorReply(429, "Rate limit reached for requests", "requests", "rate_limit_exceeded")
    async with served(reply) as (_, model):
        with pytest.raises(ModelError) as caught:
            await collect(model)

    assert caught.value.code == "rate_limited"
    assert "429" in caught.value.message
    assert "Rate limit reached for requests" in caught.value.message


async def test_http_400_is_bad_request_with_the_server_message() -> None:
    reply = ErrorReply(400, "This model's maximum context length is 8192 tokens.", code="context_length_exceeded")
    async with served(reply) as (_, model):
        with pytest.raises(ModelError) as caught:
            await collect(model)

    assert caught.value.code == "bad_request"
    assert "400" in caught.value.message
    assert "maximum context length is 8192 tokens" in caught.value.message


async def test_http_500_is_network() -> None:
    async with served(ErrorReply(500, "The server had an error", "server_error")) as (_, model):
        with pytest.raises(ModelError) as caught:
            await collect(model)

    assert caught.value.code == "network"
    assert "500" in caught.value.message
    assert "The server had an error" in caught.value.message


async def test_an_unreachable_server_is_network() -> None:
    with FakeOpenAIServer() as server:
        base_url = server.base_url
    # The server is gone: its port now refuses connections.
    async with OpenAIChatModel("fake-model", base_url=base_url, api_key="test", timeout=2.0, retries=FAST) as model:
        with pytest.raises(ModelError) as caught:
            await collect(model)

    assert caught.value.code == "network"
    assert base_url in caught.value.message


async def test_a_connection_dropped_mid_stream_is_network() -> None:
    parts: list[AgentStreamPart] = []
    async with served(StreamReply(text_stream("a", "b", "c"), drop_after=2)) as (server, model):
        with pytest.raises(ModelError) as caught:
            await collect(model, into=parts)

    assert caught.value.code == "network"
    assert parts == [TextDelta("a"), TextDelta("b")]
    assert server.requests[0].outcome == "dropped"


async def test_a_stream_that_ends_without_a_finish_reason_is_network() -> None:
    chunks = completion_stream(text_deltas("a"), finish_reason=None)
    async with served(StreamReply(chunks)) as (_, model):
        with pytest.raises(ModelError) as caught:
            await collect(model)

    assert caught.value.code == "network"


# --- retries ------------------------------------------------------------------------------------

RATE_LIMITED = ErrorReply(429, "Rate limit reached for requests", "requests", "rate_limit_exceeded")


async def test_a_rate_limit_before_the_stream_is_retried_until_it_streams() -> None:
    async with served(RATE_LIMITED, RATE_LIMITED, StreamReply(text_stream("ok")), retries=FAST) as (server, model):
        parts = await collect(model)

    assert parts[:1] == [TextDelta("ok")] and isinstance(parts[-1], StepFinish)
    assert [r.outcome for r in server.requests] == ["error", "error", "completed"]
    assert server.requests[0].body == server.requests[2].body  # the same request, sent again


async def test_a_server_that_always_rate_limits_fails_rate_limited_after_the_schedule() -> None:
    async with served(*[RATE_LIMITED] * 4, retries=FAST) as (server, model):
        with pytest.raises(ModelError) as caught:
            await collect(model)

    assert caught.value.code == "rate_limited"
    assert "429" in caught.value.message and "Rate limit reached for requests" in caught.value.message
    assert len(server.requests) == 1 + len(FAST.delays)


async def test_a_5xx_and_a_connection_dropped_before_any_part_are_retried() -> None:
    replies = (
        ErrorReply(503, "Overloaded", "server_error"),
        StreamReply(text_stream("a", "b"), drop_after=0),  # hangs up before the first chunk
        StreamReply(text_stream("a", "b")),
    )
    async with served(*replies, retries=FAST) as (server, model):
        parts = await collect(model)

    assert parts[:2] == [TextDelta("a"), TextDelta("b")]
    assert [r.outcome for r in server.requests] == ["error", "dropped", "completed"]


async def test_an_unreachable_server_fails_network_after_the_schedule() -> None:
    with FakeOpenAIServer() as server:
        base_url = server.base_url
    with structlog.testing.capture_logs() as logs:
        async with OpenAIChatModel("fake-model", base_url=base_url, api_key="t", timeout=2.0, retries=FAST) as model:
            with pytest.raises(ModelError) as caught:
                await collect(model)

    assert caught.value.code == "network"
    assert [(e["event"], e["retry"], e["code"]) for e in logs] == [("model_retry", n, "network") for n in (1, 2, 3)]


async def test_nothing_is_retried_after_a_part_was_yielded() -> None:
    parts: list[AgentStreamPart] = []
    async with served(StreamReply(text_stream("a", "b", "c"), drop_after=2), retries=FAST) as (server, model):
        with pytest.raises(ModelError) as caught:
            await collect(model, into=parts)

    assert caught.value.code == "network"
    assert parts == [TextDelta("a"), TextDelta("b")]
    assert len(server.requests) == 1


async def test_a_bad_request_is_never_retried() -> None:
    async with served(ErrorReply(400, "Unknown parameter: 'foo'."), retries=FAST) as (server, model):
        with pytest.raises(ModelError) as caught:
            await collect(model)

    assert caught.value.code == "bad_request"
    assert len(server.requests) == 1


async def test_retry_after_is_honoured_up_to_its_cap() -> None:
    asks = ErrorReply(429, "slow down", headers={"retry-after": "0.3"})
    schedule = RetrySchedule((0.0,), max_retry_after=5.0)
    async with served(asks, StreamReply(text_stream("ok")), retries=schedule) as (_, model):
        started = time.monotonic()
        await collect(model)
        waited = time.monotonic() - started
    assert waited >= 0.3

    too_long = ErrorReply(429, "slow down", headers={"retry-after": "600"})
    capped = RetrySchedule((0.0,), max_retry_after=0.0)
    async with served(too_long, StreamReply(text_stream("ok")), retries=capped) as (server, model):
        await collect(model)  # within collect's 2 s: the 600 s were capped
    assert len(server.requests) == 2


async def test_a_signal_fired_during_the_backoff_ends_the_step_quietly() -> None:
    signal = CancelSignal()
    parts: list[AgentStreamPart] = []
    async with served(RATE_LIMITED, retries=RetrySchedule((30.0,))) as (server, model):
        task = asyncio.create_task(collect(model, signal=signal, into=parts))
        await eventually(lambda: server.requests and server.requests[0].ended.is_set(), 2.0)
        signal.cancel()
        await asyncio.wait_for(task, 2.0)

    assert parts == []
    assert len(server.requests) == 1


def test_the_default_schedule_and_its_delays() -> None:
    assert DEFAULT_RETRIES.delays == (0.5, 1.0, 2.0)
    assert [DEFAULT_RETRIES.delay(n, None, lambda: 0.0) for n in range(4)] == [0.5, 1.0, 2.0, None]
    assert DEFAULT_RETRIES.delay(0, None, lambda: 1.0) == 0.5 * 0.75  # jitter shortens, never lengthens
    assert DEFAULT_RETRIES.delay(1, 3.0) == 3.0  # a Retry-After replaces the delay ...
    assert DEFAULT_RETRIES.delay(1, 90.0) == DEFAULT_RETRIES.max_retry_after  # ... up to the cap
    assert DEFAULT_RETRIES.delay(2, -1.0) == 0.0
    assert DEFAULT_RETRIES.delay(3, 1.0) is None  # a Retry-After does not add retries
    assert NO_RETRIES.delay(0, None) is None


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({}, None),
        ({"retry-after": "2"}, 2.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "inf"}, None),
    ],
)
def test_retry_after_headers(headers: dict[str, str], seconds: float | None) -> None:
    assert retry_after(headers) == seconds


def test_retry_after_as_an_http_date() -> None:
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    waited = retry_after({"retry-after": date})
    assert waited is not None and 25 < waited <= 30


# --- cancellation -------------------------------------------------------------------------------


def slow_text(count: int, interval: float) -> StreamReply:
    return StreamReply(text_stream(*(f"w{i} " for i in range(count)), usage=Usage()), interval=interval)


async def test_cancelling_after_the_first_delta_ends_the_stream_and_closes_the_connection() -> None:
    signal = CancelSignal()
    parts: list[AgentStreamPart] = []
    async with served(slow_text(40, 0.05)) as (server, model):
        async for part in model.stream(HELLO, signal):
            parts.append(part)
            signal.cancel()
        outcome = await asyncio.to_thread(server.requests[0].wait_ended, 30.0)

    assert parts == [TextDelta("w0 ")]
    # The adapter hung up instead of reading the rest: the server wrote far fewer than its 40 chunks
    # (a count, not a stopwatch, so a loaded machine cannot fail it).
    assert outcome == "disconnected" and server.requests[0].sent < 40


async def test_a_signal_fired_while_awaiting_a_chunk_wins_the_race() -> None:
    signal = CancelSignal()
    parts: list[AgentStreamPart] = []
    async with served(slow_text(3, 1.0)) as (server, model):
        async for part in model.stream(HELLO, signal):
            parts.append(part)
            # Fires once the adapter is waiting for the next chunk, which is a second away.
            asyncio.get_running_loop().call_soon(signal.cancel)
        outcome = await asyncio.to_thread(server.requests[0].wait_ended, 30.0)

    assert parts == [TextDelta("w0 ")]
    # The signal won while the adapter waited for the second chunk, which was never written.
    assert outcome == "disconnected" and server.requests[0].sent == 1


async def test_cancelling_the_consuming_task_closes_the_connection() -> None:
    first = asyncio.Event()

    async def consume(model: OpenAIChatModel) -> None:
        async for _ in model.stream(HELLO, CancelSignal()):
            first.set()

    async with served(slow_text(3, 1.0)) as (server, model):
        task = asyncio.create_task(consume(model))
        await asyncio.wait_for(first.wait(), 2.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        outcome = await asyncio.to_thread(server.requests[0].wait_ended)

    assert outcome == "disconnected"


async def test_a_signal_cancelled_before_the_step_sends_nothing() -> None:
    signal = CancelSignal()
    signal.cancel()
    async with served() as (server, model):
        parts = await collect(model, signal=signal)

    assert parts == []
    assert server.requests == []


# --- configuration ------------------------------------------------------------------------------


def test_without_any_key_or_base_url_the_model_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        OpenAIChatModel("gpt-4o-mini")


def test_a_local_base_url_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    model = OpenAIChatModel("llama3")
    assert model.base_url == "http://127.0.0.1:9/v1"
    assert model.name == "openai:llama3"
    assert OpenAIChatModel("llama3", name="local-llama").name == "local-llama"


def test_settings_may_not_name_fields_the_adapter_owns() -> None:
    with pytest.raises(ConfigError, match="stream"):
        OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", settings={"stream": False})


def test_the_model_is_a_model_adapter_and_pickles() -> None:
    model = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", api_key="k", settings={"temperature": 0})
    adapter: ModelAdapter = model  # the type checker holds it to the port, too
    assert isinstance(adapter, ModelAdapter)
    copy = pickle.loads(pickle.dumps(model))
    assert (copy.name, copy.base_url, copy.settings) == (
        "openai:m",
        "http://127.0.0.1:9/v1",
        {"temperature": 0},
    )


# --- the fake server ----------------------------------------------------------------------------


def test_the_fake_server_fails_when_its_script_is_left_unconsumed() -> None:
    server = FakeOpenAIServer([StreamReply(text_stream("x"))])
    with pytest.raises(AssertionError, match="never requested"), server:
        pass


async def test_the_fake_server_fails_on_a_request_past_its_script() -> None:
    with pytest.raises(AssertionError, match="past the script"):
        async with served() as (_, model):
            with pytest.raises(ModelError) as caught:
                await collect(model)
            assert "no scripted reply left" in caught.value.message
