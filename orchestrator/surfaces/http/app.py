"""``create_app``: the HTTP surface of a runtime (FastAPI), and ``serve`` (uvicorn).

Bearer-token auth (``api_keys``; none configured: the server is open, so ``serve`` binds
127.0.0.1 by default); a session belongs to the key that created it and is a 404 for any other;
request bodies are limited to ``max_body_bytes`` (413); every error is
``{"error": {"message", "field"}}`` (``orchestrator.surfaces.http.errors``). ``/openapi.json`` describes
every route, ``/docs`` renders it.

This package lives in ``orchestrator/`` but never imports Ray: the runtime arrives as an object,
and ``actors`` is imported for type checking only. It is a shell (it reads the clock for
heartbeats, throttling and ownership timestamps); its translators (``aisdk.MessageStream``,
``chat.ChatTurn``) stay pure and take the time as an argument.

Modules: ``api`` (session routes), ``chat_api`` (AI SDK routes), ``inspect_api`` (the log),
``web`` (the chat and inspector pages), ``sse`` (the resumable mutation stream), ``views`` (the
followed sessions that reads and streams answer from), ``fast`` (the hot reads, answered from
the views before FastAPI's routing), ``chat`` and ``aisdk`` (turn -> UI message chunks),
``models`` (bodies), ``errors`` (error shape, size limit), ``owners`` (keys and ownership),
``deps``, ``state``.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

from orchestrator.core.errors import UsageError
from orchestrator.run.agent import Agent
from orchestrator.surfaces.http.api import session_router
from orchestrator.surfaces.http.chat_api import chat_router
from orchestrator.surfaces.http.deps import Context
from orchestrator.surfaces.http.errors import BodyLimit, install_handlers
from orchestrator.surfaces.http.fast import FastReads
from orchestrator.surfaces.http.inspect_api import inspect_router
from orchestrator.surfaces.http.owners import Keys, Owners
from orchestrator.surfaces.http.views import Views, WriteMark
from orchestrator.surfaces.http.web import web_router

if TYPE_CHECKING:
    from actors.base import BaseRuntime

__all__ = ["SHUTDOWN_GRACE", "TroupeApp", "create_app", "serve"]

SHUTDOWN_GRACE = 3.0
"""Seconds ``serve`` lets requests finish after a stop signal before it cancels them."""

DESCRIPTION = """\
Durable agent sessions over HTTP. A web chat is at `/`, a session's inspector at `/inspect/{id}`.

* **Sessions** — create, send, prompt, steer, stop, retry, queue operations, pause/resume,
  approvals, app events, state, and a resumable SSE stream of mutations
  (`GET /api/sessions/{id}/events`; reconnect with `Last-Event-ID`).
* **Vercel AI SDK** — `POST /api/chat` speaks the UI message stream protocol
  (`x-vercel-ai-ui-message-stream: v1`), so `useChat` with `DefaultChatTransport` works as it is.
* **Inspector** — a session's event log (`GET /api/sessions/{id}/log`), its sub-agent sessions,
  and its state at any index (`GET /api/sessions/{id}/state?through=INDEX`).

