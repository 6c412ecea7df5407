"""The session API: ``/api/sessions`` and ``/api/sessions/{id}/...`` (JSON and one SSE stream).

Every command answers with a receipt ``{commandId, outcome, reason?}``; a rejection is HTTP 200
with ``outcome: "rejected"`` (a normal result). Commands carry ids, so a client that retries a
request after a network failure (same ``id`` / ``commandId``) gets the original receipt back.
"""

# No ``from __future__ import annotations`` here: FastAPI reads these signatures at runtime, and
# the dependencies are closures over the app's context.

import asyncio
import uuid
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Body, Depends, Header, Query, Response

from orchestrator.core.aistate import Receipt
from orchestrator.core.errors import ParseError, UsageError
from orchestrator.core.events import Event
from orchestrator.core.wire import message_to_wire
from orchestrator.surfaces.http.deps import Context, check_session_id
from orchestrator.surfaces.http.errors import ApiError, ErrorBody, duplicate_message
from orchestrator.surfaces.http.inspect_api import SubPath, sub_state
from orchestrator.surfaces.http.models import (
    CreateSession,
    EditRequest,
    EventsPushed,
    ForkRequest,
    MessageList,
    MoveRequest,
    PauseRequest,
    PromptRequest,
    PromptResult,
    PushRequest,
    QueueRequest,
    ReceiptBody,
    ResetRequest,
    RespondRequest,
    RetryRequest,
    SendNowRequest,
    SendRequest,
    SessionCreated,
    SessionForked,
    SessionList,
    SessionRow,
    StateBody,
    SteerRequest,
    StopRequest,
    StopResult,
)
from orchestrator.surfaces.http.sse import EventStream, sse_event_schema
from orchestrator.surfaces.http.state import state_json
from orchestrator.surfaces.http.views import JsonBytes, session_events

if TYPE_CHECKING:
    from actors.client import Session
else:
    Session = Any

__all__ = ["session_router"]

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "A reserved name (`ai.*` event type, `troupe:` id) or a bad request."},
    401: {"model": ErrorBody, "description": "No API key, or a wrong one."},
    404: {"model": ErrorBody, "description": "No such session for this API key."},
    413: {"model": ErrorBody, "description": "The body is too large."},
    422: {"model": ErrorBody, "description": "The body does not validate; `field` names the problem."},
}

_COMMAND: dict[int | str, dict[str, Any]] = {
    403: {"model": ErrorBody, "description": "The contract's `authorize` hook refused the command."},
    409: {
        "model": ErrorBody,
        "description": "The id is already used (in another session, or here with other content); "
        "`receipt` is the rejection.",
    },
}
"""What every command may answer besides the router's errors."""

SSE_EXAMPLE = (
    'event: snapshot\nid: 3\ndata: {"index":3,"state":{"messages":[],"status":"idle"}}\n\n'
    'event: mutations\nid: 4\ndata: {"index":4,"mutations":[{"type":"status","path":[],"status":"streaming",'
    '"index":4}]}\n\n'
    ": ping\n\n"
)


def receipt_body(receipt: Receipt | None) -> ReceiptBody | None:
    """A receipt on the wire."""
    if receipt is None:
        return None
    return ReceiptBody(command_id=receipt.command_id, outcome=receipt.outcome, reason=receipt.reason)


def _receipt(receipt: Receipt | None) -> ReceiptBody:
    if receipt is not None and receipt.reason == "PARTIAL_DUPLICATE_BATCH":
        raise _reused(receipt)
    body = receipt_body(receipt)
    if body is None:  # every command but stop writes one
        raise ApiError(500, "the command produced no receipt")
    return body


def _reused(receipt: Receipt) -> ApiError:
    """The 409 for an id used before (in another session, or here with other content), with the receipt."""
    body = receipt_body(receipt)
    assert body is not None
    return ApiError(409, duplicate_message(receipt.command_id), "id", body.model_dump(mode="json", by_alias=True))


