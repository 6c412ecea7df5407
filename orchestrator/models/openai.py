"""The OpenAI-compatible Chat Completions adapter: OpenAI, vLLM, Ollama, LiteLLM, ... via ``base_url``.

``OpenAIChatModel`` sends one streamed ``POST /chat/completions`` per model step and turns the
server's ``chat.completion.chunk`` events into stream parts. The ``openai`` package is an optional
dependency (``pip install 'raytroupe[openai]'``), so it is imported only when a model is built.

Retries: until the first part of a step has been yielded, a rate limit (HTTP 429), a 5xx, or a
connection error or timeout is tried again after each delay of ``RetrySchedule`` (0.5, 1 and
2 s, shortened by up to a quarter at random; a ``Retry-After`` is honoured up to 8 s). When the
schedule is used up the step fails with the last ``ModelError``: ``rate_limited`` or ``network``.
Once a part has been yielded nothing is retried, whatever fails: the run loop has made that part
durable in the log, and a second response would repeat or contradict it. Other errors
(``bad_request``, a malformed stream) are never retried: the same request would fail the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import enum
import inspect
import json
import math
import os
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, TypeVar

import structlog

from orchestrator.core._json import JsonObject, JsonValue
from orchestrator.core.errors import ConfigError, ModelError
from orchestrator.core.parts import AgentMessage, TextPart, ToolPart
from orchestrator.core.stream import AgentStreamPart, Reasoning, StepFinish, TextDelta, ToolCall, ToolInputDelta
from orchestrator.models.base import CancelSignal, ModelRequest, ToolSpec
from orchestrator.models.catalog import ModelLimits

if TYPE_CHECKING:
    import openai
    from openai import AsyncStream
    from openai.types.chat import ChatCompletionChunk
    from openai.types.chat.chat_completion_chunk import ChoiceDelta, ChoiceDeltaToolCall
    from openai.types.completion_usage import CompletionUsage

__all__ = ["DEFAULT_RETRIES", "NO_RETRIES", "OpenAIChatModel", "RetrySchedule", "to_openai_messages", "to_openai_tools"]

log = structlog.get_logger()

_T = TypeVar("_T")

_RESERVED_SETTINGS: Final = frozenset({"model", "messages", "stream", "tools"})
"""Request fields the adapter owns; a setting may not replace them."""

_PLACEHOLDER_KEY: Final = "not-needed"
"""Sent to a local server (``base_url`` set) when no key is configured: the client insists on one."""

_FINISH_REASONS: Final[Mapping[str, str]] = {
    "stop": "stop",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
    "length": "length",
    "content_filter": "content-filter",
}

_REASONING_FIELDS: Final = ("reasoning_content", "reasoning")
"""Where servers put reasoning text: vLLM/DeepSeek ``reasoning_content``, Ollama/newer vLLM ``reasoning``."""


_RETRIED_CODES: Final = frozenset({"rate_limited", "network"})
"""The ``ModelError`` codes worth another try: a 429, a 5xx, a connection error or a timeout."""


@dataclass(frozen=True, slots=True)
class RetrySchedule:
    """How a step whose response has not started yet is tried again."""

    delays: tuple[float, ...] = (0.5, 1.0, 2.0)
    """Seconds before each retry; as many retries as delays."""
    max_retry_after: float = 8.0
    """The longest server ``Retry-After`` honoured; a longer one waits this long. A step that
    waits minutes looks hung; failing with ``rate_limited`` lets the caller decide."""
    jitter: float = 0.25
    """Each delay is shortened by up to this fraction at random, so that sessions rate-limited
    together do not all come back together (a server's ``Retry-After`` is kept as given)."""

    def delay(self, retry: int, retry_after: float | None, draw: Callable[[], float] = random.random) -> float | None:
        """Seconds to wait before retry number ``retry`` (from 0), or ``None`` when none is left.

        Args:
            retry: How many retries were made already.
            retry_after: What the server asked for (``Retry-After``), if it did.
            draw: A number in [0, 1) for the jitter.
        """
        if retry >= len(self.delays):
            return None
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        return self.delays[retry] * (1.0 - self.jitter * draw())


DEFAULT_RETRIES: Final = RetrySchedule()
"""0.5, 1 and 2 s (less jitter), a ``Retry-After`` up to 8 s each: a passing rate limit or
restart is ridden out in a few seconds, and a lasting one fails the step soon enough to tell."""
NO_RETRIES: Final = RetrySchedule(())
"""Fail on the first error."""


def _load_openai() -> Any:
    try:
        import openai
    except ImportError as err:  # pragma: no cover - the dev environment has openai installed
        raise ConfigError("OpenAIChatModel needs the openai package: pip install 'raytroupe[openai]'") from err
    return openai


class OpenAIChatModel:
    """A model behind an OpenAI-compatible Chat Completions endpoint.

    Each ``stream`` call is one streamed request. Text streams as ``TextDelta``; reasoning (a
    vLLM/DeepSeek/Ollama extension) is gathered into one ``Reasoning`` part; tool calls stream as
    ``ToolInputDelta`` and complete as ``ToolCall`` parts (in the order the model numbered them)
    once the response ends; the last part is one ``StepFinish``. When the signal fires, the HTTP
    stream is closed and the iterator ends without a ``StepFinish``.

    The HTTP client is built on first use and bound to the event loop that uses it; call
    ``aclose()`` (or use ``async with``) to release its connections. A model built without an
    injected ``client`` pickles (the client is rebuilt where it lands).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        settings: Mapping[str, JsonValue] | None = None,
        timeout: float = 60.0,
        max_retries: int = 0,
        retries: RetrySchedule = DEFAULT_RETRIES,
        name: str | None = None,
        client: openai.AsyncOpenAI | None = None,
    ) -> None:
        """Configure the model (no connection is made here).

        Args:
            model: The model id the server knows (``gpt-4o-mini``, ``Qwen/Qwen3-8B``, ...).
            base_url: The API root, e.g. ``http://localhost:8000/v1``; defaults to
                ``$OPENAI_BASE_URL``, then OpenAI's own.
            api_key: Defaults to ``$OPENAI_API_KEY``; may be omitted for a local ``base_url``.
            settings: Request fields sent with every step (``temperature``, ``max_tokens``,
                server extensions such as vLLM's ``top_k``); a request's own settings win.
            timeout: Seconds to wait for the connection and for each chunk.
            max_retries: Retries the openai client makes itself within each of this adapter's
                attempts; 0, so that ``retries`` is the one retry policy.
            retries: When a step is tried again before its response starts (see the module).
            name: The stable name usage calibration is kept under; ``openai:<model>`` by default.
            client: An ``openai.AsyncOpenAI`` to use instead of building one (not closed here).

        Raises:
            ConfigError: openai is not installed, no API key is configured, or a setting names
                a field the adapter owns.
        """
        self._openai = _load_openai()
        self.model = model
        self.name: str = name if name is not None else f"openai:{model}"
        self.settings: Mapping[str, JsonValue] = dict(settings or {})
        reserved = sorted(self.settings.keys() & _RESERVED_SETTINGS)
        if reserved:
            raise ConfigError(
                f"OpenAIChatModel settings may not set {', '.join(reserved)}: "
                "the adapter fills them from the request; remove them from settings"
            )
        self.timeout = timeout
        self.max_retries = max_retries
        self.retries = retries
        self._owns_client = client is None
        self._client: openai.AsyncOpenAI | None = client
        self._create_params: frozenset[str] | None = None
        if client is not None:
            self.base_url = str(client.base_url)
            self._api_key = ""
            return
        resolved_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        key = api_key or os.environ.get("OPENAI_API_KEY") or None
        if key is None:
            if resolved_url is None:
                raise ConfigError(
                    "OpenAIChatModel needs an API key: set OPENAI_API_KEY or pass api_key= "
                    "(a local server needs base_url= instead)"
                )
            key = _PLACEHOLDER_KEY
        self._api_key = key
        self.base_url = resolved_url or "https://api.openai.com/v1"

    @property
    def catalog_name(self) -> str | None:
        """The model id, looked up in the model catalog for the default compaction threshold."""
        return self.model

    @property
    def limits(self) -> ModelLimits | None:
        """Own limits: none; the catalog's (``register_model`` adds an id it does not know)."""
        return None

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.model!r}, base_url={self.base_url!r}, name={self.name!r})"

    def __getstate__(self) -> dict[str, Any]:
        if not self._owns_client:
            raise TypeError(
                "an OpenAIChatModel built with client= cannot be pickled; "
                "pass base_url= and api_key= instead so it can rebuild its client"
            )
        state = dict(self.__dict__)
        del state["_openai"]
        state["_client"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._openai = _load_openai()

    async def __aenter__(self) -> OpenAIChatModel:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client this model built (an injected client is left to its owner)."""
        if self._owns_client and self._client is not None:
            client, self._client = self._client, None
            await client.close()

    def _client_for_use(self) -> openai.AsyncOpenAI:
        if self._client is None:
            # max_retries defaults to 0: the client's own retries (2 by default, a Retry-After
            # honoured up to 60 s) would multiply this adapter's (up to 12 requests for one step)
            # and be a second, hidden schedule beside the one `retries` names and tests inject.
            self._client = self._openai.AsyncOpenAI(
                api_key=self._api_key,
                base_url=self.base_url,
                timeout=self.timeout,
                max_retries=self.max_retries,
            )
        client: openai.AsyncOpenAI = self._client
        return client

    def _request_params(self, client: openai.AsyncOpenAI, request: ModelRequest) -> dict[str, Any]:
        settings = {**self.settings, **request.settings}
        reserved = sorted(settings.keys() & _RESERVED_SETTINGS)
        if reserved:
            raise ModelError(
                f"{self.name}: request settings may not set {', '.join(reserved)} "
                "(the adapter fills them from the request)",
                "bad_request",
            )
        if self._create_params is None:
            self._create_params = _keyword_names(client.chat.completions.create)
        known = self._create_params
        params: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai_messages(request.messages, request.instructions),
            "stream": True,
        }
        if request.tools:
            params["tools"] = to_openai_tools(request.tools)
        stream_options: JsonObject = {}
        extra_body: JsonObject = {}
        for key, value in settings.items():
            if key == "stream_options" and isinstance(value, dict):
                stream_options.update(value)
            elif key == "extra_body" and isinstance(value, dict):
                extra_body.update(value)
            elif "*" in known or key in known:
                params[key] = value
            else:
                # A server extension (vLLM's top_k, Ollama's options, ...): the typed client has
                # no keyword for it, so it travels in the body as is.
                extra_body[key] = value
        # Usage arrives only when asked for; the loop needs it to calibrate token estimates.
        params["stream_options"] = {**stream_options, "include_usage": True}
        if extra_body:
            params["extra_body"] = extra_body
        return params

    async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        """Run one model step; see the class docstring for the parts it yields.

        A 429, a 5xx or a connection error before the first part is retried on ``retries``;
        nothing is retried after a part was yielded (see the module docstring).

        Raises:
            ModelError: ``rate_limited`` (HTTP 429), ``bad_request`` (another 4xx, or settings
                that replace a field the adapter owns), ``network`` (unreachable, timed out, a
                5xx, or the connection dropped mid-stream), or no code for anything else.
        """
        if signal.cancelled:
            return
        client = self._client_for_use()
        params = self._request_params(client, request)
        cancelled = asyncio.ensure_future(signal.wait())
        try:
            for retry in range(len(self.retries.delays) + 1):
                yielded = False
                try:
                    async with contextlib.aclosing(self._attempt(client, params, request, signal, cancelled)) as parts:
                        async for part in parts:
                            yielded = True
                            yield part
                    return
                except ModelError as error:
                    delay = None if yielded or error.code not in _RETRIED_CODES else self._delay(retry, error)
                    if delay is None:
                        raise
                    log.warning("model_retry", model=self.name, code=error.code, retry=retry + 1, delay=round(delay, 3))
                if await _unless_cancelled(asyncio.sleep(delay), cancelled) is _CANCELLED:
                    return
        finally:
            cancelled.cancel()

    def _delay(self, retry: int, error: ModelError) -> float | None:
        """Seconds before retrying after ``error`` (its cause may carry a ``Retry-After``)."""
        response = getattr(error.__cause__, "response", None)
        return self.retries.delay(retry, _retry_after(getattr(response, "headers", None)))

    async def _attempt(
        self,
        client: openai.AsyncOpenAI,
        params: Mapping[str, Any],
        request: ModelRequest,
        signal: CancelSignal,
        cancelled: asyncio.Future[None],
    ) -> AsyncGenerator[AgentStreamPart, None]:
        """One request of the step and the parts of its response."""
        assembler = _StepAssembler(request)
        chunks: AsyncStream[ChatCompletionChunk] | None = None
        try:
            created = await _unless_cancelled(
                self._guard(client.chat.completions.create(**params), started=False), cancelled
            )
            if created is _CANCELLED:
                return
            chunks = created
            while True:
                chunk = await _unless_cancelled(self._guard(_next_chunk(chunks), started=True), cancelled)
                if chunk is _CANCELLED:
                    return
                if chunk is None:
                    break
                for part in assembler.feed(chunk):
                    if _fired(signal):
                        return
                    yield part
            if assembler.finish_reason is None:
                raise ModelError(
                    f"{self.name}: the stream from {self.base_url} ended before the model said why it "
                    "stopped (the connection may have dropped)",
                    "network",
                )
            for part in assembler.finish():
                if _fired(signal):
                    return
                yield part
        finally:
            if chunks is not None:
                # Closing a stream that already failed can fail too; the first error is the story.
                with contextlib.suppress(Exception):
                    await chunks.close()

    async def _guard(self, step: Awaitable[_T], *, started: bool) -> _T:
        """``step``'s result, with the openai client's errors turned into ``ModelError``.

        ``started`` says whether the response was already streaming (for the message).
        """
        openai = self._openai
        try:
            return await step
        except openai.OpenAIError as err:
            raise _model_error(openai, err, self.name, self.base_url, started) from err
        except ValueError as err:  # an event whose data is not JSON
            raise ModelError(f"{self.name}: {self.base_url} sent a malformed stream event: {err}") from err


def _fired(signal: CancelSignal) -> bool:
    """Whether the signal fired (a call, so the type checker does not pin the earlier answer)."""
    return signal.cancelled


async def _next_chunk(chunks: AsyncStream[ChatCompletionChunk]) -> ChatCompletionChunk | None:
    try:
        return await chunks.__anext__()
    except StopAsyncIteration:
        return None


class _Cancelled(enum.Enum):
    CANCELLED = enum.auto()


_CANCELLED: Final = _Cancelled.CANCELLED


async def _unless_cancelled(step: Coroutine[Any, Any, _T], cancelled: asyncio.Future[None]) -> _T | _Cancelled:
    """Run ``step`` until it finishes or ``cancelled`` does, whichever comes first.

    A step that loses the race is cancelled and awaited, so whatever it held (a half-read
    response) is released before this returns. A step that finished is never discarded, even
    when the signal fired at the same moment: its result may own a connection.
    """
    if cancelled.done():
        step.close()
        return _CANCELLED
    task = asyncio.ensure_future(step)
    try:
        await asyncio.wait((task, cancelled), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait((task,))
    if task.cancelled():
        return _CANCELLED
    return task.result()


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    """The wait a response asks for, in seconds; ``None`` when it asks for none readable.

    ``retry-after-ms`` (OpenAI's) first, then ``retry-after`` in seconds or as an HTTP date.
    """
    if headers is None:
        return None
    for header, unit in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(header)
        if value is None:
            continue
        try:
            seconds = float(value) * unit
        except ValueError:
            continue
        return seconds if math.isfinite(seconds) else None
    date = headers.get("retry-after")
    when = email.utils.parsedate_tz(date) if date else None
    return None if when is None else email.utils.mktime_tz(when) - time.time()


def _keyword_names(function: Any) -> frozenset[str]:
    """The keywords ``function`` accepts (``*`` when it takes any)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # pragma: no cover - an unintrospectable client
        return frozenset({"*"})
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return frozenset({"*"})
    return frozenset(p.name for p in parameters)


# --- errors -------------------------------------------------------------------------------------


def _model_error(openai: Any, err: Exception, name: str, base_url: str, started: bool) -> ModelError:
    if isinstance(err, openai.APIStatusError):
        status: int = err.status_code
        reason = getattr(err.response, "reason_phrase", "")
        status_line = f"HTTP {status} {reason}" if reason else f"HTTP {status}"
        message = f"{name}: {base_url} answered {status_line}: {_server_message(err)}"
        return ModelError(message, _status_code(status))
    if isinstance(err, openai.APIConnectionError):
        cause = err.__cause__
        detail = f"{type(cause).__name__}: {cause}" if cause is not None and str(cause) else err.message
        if isinstance(err, openai.APITimeoutError):
            what = f"timed out waiting for {base_url}"
        elif started:
            what = f"lost the connection to {base_url} mid-stream"
        else:
            what = f"could not reach {base_url}"
        return ModelError(f"{name}: {what} ({detail})", "network")
    if isinstance(err, openai.APIError):
        # An error event inside a 200 stream; LiteLLM-style bodies carry the upstream status.
        status_text = str(err.code) if err.code is not None else ""
        code = _status_code(int(status_text)) if status_text.isdigit() else "network"
        return ModelError(f"{name}: {base_url} reported an error mid-stream: {_server_message(err)}", code)
    return ModelError(f"{name}: {type(err).__name__}: {err}")


def _status_code(status: int) -> str:
    """The SessionError code for an HTTP status: 429 and other 4xx are final, the rest transient."""
    if status == 429:
        return "rate_limited"
    return "bad_request" if 400 <= status < 500 else "network"


def _server_message(err: Any) -> str:
    body = err.body
    if isinstance(body, Mapping):
        message = body.get("message")
        if isinstance(message, str) and message:
            return message
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    return str(err.message)


# --- the prompt ---------------------------------------------------------------------------------


def to_openai_messages(messages: Sequence[AgentMessage], instructions: str | None = None) -> list[JsonObject]:
    """The Chat Completions ``messages`` for a conversation.

    Tool calls that are still open (``running``, ``awaiting-confirmation``) are left out with
    their results: the API rejects a call without a result. Reasoning, data and compaction parts
    never enter the prompt; a message with nothing left is omitted.
    """
    out: list[JsonObject] = []
    if instructions:
        out.append({"role": "system", "content": instructions})
    for message in messages:
        if message.role == "assistant":
            out.extend(_assistant_messages(message))
        else:
            text = message.text
            if text:
                out.append({"role": message.role, "content": text})
    return out


def _assistant_messages(message: AgentMessage) -> list[JsonObject]:
    out: list[JsonObject] = []
    text: list[str] = []
    calls: list[ToolPart] = []

    def flush() -> None:
        if not text and not calls:
            return
        entry: JsonObject = {"role": "assistant", "content": "".join(text) if text else None}
        if calls:
            entry["tool_calls"] = [_tool_call(call) for call in calls]
        out.append(entry)
        out.extend({"role": "tool", "tool_call_id": call.id, "content": _tool_result(call)} for call in calls)
        text.clear()
        calls.clear()

    for part in message.parts:
        if isinstance(part, TextPart):
            if calls:  # text after tool calls answers their results: a new assistant message
                flush()
            if part.text:
                text.append(part.text)
        elif isinstance(part, ToolPart) and not part.is_open:
            calls.append(part)
    flush()
    return out


def _tool_call(call: ToolPart) -> JsonObject:
    arguments = call.input if call.input is not None else {}
    function: JsonObject = {"name": call.name, "arguments": json.dumps(arguments)}
    return {"id": call.id, "type": "function", "function": function}


def _tool_result(call: ToolPart) -> str:
    if call.state == "done":
        return call.output if isinstance(call.output, str) else json.dumps(call.output)
    if call.state == "error":
        return f"Error: {call.error or 'the tool failed'}"
    return call.error or "Cancelled by the user."


def to_openai_tools(tools: Sequence[ToolSpec]) -> list[JsonObject]:
    """The Chat Completions ``tools`` for tool specs."""
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": dict(t.parameters)},
        }
        for t in tools
    ]