Authenticate with `Authorization: Bearer <key>`. Errors are `{"error": {"message", "field"}}`.
A command's rejection is a normal result (HTTP 200, `outcome: "rejected"`).
"""


def create_app(
    runtime: BaseRuntime,
    agent: Agent,
    *,
    api_keys: Sequence[str] = (),
    max_body_bytes: int = 1_000_000,
    title: str = "Troupe",
    heartbeat: float = 15.0,
    throttle: float = 0.1,
    follow_idle: float = 30.0,
) -> FastAPI:
    """The HTTP app for ``runtime`` (started) where every session runs ``agent``.

    Args:
        runtime: a started runtime (``Runtime`` on Ray, ``LocalRuntime`` in process).
        agent: what every session runs; its ``contract`` gives the app events and ``authorize``.
        api_keys: the bearer tokens accepted (none: an open server for local use).
        max_body_bytes: the largest request body accepted (413 beyond).
        title: the OpenAPI title.
        heartbeat: seconds between ``: ping`` comments on idle SSE streams.
        throttle: least seconds between two preliminary outputs of a sub-agent call on ``/api/chat``.
        follow_idle: seconds a session's view stays in this process after its last read or stream
            (reads answer from it: ``orchestrator.surfaces.http.views``).

    Raises:
        UsageError: an argument that cannot work (how to fix it is in the message).
    """
    if not isinstance(agent, Agent):
        raise UsageError(f"create_app(runtime, agent): agent must be an Agent, got {type(agent).__name__}")
    if isinstance(api_keys, str):
        raise UsageError("create_app(api_keys=...) takes a list of keys, not one string")
    if follow_idle <= 0:
        raise UsageError("create_app(follow_idle=...) must be a positive number of seconds")
    if max_body_bytes < 1:
        raise UsageError("create_app(max_body_bytes=...) must be a positive number of bytes")
    try:
        keys = Keys(api_keys)
    except ValueError as error:
        raise UsageError(f"create_app: {error}") from None
    owners = Owners(runtime.store, open_access=not keys.enabled)
    ctx = Context(runtime, agent, keys, owners, heartbeat, throttle, views=Views(idle=follow_idle))
    app = TroupeApp(title=title, description=DESCRIPTION, version="1")
    install_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    app.add_middleware(WriteMark, views=ctx.views)
    app.fast = FastReads(ctx)
    app.own_middleware = len(app.user_middleware)
    app.include_router(session_router(ctx))
    app.include_router(chat_router(ctx))
    app.include_router(inspect_router(ctx))
    app.include_router(web_router())
    app.state.troupe = ctx
    document = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _streams_and_errors_typed(document())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


class TroupeApp(FastAPI):
    """The app: FastAPI, with the hot reads answered first (``fast.FastReads``).

    The fast path stands aside once anyone adds middleware of their own (CORS, say): every
    request then goes through it as through FastAPI.
    """

    fast: FastReads | None = None
    own_middleware = 0
    """How many middleware ``create_app`` added."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer a hot read from its view, or pass the request to FastAPI."""
        fast = self.fast
        if fast is not None and len(self.user_middleware) == self.own_middleware and await fast(scope, send):
            return
        await super().__call__(scope, receive, send)


def _streams_and_errors_typed(doc: dict[str, Any]) -> dict[str, Any]:
    """Say what a streaming route's responses really are.

    FastAPI files every response of a route under the route's media type, so a streaming
    route's JSON errors were documented as ``text/event-stream``: they are ``application/json``
    (``ErrorBody``). The stream's own schema (one event, as OpenAPI 3.1 reads ``schema`` under
    ``text/event-stream``) is the route's (``sse.sse_event_schema``).
    """
    for operations in doc.get("paths", {}).values():
        for operation in operations.values():
            for status, response in operation.get("responses", {}).items():
                content = response.get("content", {})
                stream = content.get("text/event-stream")
                if stream is None:
                    continue
                if not status.startswith("2"):
                    content["application/json"] = content.pop("text/event-stream")
    return doc


async def serve(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, **options: Any) -> None:
    """Serve ``app`` with uvicorn in the running event loop (the one the runtime was started in).

    The first SIGINT or SIGTERM stops it: open event streams end and waiting ``/prompt`` calls
    answer at once, and whatever still runs after ``SHUTDOWN_GRACE`` seconds is cancelled.

    ``options`` go to ``uvicorn.Config`` (e.g. ``log_level="info"``). Bind a public address only
    with ``api_keys`` set: without keys anyone who can reach the port can use every session.
    """
    import uvicorn

    class Server(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            # Live streams and waiting requests answer now: uvicorn waits for every open
            # response to finish before it exits, and an SSE stream never would.
            ctx = getattr(app.state, "troupe", None)
            if isinstance(ctx, Context):
                ctx.closing.set()
            try:
                await super().shutdown(sockets)
            finally:
                if isinstance(ctx, Context):
                    await ctx.views.close()

    options.setdefault("timeout_graceful_shutdown", SHUTDOWN_GRACE)
    config = uvicorn.Config(app, host=host, port=port, lifespan="off", **options)
    await Server(config).serve()
