"""What every route needs: the runtime and agent, the caller's identity, an owned session."""

# No ``from __future__ import annotations``: FastAPI reads the dependencies' signatures at runtime.

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Path
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from orchestrator.core.contract import Operation
from orchestrator.core.events import RESERVED_ID_PREFIX
from orchestrator.run.agent import Agent
from orchestrator.surfaces.http.errors import ApiError
from orchestrator.surfaces.http.models import SESSION_ID_SCHEMA
from orchestrator.surfaces.http.owners import Keys, Owners
from orchestrator.surfaces.http.views import Views

if TYPE_CHECKING:
    from actors.base import BaseRuntime
    from actors.client import Session
else:
    BaseRuntime = Session = Any

__all__ = ["Context", "check_session_id"]

_SESSION_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:@-")

bearer = HTTPBearer(
    auto_error=False,
    description="An API key: `Authorization: Bearer <key>`. Required when the server has keys configured.",
)


def check_session_id(value: str, field: str = "id") -> str:
    """A session id from a client: 1-128 of ``[A-Za-z0-9._:@-]``, not starting with ``troupe:``.

    Raises:
        ApiError: 400 for a reserved id, 422 for one that is not valid.
    """
    if value.startswith(RESERVED_ID_PREFIX):
        raise ApiError(400, f"session id {value!r} starts with {RESERVED_ID_PREFIX!r}, which is Troupe's own", field)
    if not value or len(value) > 128 or not set(value) <= _SESSION_ID_CHARS:
        raise ApiError(
            422,
            f"session id {value!r} is not valid: use 1-128 letters, digits or ._:@- ('/' joins sub-agent sessions)",
            field,
        )
    return value


@dataclass(frozen=True)
class Context:
    """The app's collaborators, shared by its routes."""

    runtime: BaseRuntime
    """Where sessions run."""
    agent: Agent
    """What every session runs."""
    keys: Keys
    """The API keys."""
    owners: Owners
    """Who owns which session."""
    heartbeat: float
    """Seconds between SSE keep-alive comments."""
    throttle: float
    """Least seconds between two preliminary outputs of a delegate call on the chat stream."""
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the server starts to stop (``serve``): open streams end and long waits answer now."""
    views: Views = field(default_factory=Views)
    """The live views of the sessions this server follows: reads and SSE streams answer from them."""

    def session(self, session_id: str) -> Session:
        """A handle on ``session_id``."""
        return self.runtime.session(session_id, agent=self.agent)

    def authorize(self, session_id: str, command: str) -> None:
        """Ask the contract's ``authorize`` hook about a built-in command (403 when it refuses)."""
        contract = self.agent.contract
        if contract is None or contract.authorize is None:
            return
        if not contract.allows(Operation("command", session_id, command=command)):
            raise ApiError(403, f"this session's contract does not allow {command!r} here")

    def caller(self) -> Callable[..., Awaitable[bytes]]:
        """A dependency: the caller's owner hash (401 without a valid key)."""
        keys = self.keys

        async def caller(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> bytes:
            owner = keys.check(credentials.credentials if credentials is not None else None)
            if owner is None:
                message = (
                    "a valid API key is required: send it as 'Authorization: Bearer <key>'"
                    if credentials is None
                    else "the API key is not valid"
                )
                raise ApiError(401, message)
            return owner

        return caller

    def owned(self) -> Callable[..., Awaitable[Session]]:
        """A dependency: the path's session, when the caller owns it (404 otherwise)."""
        caller = self.caller()

        async def owned(
            session_id: Annotated[str, Path(description="The session id.", json_schema_extra=SESSION_ID_SCHEMA)],
            owner: Annotated[bytes, Depends(caller)],
        ) -> Session:
            check_session_id(session_id)
            if not await self.owners.allowed(session_id, owner):
                raise ApiError(404, f"there is no session {session_id!r}; create it with POST /api/sessions", "id")
            return self.session(session_id)

        return owned