# --- the response -------------------------------------------------------------------------------


@dataclass(slots=True)
class _PendingCall:
    """A tool call while its fragments arrive."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)
    streamed: int = 0
    """How many argument fragments were already sent as ``ToolInputDelta``."""


class _StepAssembler:
    """Turns chunks into parts; keeps what completes only at the end (reasoning, tool calls)."""

    def __init__(self, request: ModelRequest) -> None:
        self._request = request
        self._reasoning: list[str] = []
        self._calls: dict[int, _PendingCall] = {}
        self._last_index: int | None = None
        self.finish_reason: str | None = None
        self._usage: CompletionUsage | None = None

    def feed(self, chunk: ChatCompletionChunk) -> list[AgentStreamPart]:
        out: list[AgentStreamPart] = []
        if chunk.usage is not None:
            self._usage = chunk.usage
        for choice in chunk.choices or ():
            if choice.index != 0:  # n > 1: the step is the first choice
                continue
            if choice.delta is not None:
                self._feed_delta(choice.delta, out)
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
        return out

    def _feed_delta(self, delta: ChoiceDelta, out: list[AgentStreamPart]) -> None:
        # Servers that send both names repeat the same text; take the first one present.
        for key in _REASONING_FIELDS:
            reasoning = getattr(delta, key, None)
            if isinstance(reasoning, str) and reasoning:
                self._reasoning.append(reasoning)
                break
        for text in (delta.content, delta.refusal):
            if text:
                self._flush_reasoning(out)
                out.append(TextDelta(text))
        for fragment in delta.tool_calls or ():
            self._flush_reasoning(out)
            self._feed_tool_fragment(fragment, out)

    def _flush_reasoning(self, out: list[AgentStreamPart]) -> None:
        if self._reasoning:
            out.append(Reasoning("".join(self._reasoning)))
            self._reasoning.clear()

    def _feed_tool_fragment(self, fragment: ChoiceDeltaToolCall, out: list[AgentStreamPart]) -> None:
        index = self._index_of(fragment)
        call = self._calls.get(index)
        if call is None:
            call = self._calls[index] = _PendingCall(index)
        self._last_index = index
        # Some servers repeat the id and the whole name on every fragment: the first one counts.
        if fragment.id and call.id is None:
            call.id = fragment.id
        function = fragment.function
        if function is not None:
            if function.name and call.name is None:
                call.name = function.name
            if function.arguments:
                call.arguments.append(function.arguments)
        if call.name is not None and call.streamed < len(call.arguments):
            first = call.streamed == 0
            delta = "".join(call.arguments[call.streamed :])
            call.streamed = len(call.arguments)
            out.append(ToolInputDelta(self._id_of(call), delta, name=call.name if first else None))

    def _index_of(self, fragment: ChoiceDeltaToolCall) -> int:
        index = getattr(fragment, "index", None)
        if isinstance(index, int):
            return index
        # No index (a few servers): a new id starts a call, anything else continues the last one.
        known_ids = {c.id for c in self._calls.values()}
        if self._last_index is None or (fragment.id and fragment.id not in known_ids):
            return max(self._calls, default=-1) + 1
        return self._last_index

    def _id_of(self, call: _PendingCall) -> str:
        if call.id is None:
            r = self._request
            call.id = f"call_{r.session_id}_{r.turn_index}_{r.step_index}_{call.index}"
        return call.id

    def finish(self) -> list[AgentStreamPart]:
        out: list[AgentStreamPart] = []
        self._flush_reasoning(out)
        for index in sorted(self._calls):
            call = self._calls[index]
            if call.name is None and not call.arguments:
                continue  # an empty fragment, not a call
            arguments = "".join(call.arguments)
            out.append(ToolCall(self._id_of(call), call.name or "", _parse_arguments(arguments)))
        reason = _FINISH_REASONS.get(self.finish_reason or "", "other")
        out.append(StepFinish(usage=_usage(self._usage), finish_reason=reason))
        return out


def _parse_arguments(arguments: str) -> JsonValue:
    """The call's input; the raw text when it is not JSON (the loop's validation tells the model)."""
    if not arguments.strip():
        return {}
    try:
        value: JsonValue = json.loads(arguments)
    except ValueError:
        return arguments
    return value


def _usage(usage: CompletionUsage | None) -> JsonObject | None:
    if usage is None:
        return None
    prompt = _int(getattr(usage, "prompt_tokens", None))
    completion = _int(getattr(usage, "completion_tokens", None))
    total = getattr(usage, "total_tokens", None)
    out: JsonObject = {
        "inputTokens": prompt,
        "outputTokens": completion,
        "totalTokens": total if isinstance(total, int) else prompt + completion,
    }
    reasoning = getattr(getattr(usage, "completion_tokens_details", None), "reasoning_tokens", None)
    if isinstance(reasoning, int):
        out["reasoningTokens"] = reasoning
    cached = getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", None)
    if isinstance(cached, int):
        out["cachedInputTokens"] = cached
    return out


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0
