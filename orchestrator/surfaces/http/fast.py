"""``FastReads``: the hot reads answered before FastAPI's routing, with the bytes FastAPI would send.

``GET /api/sessions/{id}/state``, ``.../messages``, ``.../info`` and ``GET /api/chat/{id}/messages``
with no query are answered from the session's view (``views``) when everything is in order: a
valid session id, a key that may read the session (or an open server), no request body, and a
view holding every write this server answered. The body is the view's cached one and the headers
are ``JsonBytes``' own, so a client cannot tell the paths apart. Anything else — a missing or wrong
key, an unknown session, a bad id, ``?through=``, a view that lags — goes on to the app, which
answers it (and its errors) as before.

Why: under load FastAPI's routing and dependency solving cost more than the read itself (its
router walks every route per request); this path skips them, nothing else.
"""

from __future__ import annotations

from starlette.types import Scope, Send

from orchestrator.surfaces.http.deps import Context, check_session_id
from orchestrator.surfaces.http.errors import ApiError

__all__ = ["FastReads"]

_KINDS: dict[tuple[str, str], str] = {
    ("sessions", "state"): "state",
    ("sessions", "messages"): "messages",
    ("sessions", "info"): "info",
    ("chat", "messages"): "ui",
}
"""(collection, route) -> the view's body kind (``views.BODIES``)."""


class FastReads:
    """Answers the hot reads of ``ctx``'s sessions from their views (see the module docstring)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.answered = 0
        """Reads answered here (the rest went on to the app)."""

    async def __call__(self, scope: Scope, send: Send) -> bool:
        """Answer the request if it is a hot read in order; ``False``: the app must answer it."""
        if scope["type"] != "http" or scope["method"] != "GET" or scope.get("query_string"):
            return False
        parts = scope["path"].split("/")
        if len(parts) != 5 or parts[0] or parts[1] != "api":
            return False
        kind = _KINDS.get((parts[2], parts[4]))
        if kind is None:
            return False
        session_id = parts[3]
        authorization: bytes | None = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value if authorization is None else authorization
            elif name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
                return False  # a body: the app says what it says of one
        ctx = self.ctx
        owner = ctx.keys.check(_bearer(authorization))
        if owner is None:
            return False
        try:
            check_session_id(session_id)
        except ApiError:
            return False
        try:
            if not await ctx.owners.allowed(session_id, owner):
                return False
            followed = await ctx.views.current(ctx.session(session_id))
        except Exception:  # the app does it again, and answers the error as it answers errors
            return False
        if followed is None:
            return False
        body = followed.body(kind)
        headers = [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        self.answered += 1
        return True


def _bearer(authorization: bytes | None) -> str | None:
    """The token of ``Authorization: Bearer <token>`` (as FastAPI's ``HTTPBearer`` reads it)."""
    if not authorization:
        return None
    scheme, _, token = authorization.decode("latin-1").partition(" ")
    token = token.strip()
    if not scheme or not token or scheme.lower() != "bearer":
        return None
    return token
