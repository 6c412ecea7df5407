"""What the inspector reads: a session's event log, its sub-agent sessions, and a sub-agent's state.

``GET /api/sessions/{id}/log`` pages through the log as stored (index, id, type, time, payload);
``?sub=call-1/call-2`` reads a sub-agent's own log (the session ``{id}/call-1/call-2``), which
belongs to whoever owns ``{id}``. ``GET /api/sessions/{id}/subagents`` lists the sub-agent
sessions under a session. The state as it was at an index is ``GET .../state?through=INDEX``
(``api.py``), with ``sub`` too.
"""

# No ``from __future__ import annotations``: FastAPI reads these signatures at runtime.

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Query

from orchestrator.core.fold import fold_events
from orchestrator.core.ids import child_session_id
from orchestrator.surfaces.http.deps import Context
from orchestrator.surfaces.http.errors import ApiError, ErrorBody
from orchestrator.surfaces.http.state import state_json

if TYPE_CHECKING:
    from actors.client import Session
else:
    Session = Any

__all__ = ["SubPath", "inspect_router", "sub_session_id", "sub_state"]

SubPath = Annotated[
    str | None, Query(description="A sub-agent under this session: its delegate call ids, joined by '/'.")
]


_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "No API key, or a wrong one."},
    404: {"model": ErrorBody, "description": "No such session (or sub-agent session) for this API key."},
    422: {"model": ErrorBody, "description": "A bad `sub`, `after` or `limit`; `field` names it."},
}


def sub_session_id(session_id: str, sub: str | None) -> str:
    """The session id of the sub-agent at ``sub`` (call ids joined by ``/``) under ``session_id``.

    Raises:
        ApiError: 422 when ``sub`` is not a path of call ids.
    """
    if sub is None or sub == "":
        return session_id
    calls = sub.split("/")
    if any(not call or len(call) > 256 for call in calls):
        raise ApiError(422, f"sub {sub!r} must be delegate call ids joined by '/', e.g. call-1-1-2", "sub")
    out = session_id
    for call in calls:
        out = child_session_id(out, call)
    return out


async def sub_state(ctx: Context, session_id: str, sub: str, through: int | None) -> tuple[dict[str, Any], int]:
    """A sub-agent session's state (JSON) through ``through`` (its end by default), folded from its log.

    Raises:
        ApiError: 404 when the sub-agent session has no log.
    """
    target = sub_session_id(session_id, sub)
    store = ctx.runtime.store
    last = await store.last_index(target)
    if last == 0:
        raise ApiError(404, f"there is no sub-agent session {sub!r} under {session_id!r}", "sub")
    events = await store.read(target, after=0, limit=last if through is None else min(through, last))
    return state_json(fold_events(events, None, None)), events[-1].index if events else 0


def inspect_router(ctx: Context) -> APIRouter:
    """The inspector's routes over ``ctx``."""
    router = APIRouter(prefix="/api/sessions", tags=["inspector"], responses=_ERRORS)
    Owned = Annotated[Session, Depends(ctx.owned())]

    @router.get("/{session_id}/log", summary="The session's event log")
    async def get_log(
        session: Owned,
        sub: SubPath = None,
        after: Annotated[int, Query(ge=0, description="Events after this index.")] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 500,
    ) -> dict[str, Any]:
        """``{events: [{index, id, type, at, payload}], last}``: up to ``limit`` events after ``after``."""
        target = sub_session_id(session.id, sub)
        store = ctx.runtime.store
        events = await store.read(target, after=after, limit=limit)
        return {
            "session": target,
            "events": [
                {"index": e.index, "id": e.id, "type": e.type, "at": e.at, "payload": e.payload} for e in events
            ],
            "last": await store.last_index(target),
        }

    @router.get("/{session_id}/subagents", summary="The sub-agent sessions under a session")
    async def get_subagents(session: Owned, sub: SubPath = None) -> dict[str, Any]:
        """``{items: [{sub, session, lastIndex}]}``: every sub-agent session at any depth under it."""
        target = sub_session_id(session.id, sub)
        prefix = child_session_id(target, "")
        rows = await ctx.runtime.store.list_sessions(prefix=prefix, limit=1000)
        root = child_session_id(session.id, "")
        return {
            "items": [
                {"sub": r.session_id[len(root) :], "session": r.session_id, "lastIndex": r.last_index} for r in rows
            ]
        }

    return router
