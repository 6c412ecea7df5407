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
import enum
import inspect
import os
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Coroutine, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, TypeVar

import structlog

from orchestrator.core._json import JsonObject, JsonValue
from orchestrator.core.errors import ConfigError, ModelError
from orchestrator.core.stream import AgentStreamPart
from orchestrator.models.base import CancelSignal, ModelRequest

if TYPE_CHECKING:
    import openai
    from openai import AsyncStream
    from openai.types.chat import ChatCompletionChunk

from orchestrator.models.openai_errors import (
    DEFAULT_RETRIES,
    NO_RETRIES,
    RETRIED_CODES,
    RetrySchedule,
    model_error,
    retry_after,
)
from orchestrator.models.openai_wire import StepAssembler, to_openai_messages, to_openai_tools

__all__ = ["DEFAULT_RETRIES", "NO_RETRIES", "OpenAIChatModel", "RetrySchedule", "to_openai_messages", "to_openai_tools"]

log = structlog.get_logger()

_T = TypeVar("_T")

_RESERVED_SETTINGS: Final = frozenset({"model", "messages", "stream", "tools"})
"""Request fields the adapter owns; a setting may not replace them."""

_PLACEHOLDER_KEY: Final = "not-needed"
"""Sent to a local server (``base_url`` set) when no key is configured: the client insists on one."""


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
                    delay = None if yielded or error.code not in RETRIED_CODES else self._delay(retry, error)
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
        return self.retries.delay(retry, retry_after(getattr(response, "headers", None)))

    async def _attempt(
        self,
        client: openai.AsyncOpenAI,
        params: Mapping[str, Any],
        request: ModelRequest,
        signal: CancelSignal,
        cancelled: asyncio.Future[None],
    ) -> AsyncGenerator[AgentStreamPart, None]:
        """One request of the step and the parts of its response."""
        assembler = StepAssembler(request)
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
            raise model_error(openai, err, self.name, self.base_url, started) from err
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


def _keyword_names(function: Any) -> frozenset[str]:
    """The keywords ``function`` accepts (``*`` when it takes any)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # pragma: no cover - an unintrospectable client
        return frozenset({"*"})
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return frozenset({"*"})
    return frozenset(p.name for p in parameters)
