"""HTTP errors: one JSON shape for every failure, and the request size limit.

Every error response is ``{"error": {"message": ..., "field": ...}}``: ``field`` names the
offending part of the request (``text``, ``events[0].type``, ``body``; ``null`` when no single
field is at fault) and ``message`` says what is wrong and how to fix it. Bad input is always a
4xx, never a 500:

- 400: a reserved name (an ``ai.*`` event type, a ``troupe:`` id) or a ``UsageError``;
- 401: no or a wrong API key; 403: the contract's ``authorize`` hook refused;
- 404: no such session *for this key* (another key's session is indistinguishable from none);
- 409: the session id, or an input/command/event id, is already used; 413: the body is larger than ``max_body_bytes``;
- 422: a body that does not validate (pydantic errors and ``ParseError`` name the field).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestrator.core._json import MAX_JSON_DEPTH
from orchestrator.core.errors import ParseError, PartialDuplicateBatch, UsageError

__all__ = [
    "NOT_STORABLE",
    "RESERVED",
    "ApiError",
    "BodyLimit",
    "ErrorBody",
    "ErrorDetail",
    "error_response",
    "install_handlers",
]

RESERVED = "reserved"
"""The pydantic error type of a reserved name (such errors are a 400, not a 422)."""
NOT_STORABLE = "not_storable"
"""The pydantic error type of a value the log cannot hold; its context names the field (``events[0].payload.n``)."""


class ErrorDetail(BaseModel):
    """What went wrong."""

    model_config = ConfigDict(frozen=True)

    message: str = Field(description="What is wrong and how to fix it.")
    field: str | None = Field(default=None, description="The offending request field (dotted, `[i]` for items).")


class ErrorBody(BaseModel):
    """Every error response."""

    model_config = ConfigDict(
        frozen=True,
        json_schema_extra={"examples": [{"error": {"message": "text must not be empty", "field": "text"}}]},
    )

    error: ErrorDetail
    receipt: dict[str, Any] | None = Field(
        default=None,
        description="Only on a 409 for a reused input or command id: the command's receipt "
        '(`{commandId, outcome: "rejected", reason}`); absent otherwise.',
    )


class ApiError(Exception):
    """An error response: ``status``, ``message``, the offending ``field`` and, for a refused command, its receipt."""

    def __init__(
        self, status: int, message: str, field: str | None = None, receipt: dict[str, Any] | None = None
    ) -> None:
        super().__init__(status, message, field, receipt)
        self.status = status
        self.message = message
        self.field = field
        self.receipt = receipt


def error_response(
    status: int,
    message: str,
    field: str | None = None,
    receipt: dict[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """The JSON error response (``receipt`` only when a command was refused: a 409)."""
    body: dict[str, Any] = {"error": {"message": message, "field": field}}
    if receipt is not None:
        body["receipt"] = receipt
    return JSONResponse(body, status_code=status, headers=headers or None)


def duplicate_message(event_id: str) -> str:
    """What to say when a client's id is taken (without saying by whom)."""
    return f"the id {event_id!r} is already used; ids are unique across the server, so choose a fresh one"


def field_path(loc: Sequence[Any]) -> str:
    """A pydantic error location as a field path (``("body", "events", 0, "type")`` -> ``events[0].type``)."""
    parts = list(loc)
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "body"


def _validation_response(error: RequestValidationError) -> JSONResponse:
    problems = list(error.errors())
    if not problems:
        return error_response(422, "the request is not valid", "body")
    reserved = [p for p in problems if p.get("type") == RESERVED]
    first = reserved[0] if reserved else problems[0]
    field = field_path(first.get("loc", ()))
    kind = first.get("type")
    if kind == "json_invalid":
        message = f"the body is not valid JSON ({first.get('ctx', {}).get('error', 'parse error')}); send a JSON object"
        field = "body"
    elif kind == "missing":
        message = f"{field} is required"
    elif kind == NOT_STORABLE:
        field = str(first.get("ctx", {}).get("field", field))
        message = str(first.get("msg", field))
    elif kind == "extra_forbidden":
        message = f"{field} is not a field of this request; remove it or fix its spelling"
    else:
        message = f"{field}: {first.get('msg', 'invalid')}"
    return error_response(400 if reserved else 422, message, field)


def _unreadable_body(cause: BaseException | None) -> str | None:
    """What made a JSON body unreadable, when ``json.loads`` failed on something other than syntax."""
    if isinstance(cause, UnicodeDecodeError):
        return (
            f"the body is not valid UTF-8 (byte 0x{cause.object[cause.start]:02x} at offset {cause.start}); "
            "send JSON encoded as UTF-8"
        )
    if isinstance(cause, RecursionError):
        return f"the body is nested too deeply to parse; JSON values may nest at most {MAX_JSON_DEPTH} levels"
    return None


def install_handlers(app: FastAPI) -> None:
    """Turn every error into the JSON shape above."""

    async def on_api_error(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, ApiError)
        headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else {}
        return error_response(error.status, error.message, error.field, error.receipt, headers)

    async def on_validation(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, RequestValidationError)
        return _validation_response(error)

    async def on_parse(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, ParseError)
        return error_response(422, error.message, error.field or "body")

    async def on_usage(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, UsageError)
        return error_response(400, error.message)

    async def on_duplicate(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, PartialDuplicateBatch)
        # Never echo the store's message: it names the session that holds the id (another key's).
        return error_response(409, duplicate_message(error.event_id))

    async def on_http(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, StarletteHTTPException)
        unreadable = _unreadable_body(error.__cause__)
        if unreadable is not None:  # FastAPI's "There was an error parsing the body", said exactly
            return error_response(422, unreadable, "body")
        field = "body" if error.status_code == 413 else None
        # Keep the exception's headers: a 405 says which methods the path allows (``Allow``).
        return error_response(error.status_code, str(error.detail), field, headers=error.headers)

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(PartialDuplicateBatch, on_duplicate)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(ParseError, on_parse)
    app.add_exception_handler(UsageError, on_usage)
    app.add_exception_handler(StarletteHTTPException, on_http)


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` gets a 413 before the app reads it all.

    A declared ``Content-Length`` is checked up front; a chunked body is counted as it arrives.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        """Wrap ``app``."""
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check, then pass on."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await self._reject(scope, receive, send, "Content-Length is not a number", 400)
                    return
                if declared > limit:
                    await self._reject(scope, receive, send, self._too_large(), 413)
                    return
        received = 0
        started = False

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _TooLarge(self._too_large())
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except _TooLarge:  # read outside a route (the app's handlers answer it inside one)
            if started:
                raise
            await error_response(413, self._too_large(), "body")(scope, receive, send)

    def _too_large(self) -> str:
        return f"the request body is larger than {self.max_bytes} bytes; send less (a long text in several messages)"

    async def _reject(self, scope: Scope, receive: Receive, send: Send, message: str, status: int) -> None:
        await error_response(status, message, "body")(scope, receive, send)


class _TooLarge(StarletteHTTPException):
    """The body grew past the limit while it was read (an HTTP exception, so routes re-raise it)."""

    def __init__(self, message: str) -> None:
        super().__init__(413, message)
