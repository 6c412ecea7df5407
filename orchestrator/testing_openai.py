"""A scripted, local OpenAI-compatible Chat Completions server for tests and examples.

``FakeOpenAIServer`` is a real HTTP/1.1 server on ``127.0.0.1`` (an ephemeral port, one thread
per connection) that speaks the wire format OpenAI documents: ``POST /v1/chat/completions`` with
``"stream": true`` answers ``text/event-stream`` (chunked) with ``data: <chat.completion.chunk>``
events and a final ``data: [DONE]``. Each request takes the next scripted reply: a
``StreamReply`` (chunks, optionally paced or cut off) or an ``ErrorReply`` (a status and an
OpenAI-style error body). Requests are recorded, so a test can assert on the prompt it sent::

    with FakeOpenAIServer([StreamReply(text_stream("Hel", "lo"))]) as server:
        model = OpenAIChatModel("fake-model", base_url=server.base_url, api_key="test")
        ...
        assert server.requests[0].body["messages"] == [...]

Like the scripted model in ``orchestrator.testing``, the server fails loudly: a request past the
end of the script gets an HTTP 500 and makes the ``with`` block raise, and so does a script left
unconsumed.
"""

from __future__ import annotations

import json
import select
import socket
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Final, Literal, TypeAlias

from orchestrator.core._json import JsonObject, JsonValue

__all__ = [
    "ErrorReply",
    "FakeOpenAIServer",
    "RecordedRequest",
    "Reply",
    "StreamReply",
    "Usage",
    "completion_stream",
    "reasoning_deltas",
    "text_deltas",
    "text_stream",
    "tool_call_deltas",
]

FAKE_MODEL: Final = "fake-model"
"""The model name the chunk builders put in their chunks."""


# --- chunk builders -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage for the final usage chunk."""

    prompt_tokens: int = 10
    """``usage.prompt_tokens``."""
    completion_tokens: int = 5
    """``usage.completion_tokens``."""

    def to_json(self) -> JsonObject:
        """The ``usage`` object of the chunk."""
        total = self.prompt_tokens + self.completion_tokens
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": total,
        }


def text_deltas(*pieces: str) -> list[JsonObject]:
    """``delta`` objects that stream ``pieces`` as content."""
    return [{"content": piece} for piece in pieces]


def reasoning_deltas(*pieces: str, key: str = "reasoning_content") -> list[JsonObject]:
    """``delta`` objects that stream reasoning (``reasoning_content``: vLLM, DeepSeek; ``reasoning``)."""
    return [{key: piece} for piece in pieces]


def tool_call_deltas(index: int, id: str | None, name: str, *fragments: str) -> list[JsonObject]:
    """``delta`` objects for one tool call, as OpenAI streams it.

    The first names the call (``id``, ``type``, ``function.name``, empty ``arguments``); each
    fragment of the argument JSON follows in its own delta. ``id=None`` leaves the id out, as a
    few servers do.
    """
    first: JsonObject = {"index": index, "type": "function", "function": {"name": name, "arguments": ""}}
    if id is not None:
        first["id"] = id
    deltas: list[JsonObject] = [{"tool_calls": [first]}]
    deltas.extend({"tool_calls": [{"index": index, "function": {"arguments": f}}]} for f in fragments)
    return deltas


def completion_stream(
    deltas: Iterable[JsonObject],
    *,
    finish_reason: str | None = "stop",
    usage: Usage | None = None,
    completion_id: str = "chatcmpl-fake",
    model: str = FAKE_MODEL,
    created: int = 1_700_000_000,
) -> list[JsonObject]:
    """The ``chat.completion.chunk`` objects of one streamed completion.

    The first delta also carries ``role: assistant``; a chunk with an empty delta carries the
    ``finish_reason`` (``None`` leaves it out: a stream cut short); with ``usage``, every chunk has
    ``usage: null`` and a final chunk with ``choices: []`` carries the usage.
    """

    def chunk(delta: JsonObject, reason: str | None) -> JsonObject:
        choice: JsonObject = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
        out: JsonObject = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_fake",
            "choices": [choice],
        }
        if usage is not None:
            out["usage"] = None
        return out

    items = [dict(d) for d in deltas] or [{"content": ""}]
    items[0] = {"role": "assistant", **items[0]}
    chunks = [chunk(delta, None) for delta in items]
    if finish_reason is not None:
        chunks.append(chunk({}, finish_reason))
    if usage is not None:
        chunks.append(
            {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": "fp_fake",
                "choices": [],
                "usage": usage.to_json(),
            }
        )
    return chunks