def session_router(ctx: Context) -> APIRouter:
    """The session routes over ``ctx``."""
    router = APIRouter(prefix="/api/sessions", tags=["sessions"], responses=_ERRORS)
    caller = ctx.caller()
    owned = ctx.owned()
    Caller = Annotated[bytes, Depends(caller)]
    Owned = Annotated[Session, Depends(owned)]

    @router.post(
        "",
        status_code=201,
        response_model=SessionCreated,
        summary="Create a session",
        responses={
            200: {"model": SessionCreated, "description": "The caller already owned it (idempotent)."},
            409: {"model": ErrorBody, "description": "The id is taken."},
        },
    )
    async def create_session(
        response: Response, owner: Caller, body: Annotated[CreateSession | None, Body()] = None
    ) -> SessionCreated:
        """Create a session owned by the caller's key (``id`` defaults to a fresh one)."""
        session_id = check_session_id(body.id) if body is not None and body.id is not None else f"s-{uuid.uuid4().hex}"
        outcome = await ctx.owners.claim(session_id, owner)
        if outcome == "taken":
            raise ApiError(409, f"session id {session_id!r} is taken; choose another", "id")
        if outcome == "exists":
            response.status_code = 200
        return SessionCreated(id=session_id)

    @router.get("", response_model=SessionList, summary="List the caller's sessions")
    async def list_sessions(
        owner: Caller,
        after: Annotated[str | None, Query(description="The last id of the previous page.")] = None,
        limit: Annotated[int, Query(ge=1, le=100)] = 50,
    ) -> SessionList:
        """The caller's sessions in id order (keyset pagination: pass ``next`` as ``after``)."""
        rows = await ctx.owners.sessions(owner, after, limit + 1)
        page = rows[:limit]
        return SessionList(
            items=[SessionRow(id=r.id, created_at=r.created_at) for r in page],
            next=page[-1].id if len(rows) > limit else None,
        )

    # -- commands -----------------------------------------------------------------------------------

    @router.post("/{session_id}/messages", response_model=ReceiptBody, summary="Send an input", responses=_COMMAND)
    async def send(session: Owned, body: SendRequest) -> ReceiptBody:
        """Put an input in the durable inbox; it is admitted one at a time (idempotent by ``id``)."""
        ctx.authorize(session.id, "send")
        return _receipt(await session.send(body.text, id=body.id, role=body.role, generate=body.generate))

    @router.post(
        "/{session_id}/prompt",
        response_model=PromptResult,
        summary="Send a user message (and wait for its turn)",
        responses={
            **_COMMAND,
            202: {
                "model": PromptResult,
                "description": "`wait` timed out (or the server is stopping): the turn is still running.",
            },
        },
    )
    async def prompt(session: Owned, body: PromptRequest, response: Response) -> PromptResult:
        """Send a user message; with ``wait``, respond once its turn has ended."""
        ctx.authorize(session.id, "send")
        input_id = body.id or f"msg-{uuid.uuid4().hex}"
        if not body.wait:
            receipt = await session.send(body.text, id=input_id)
            return PromptResult(input_id=input_id, receipt=_receipt(receipt))
        turn = await session.prompt(body.text, id=input_id)
        if turn.receipt is not None and turn.receipt.outcome == "rejected":
            # Only a reused id rejects an input (in another session, or here with other text):
            # its turn is not this request's to wait for or to report.
            raise _reused(turn.receipt)
        closing = asyncio.ensure_future(ctx.closing.wait())  # the server stops: answer now
        try:
            racing: set[asyncio.Future[Any]] = {turn.finished, closing}
            await asyncio.wait(racing, timeout=body.timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closing.cancel()
        if not turn.finished.done():
            turn.finished.cancel()
            response.status_code = 202
            return PromptResult(input_id=input_id, receipt=receipt_body(turn.receipt))
        result = turn.finished.result()
        return PromptResult(
            input_id=input_id,
            receipt=receipt_body(turn.receipt),
            success=result.success,
            outcome=result.outcome,
            text=result.text,
            error=result.error,
            turn_id=result.turn_id or None,
        )

    @router.post("/{session_id}/stop", response_model=StopResult, summary="Stop the active turn", responses=_COMMAND)
    async def stop(session: Owned, body: Annotated[StopRequest | None, Body()] = None) -> StopResult:
        """End the turn ``turnId`` (default: the active one) now (``receipt`` is null when none was active)."""
        ctx.authorize(session.id, "stop")
        request = body or StopRequest()
        result = await session.stop(turn_id=request.turn_id, cancel_queued=request.cancel_queued, id=request.command_id)
        return StopResult(
            receipt=receipt_body(result.receipt), cancelled_queued_prompts=result.cancelled_queued_prompts
        )

    @router.post("/{session_id}/retry", response_model=ReceiptBody, summary="Retry", responses=_COMMAND)
    async def retry(session: Owned, body: Annotated[RetryRequest | None, Body()] = None) -> ReceiptBody:
        """Resume from the last finished tool call (``nothing-to-retry`` when there is no user input)."""
        ctx.authorize(session.id, "retry")
        request = body or RetryRequest()
        return _receipt(await session.retry(turn_id=request.turn_id, id=request.command_id))

    @router.post(
        "/{session_id}/reset", response_model=ReceiptBody, summary="Start a new conversation", responses=_COMMAND
    )
    async def reset(session: Owned, body: Annotated[ResetRequest | None, Body()] = None) -> ReceiptBody:
        """Stop the active turn, then start a new conversation.

        Messages, queue and approvals start empty; the log keeps everything (``/fork`` still
        reaches it). Idempotent by ``commandId``.
        """
        ctx.authorize(session.id, "reset")
        return _receipt(await session.reset(id=body.command_id if body is not None else None))

    @router.post(
        "/{session_id}/fork",
        status_code=201,
        response_model=SessionForked,
        summary="Fork the session at a log index",
        responses={**_COMMAND, 409: {"model": ErrorBody, "description": "The new id is taken."}},
    )
    async def fork(session: Owned, owner: Caller, body: ForkRequest) -> SessionForked:
        """A new session, owned by the caller, whose log is this one's events ``1..at``.

        It folds to this session's state at ``at`` and runs on its own; sub-agent sessions come
        along. Forked mid-turn, its turn recovers as after a crash there (a ``report`` tool that
        had started is not run again). A bad ``at`` is 400 and a taken id 409; neither writes.
        """
        ctx.authorize(session.id, "fork")
        new_id = check_session_id(body.id) if body.id is not None else f"s-{uuid.uuid4().hex}"
        last = await ctx.runtime.store.last_index(session.id)
        if body.at > last:
            raise ApiError(400, f"the session's log ends at {last}: pass an `at` from 0 to {last}", "at")
        if await ctx.owners.owner(new_id) is not None or await ctx.runtime.store.last_index(new_id) > 0:
            raise ApiError(409, f"session id {new_id!r} is taken; choose another for the fork", "id")
        if await ctx.owners.claim(new_id, owner) == "taken":
            raise ApiError(409, f"session id {new_id!r} is taken; choose another for the fork", "id")
        try:
            await session.fork(at=body.at, id=new_id)
        except UsageError as error:
            raise ApiError(400, error.message, "at") from error
        return SessionForked(id=new_id, source=session.id, at=body.at)

    @router.post("/{session_id}/steer", response_model=ReceiptBody, summary="Steer the active turn", responses=_COMMAND)
    async def steer(session: Owned, body: SteerRequest) -> ReceiptBody:
        """Redirect the turn the client saw after its current response and tools (sends when none is active)."""
        ctx.authorize(session.id, "steer")
        return _receipt(await session.steer(body.text, id=body.id, turn_id=body.turn_id))

    @router.post(
        "/{session_id}/queue/edit", response_model=ReceiptBody, summary="Edit a queued input", responses=_COMMAND
    )
    async def queue_edit(session: Owned, body: EditRequest) -> ReceiptBody:
        """Replace a pending input's text (``not-pending`` / ``role-mismatch`` otherwise)."""
        ctx.authorize(session.id, "queue.edit")
        return _receipt(await session.queue.edit(body.input_id, body.text, role=body.role, id=body.command_id))

    @router.post(
        "/{session_id}/queue/move", response_model=ReceiptBody, summary="Move a queued input", responses=_COMMAND
    )
    async def queue_move(session: Owned, body: MoveRequest) -> ReceiptBody:
        """Move a pending input before ``beforeId`` (null: to the end)."""
        ctx.authorize(session.id, "queue.move")
        return _receipt(await session.queue.move(body.input_id, body.before_id, id=body.command_id))

    @router.post(
        "/{session_id}/queue/remove", response_model=ReceiptBody, summary="Remove a queued input", responses=_COMMAND
    )
    async def queue_remove(session: Owned, body: QueueRequest) -> ReceiptBody:
        """Remove a pending input."""
        ctx.authorize(session.id, "queue.remove")
        return _receipt(await session.queue.remove(body.input_id, id=body.command_id))

    @router.post(
        "/{session_id}/queue/send-now",
        response_model=ReceiptBody,
        summary="Send a queued input now",
        responses=_COMMAND,
    )
    async def queue_send_now(session: Owned, body: SendNowRequest) -> ReceiptBody:
        """Hand a queued user input off to the active (or the observed) turn."""
        ctx.authorize(session.id, "queue.send-now")
        return _receipt(await session.queue.send_now(body.input_id, body.turn_id, id=body.command_id))

    @router.post("/{session_id}/pause", response_model=ReceiptBody, summary="Pause", responses=_COMMAND)
    async def pause(session: Owned, body: Annotated[PauseRequest | None, Body()] = None) -> ReceiptBody:
        """Close admission after the turn (``after-turn``) or now (``now`` also cancels current work)."""
        ctx.authorize(session.id, "pause")
        return _receipt(await session.pause((body or PauseRequest()).when))

    @router.post("/{session_id}/resume", response_model=ReceiptBody, summary="Resume", responses=_COMMAND)
    async def resume(session: Owned) -> ReceiptBody:
        """Reopen admission and resume retained work."""
        ctx.authorize(session.id, "resume")
        return _receipt(await session.resume())

    @router.post("/{session_id}/respond", response_model=ReceiptBody, summary="Answer an approval", responses=_COMMAND)
    async def respond(session: Owned, body: RespondRequest) -> ReceiptBody:
        """Approve or deny a pending interaction (``not-pending`` when it is not waiting)."""
        ctx.authorize(session.id, "respond")
        return _receipt(await session.respond(body.interaction_id, body.approved, reason=body.reason))

    @router.post(
        "/{session_id}/events",
        response_model=EventsPushed,
        summary="Push app events",
        responses=_COMMAND,
    )
    async def push(session: Owned, body: PushRequest) -> EventsPushed:
        """Append app events of the agent's contract (validated; the ``authorize`` hook decides)."""
        contract = ctx.agent.contract
        events: list[Event] = []
        for i, item in enumerate(body.events):
            payload = item.payload
            if contract is not None:
                if item.type not in contract.events:
                    known = ", ".join(sorted(contract.events)) or "none"
                    raise ApiError(
                        422,
                        f"{item.type!r} is not an event type of this contract (its types: {known})",
                        f"events[{i}].type",
                    )
                try:
                    payload = contract.validate(item.type, item.payload)
                except ParseError as error:
                    raise ApiError(422, error.message, f"events[{i}].{error.field}") from None
            events.append(Event(item.id or f"evt-{uuid.uuid4().hex}", item.type, payload))
        if contract is not None:
            from orchestrator.core.contract import Operation

            if not contract.allows(Operation("push", session.id, tuple(events))):
                raise ApiError(403, "this session's contract does not allow these events from a client", "events")
        return EventsPushed(index=await session.push(*events))

    # -- reading -----------------------------------------------------------------------------------

    @router.get("/{session_id}/state", response_model=StateBody, summary="The session's state")
    async def get_state(
        session: Owned,
        through: Annotated[int | None, Query(ge=0, description="Fold the log only through this index.")] = None,
        sub: SubPath = None,
    ) -> StateBody | Response:
        """The state and the log index it reflects (``through``: as it was at that index; ``sub``: a sub-agent's)."""
        if sub:
            state, index = await sub_state(ctx, session.id, sub, through)
            return StateBody(state=state, index=index)
        if through is None and (followed := await ctx.views.current(session)) is not None:
            return JsonBytes(followed.body("state"))
        snapshot = await session.state(through=through)
        return StateBody(state=state_json(snapshot.state), index=snapshot.index)

    @router.get("/{session_id}/messages", response_model=MessageList, summary="The conversation")
    async def get_messages(session: Owned) -> MessageList | Response:
        """The conversation as wire messages."""
        if (followed := await ctx.views.current(session)) is not None:
            return JsonBytes(followed.body("messages"))
        return MessageList(messages=[message_to_wire(m) for m in (await session.state()).state.messages])

    @router.get(
        "/{session_id}/info",
        response_model=dict[str, Any],
        summary="Executing, paused, queued inputs, the active turn",
        responses={
            200: {
                "content": {
                    "application/json": {
                        "example": {
                            "executing": False,
                            "paused": False,
                            "queued": [],
                            "turn": None,
                            "lastTurn": {"id": "t1", "outcome": "completed"},
                            "status": "idle",
                            "index": 7,
                        }
                    }
                }
            }
        },
    )
    async def get_info(session: Owned) -> dict[str, Any] | Response:
        """What drives a UI's controls: ``executing`` (the Stop button), ``queued``, ``turn``."""
        if (followed := await ctx.views.current(session)) is not None:
            return JsonBytes(followed.body("info"))
        return await session.info()

    @router.get(
        "/{session_id}/events",
        response_class=EventStream,
        summary="Stream the session's mutations (SSE, resumable)",
        responses={
            200: {
                "description": "Server-sent events: `snapshot` (`{index, state}`) first on a fresh connection, "
                "then `mutations` (`{index, mutations}`), one per log index; the SSE `id` is the index. "
                "Reconnect with `Last-Event-ID` (or `?after=`) to miss nothing and see nothing twice. "
                "`: ping` comments every 15 s.",
                "content": {
                    "text/event-stream": {
                        "schema": sse_event_schema(
                            ["snapshot", "mutations"], "JSON: `{index, state}` (snapshot) or `{index, mutations}`."
                        ),
                        "example": SSE_EXAMPLE,
                    }
                },
            }
        },
    )
    async def events(
        session: Owned,
        last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
        after: Annotated[int | None, Query(ge=0, description="Like `Last-Event-ID`.")] = None,
    ) -> EventStream:
        """Subscribe to the session's mutations (see the response description)."""
        last: int | None = after
        if last_event_id is not None and last_event_id.strip():
            try:
                last = int(last_event_id)
            except ValueError:
                raise ApiError(422, "Last-Event-ID must be a log index (an integer)", "Last-Event-ID") from None
            if last < 0:
                raise ApiError(422, "Last-Event-ID must be 0 or more", "Last-Event-ID")
        stream = session_events(ctx.views, session, ctx.agent.contract, last, heartbeat=ctx.heartbeat)
        return EventStream(stream, closing=ctx.closing)

    return router