def text_stream(*pieces: str, usage: Usage | None = None) -> list[JsonObject]:
    """A completion that streams ``pieces`` of text and stops (``finish_reason: stop``)."""
    return completion_stream(text_deltas(*pieces), finish_reason="stop", usage=usage)


# --- replies and records ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StreamReply:
    """A ``200 text/event-stream`` answer."""

    chunks: Sequence[JsonObject]
    """The ``chat.completion.chunk`` objects, sent in order (usage-only chunks are left out when
    the request did not set ``stream_options.include_usage``, as OpenAI does)."""
    interval: float = 0.0
    """Seconds to wait before each chunk after the first (the server notices a client that
    hangs up meanwhile)."""
    drop_after: int | None = None
    """Cut the connection after this many chunks (no ``[DONE]``, no end of the chunked body)."""


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """An error status with an OpenAI-style body ``{"error": {"message", "type", "code"}}``."""

    status: int
    """The HTTP status (429, 400, 500, ...)."""
    message: str
    """``error.message``."""
    type: str = "invalid_request_error"
    """``error.type``."""
    code: str | None = None
    """``error.code``."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra response headers (``retry-after``, ...)."""


Reply: TypeAlias = StreamReply | ErrorReply

Outcome: TypeAlias = Literal["completed", "disconnected", "dropped", "error"]


@dataclass(eq=False)
class RecordedRequest:
    """A request the server received, and how its reply ended."""

    method: str
    """``POST``, ..."""
    path: str
    """The request path, e.g. ``/v1/chat/completions``."""
    headers: dict[str, str]
    """The request headers (lower-case names)."""
    body: JsonValue
    """The parsed JSON body."""
    outcome: Outcome | None = None
    """``completed`` (the whole reply was sent), ``disconnected`` (the client hung up first),
    ``dropped`` (the script cut the connection) or ``error`` (an error reply); ``None`` while the
    reply is still being sent."""
    ended: threading.Event = field(default_factory=threading.Event)
    """Set once ``outcome`` is known."""
    sent: int = 0
    """How many chunks of the reply were written before it ended (a cancelled stream sends fewer)."""

    @property
    def json(self) -> JsonObject:
        """The body as a JSON object (raises ``AssertionError`` when it is not one)."""
        assert isinstance(self.body, dict), f"request body is not a JSON object: {self.body!r}"
        return self.body

    def wait_ended(self, timeout: float = 2.0) -> Outcome:
        """Block until the reply ended; its outcome (raises ``AssertionError`` on timeout)."""
        assert self.ended.wait(timeout), f"the reply to {self.path} did not end within {timeout}s"
        assert self.outcome is not None
        return self.outcome

    def _end(self, outcome: Outcome) -> None:
        self.outcome = outcome
        self.ended.set()


# --- the server ---------------------------------------------------------------------------------


class FakeOpenAIServer:
    """A scripted OpenAI-compatible server on ``127.0.0.1``; a context manager (see the module)."""

    def __init__(self, replies: Iterable[Reply] = ()) -> None:
        self._lock = threading.Lock()
        self._replies: list[Reply] = list(replies)
        self._requests: list[RecordedRequest] = []
        self._problems: list[str] = []
        self._connections: set[socket.socket] = set()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    def add(self, *replies: Reply) -> None:
        """Append replies to the script."""
        with self._lock:
            self._replies.extend(replies)

    @property
    def base_url(self) -> str:
        """The API root to give a client, ``http://127.0.0.1:<port>/v1``."""
        assert self._httpd is not None, "FakeOpenAIServer is not running; use it in a with block"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        """The requests received so far, in order."""
        with self._lock:
            return list(self._requests)

    def __enter__(self) -> FakeOpenAIServer:
        self._httpd = _Server(self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, name="fake-openai-server"
        )
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
        if exc_type is not None:
            return
        with self._lock:
            problems = list(self._problems)
            if self._replies:
                problems.append(f"{len(self._replies)} scripted replies were never requested")
        if problems:
            raise AssertionError("FakeOpenAIServer: " + "; ".join(problems))

    def close(self) -> None:
        """Stop serving, hang up on open connections and join every server thread."""
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None:
            return
        httpd.shutdown()
        thread.join()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            try:  # wakes a handler blocked reading the next request of a kept-alive connection
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by its handler
        httpd.server_close()  # joins the connection threads
        self._thread = None

    # Called from connection threads.

    def _record(self, request: RecordedRequest, refusal: ErrorReply | None) -> Reply:
        """Record ``request``; the next scripted reply, or an error when it cannot have one."""
        with self._lock:
            self._requests.append(request)
            if refusal is not None:
                self._problems.append(f"{request.method} {request.path}: {refusal.message}")
                return refusal
            if self._replies:
                return self._replies.pop(0)
            self._problems.append(f"unexpected request {request.method} {request.path} past the script")
            return ErrorReply(500, "FakeOpenAIServer: no scripted reply left", "server_error")

    def _problem(self, text: str) -> None:
        with self._lock:
            self._problems.append(text)

    def _track(self, connection: socket.socket, open_: bool) -> None:
        with self._lock:
            if open_:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)


class _Server(ThreadingHTTPServer):
    # Non-daemon threads, joined by server_close(): nothing outlives the with block.
    daemon_threads = False
    block_on_close = True

    def __init__(self, fake: FakeOpenAIServer) -> None:
        self.fake = fake
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        self.fake._track(request, True)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        self.fake._track(request, False)
        super().shutdown_request(request)

    def handle_error(self, request: object, client_address: object) -> None:
        err = sys.exc_info()[1]
        if isinstance(err, OSError):
            return  # the client went away mid-request: that is its right
        self.fake._problem(f"server error: {err!r}")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        """Stay quiet: tests read ``requests`` instead."""

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        try:
            body: JsonValue = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {k.lower(): v for k, v in self.headers.items()}
        record = RecordedRequest("POST", self.path, headers, body)
        fake = self.server.fake
        refusal: ErrorReply | None = None
        if self.path.rstrip("/") != "/v1/chat/completions":
            refusal = ErrorReply(404, f"FakeOpenAIServer: no route {self.path}", "not_found")
        elif not (isinstance(body, dict) and body.get("stream") is True):
            refusal = ErrorReply(400, "FakeOpenAIServer only answers stream: true requests")
        reply = fake._record(record, refusal)
        if isinstance(reply, ErrorReply):
            self._send_error(reply)
            record._end("error")
        else:
            options = body.get("stream_options") if isinstance(body, dict) else None
            include_usage = isinstance(options, dict) and options.get("include_usage") is True
            record._end(self._send_stream(reply, include_usage, record))

    def _send_error(self, reply: ErrorReply) -> None:
        payload = json.dumps(
            {"error": {"message": reply.message, "type": reply.type, "param": None, "code": reply.code}}
        ).encode()
        self.send_response(reply.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def _send_stream(self, reply: StreamReply, include_usage: bool, record: RecordedRequest) -> Outcome:
        chunks = [c for c in reply.chunks if include_usage or c.get("choices") != [] or "usage" not in c]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        try:
            for sent, chunk in enumerate(chunks):
                if reply.drop_after is not None and sent >= reply.drop_after:
                    self._drop()
                    return "dropped"
                if sent and reply.interval and not self._pause(reply.interval):
                    self.close_connection = True
                    return "disconnected"
                self._write_event(json.dumps(chunk))
                record.sent += 1
            if reply.drop_after is not None and reply.drop_after <= len(chunks):
                self._drop()
                return "dropped"
            self._write_event("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # BrokenPipeError, ConnectionResetError: the client hung up
            self.close_connection = True
            return "disconnected"
        return "completed"

    def _write_event(self, data: str) -> None:
        event = f"data: {data}\n\n".encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))

    def _pause(self, seconds: float) -> bool:
        """Wait ``seconds``; ``False`` as soon as the client closes the connection."""
        readable, _, _ = select.select([self.connection], [], [], seconds)
        if not readable:
            return True
        try:
            peeked: bytes = self.connection.recv(1, socket.MSG_PEEK)
        except OSError:
            return False
        return peeked != b""

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
