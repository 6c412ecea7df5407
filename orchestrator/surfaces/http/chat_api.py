"""``POST /api/chat``: the Vercel AI SDK UI message stream protocol, for ``useChat`` as it is.

``useChat`` with ``DefaultChatTransport`` posts ``{id, messages, trigger, messageId?}``; ``id`` is
the session id (a first request creates the session for the caller's key). What it asks for:

- ``submit-message`` whose last message is the user's: that message is sent (its ``id`` is the
  input id, so a resubmission is idempotent; one whose turn already ended replays its answer);
- ``submit-message`` whose last message is the assistant's with tool parts in
  ``approval-responded``: each ``approval`` is answered (``respond``) and the same turn and message
  continue streaming;
- ``regenerate-message``: ``retry``, and the new turn streams.

Only the last message is read: the session holds the conversation. ``useChat`` sends the whole
history on every request, so a long chat can reach ``max_body_bytes``; send just the last message
(``prepareSendMessagesRequest``) or raise the limit.

It subscribes before it sends, so nothing is missed, and streams until the turn ends or waits for
an approval (``orchestrator.surfaces.http.chat``). Also ``GET /api/chat/{id}/stream`` (``resumeStream``:
the active turn again from its start, 204 when none is) and ``GET /api/chat/{id}/messages`` (the
conversation as UIMessages, for ``useChat``'s initial ``messages``).
"""

# No ``from __future__ import annotations``: FastAPI reads these signatures at runtime.

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Depends, Response

from orchestrator.core.errors import PartialDuplicateBatch
from orchestrator.surfaces.http.aisdk import to_ui_messages
from orchestrator.surfaces.http.chat import UI_MESSAGE_STREAM_HEADERS, ChatTurn, Target, answer_to, stream_turn
from orchestrator.surfaces.http.deps import Context, check_session_id
from orchestrator.surfaces.http.errors import ApiError, ErrorBody, duplicate_message
from orchestrator.surfaces.http.models import ChatRequest
from orchestrator.surfaces.http.sse import EventStream, sse_event_schema
from orchestrator.surfaces.http.views import JsonBytes

if TYPE_CHECKING:
    from actors.client import Session
else:
    Session = Any

__all__ = ["chat_router"]

CHAT_EXAMPLE = (
    'data: {"type":"start","messageId":"troupe:t1"}\n\n'
    'data: {"type":"start-step"}\n\n'
    'data: {"type":"text-start","id":"troupe:t1:0"}\n\n'
    'data: {"type":"text-delta","id":"troupe:t1:0","delta":"Hello"}\n\n'
    'data: {"type":"text-end","id":"troupe:t1:0"}\n\n'
    'data: {"type":"finish-step"}\n\n'
    'data: {"type":"finish","finishReason":"stop"}\n\n'
    "data: [DONE]\n\n"
)

_STREAM_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The AI SDK UI message stream (ai 6.x; header `x-vercel-ai-ui-message-stream: v1`): "
        "`data: <UIMessageChunk JSON>` events, then `data: [DONE]`.",
        "content": {
            "text/event-stream": {
                "schema": sse_event_schema(None, "A UIMessageChunk as JSON, or `[DONE]` last."),
                "example": CHAT_EXAMPLE,
            }
        },
    },
    400: {"model": ErrorBody, "description": "A reserved id."},
    401: {"model": ErrorBody, "description": "No API key, or a wrong one."},
    403: {"model": ErrorBody, "description": "The contract's `authorize` hook refused."},
    404: {"model": ErrorBody, "description": "The chat id is another key's session."},
    409: {"model": ErrorBody, "description": "The message id is already used (ids are unique across the server)."},
    413: {"model": ErrorBody, "description": "The body is too large."},
    422: {"model": ErrorBody, "description": "The body does not validate; `field` names the problem."},
}


@dataclass(frozen=True, slots=True)
class _Plan:
    """What a chat request asks for."""

    kind: Literal["prompt", "respond", "retry"]
    input_id: str = ""
    text: str = ""
    field: str = ""
    approvals: tuple[tuple[str, bool, str | None], ...] = ()


def plan_request(body: ChatRequest) -> _Plan:
    """Read a chat request.

    Raises:
        ApiError: naming the field that does not say what to do.
    """
    if body.trigger == "regenerate-message":
        return _Plan("retry")
    if not body.messages:
        raise ApiError(422, "messages is empty: send the conversation with the new user message last", "messages")
    at = len(body.messages) - 1
    last = body.messages[at]
    where = f"messages[{at}]"
    if last.role == "user":
        if last.id.startswith("troupe:"):
            raise ApiError(
                400, "message ids starting with 'troupe:' are Troupe's own; choose another id", f"{where}.id"
            )
        text = "".join(
            str(p.get("text", "")) for p in last.parts if p.get("type") == "text" and isinstance(p.get("text"), str)
        )
        if not text.strip():
            raise ApiError(422, "the new user message has no text: add a text part", f"{where}.parts")
        return _Plan("prompt", input_id=last.id, text=text, field=f"{where}.id")
    if last.role == "assistant":
        approvals: list[tuple[str, bool, str | None]] = []
        for j, part in enumerate(last.parts):
            kind = str(part.get("type", ""))
            if not (kind.startswith("tool-") or kind == "dynamic-tool") or part.get("state") != "approval-responded":
                continue
            approval = part.get("approval")
            field = f"{where}.parts[{j}].approval"
            if not isinstance(approval, dict):
                raise ApiError(422, "an approval-responded tool part needs approval: {id, approved}", field)
            approval_id, approved, reason = approval.get("id"), approval.get("approved"), approval.get("reason")
            if not isinstance(approval_id, str) or not approval_id:
                raise ApiError(422, "approval.id must be the approvalId of the request", f"{field}.id")
            if not isinstance(approved, bool):
                raise ApiError(422, "approval.approved must be true or false", f"{field}.approved")
            if reason is not None and not isinstance(reason, str):
                raise ApiError(422, "approval.reason must be a string", f"{field}.reason")
            approvals.append((approval_id, approved, reason))
        if not approvals:
            raise ApiError(
                422,
                "the last message is the assistant's and answers no approval; send a user message last",
                where,
            )
        return _Plan("respond", approvals=tuple(approvals))
    raise ApiError(
        422, "the last message must be the user's (or the assistant's with approval answers)", f"{where}.role"
    )


def chat_router(ctx: Context) -> APIRouter:
    """The AI SDK routes over ``ctx``."""
    errors = {code: doc for code, doc in _STREAM_DOC.items() if code != 200}
    router = APIRouter(prefix="/api/chat", tags=["ai-sdk"], responses=errors)
    caller = ctx.caller()
    owned = ctx.owned()
    Caller = Annotated[bytes, Depends(caller)]
    Owned = Annotated[Session, Depends(owned)]
    headers = UI_MESSAGE_STREAM_HEADERS

    @router.post(
        "", response_class=EventStream, summary="useChat: send, answer approvals, regenerate", responses=_STREAM_DOC
    )
    async def chat(body: ChatRequest, owner: Caller) -> EventStream:
        """Stream the turn a ``useChat`` request asks for (see the module docstring)."""
        session_id = check_session_id(body.id)
        if await ctx.owners.claim(session_id, owner) == "taken":
            raise ApiError(404, f"there is no chat {session_id!r} for this key", "id")
        plan = plan_request(body)
        ctx.views.wrote(session_id)  # here and once it is sent: a read after the answer waits for it
        ctx.authorize(session_id, {"prompt": "send", "respond": "respond", "retry": "retry"}[plan.kind])
        session = ctx.session(session_id)
        subscription = session.subscribe()
        try:
            await subscription.ready()
            snapshot = await session.state()
            state, index = snapshot.state, snapshot.index
            now = time.monotonic()
            if plan.kind == "prompt":
                follower = ChatTurn(state, index, Target("input", input_id=plan.input_id), throttle=ctx.throttle)
                admitted = state.active is not None and plan.input_id in state.active.input
                if not admitted and any(m.id == plan.input_id for m in state.messages):
                    first = follower.replay(answer_to(state.messages, plan.input_id))
                else:
                    try:
                        receipt = await session.send(plan.text, id=plan.input_id)
                    except PartialDuplicateBatch:
                        raise ApiError(409, duplicate_message(plan.input_id), plan.field) from None
                    if receipt.reason == "PARTIAL_DUPLICATE_BATCH":  # an id used before: as /messages says it
                        raise ApiError(409, duplicate_message(plan.input_id), plan.field)
                    if receipt.outcome == "rejected":
                        first = follower.reject(f"the message was rejected ({receipt.reason})")
                    else:
                        first = follower.begin(now)
            elif plan.kind == "respond":
                turn_id = state.active.id if state.active is not None else ""
                follower = ChatTurn(state, index, Target("turn", turn_id=turn_id), throttle=ctx.throttle)
                follower.answered([approval_id for approval_id, _, _ in plan.approvals])
                for approval_id, approved, reason in plan.approvals:
                    await session.respond(approval_id, approved, reason=reason)  # `not-pending`: answered before
                first = follower.begin(now)
            else:
                exclude = {t for t in (state.active.id if state.active else None, (state.last_turn or ("",))[0]) if t}
                target = Target("new-turn", exclude=frozenset(exclude))
                follower = ChatTurn(state, index, target, throttle=ctx.throttle)
                receipt = await session.retry()
                if receipt.outcome == "rejected":
                    first = follower.reject(f"there is nothing to regenerate ({receipt.reason})")
                else:
                    first = follower.begin(now)
        except BaseException:
            subscription.close()
            raise
        ctx.views.wrote(session_id)
        stream = stream_turn(follower, subscription, session, first, heartbeat=ctx.heartbeat)
        return EventStream(stream, headers=headers, on_close=subscription.close, closing=ctx.closing)

    @router.get(
        "/{session_id}/stream",
        response_class=EventStream,
        summary="useChat resumeStream: the active turn again",
        responses={**_STREAM_DOC, 204: {"description": "No turn is active."}},
    )
    async def resume_stream(session: Owned) -> Response:
        """Replay the active turn's message from its start, then follow it (204 when none is active)."""
        subscription = session.subscribe()
        try:
            await subscription.ready()
            snapshot = await session.state()
            active = snapshot.state.active
            if active is None:
                subscription.close()
                return Response(status_code=204)
            target = Target("turn", turn_id=active.id)
            follower = ChatTurn(snapshot.state, snapshot.index, target, baseline=False, throttle=ctx.throttle)
            first = follower.begin(time.monotonic())
        except BaseException:
            subscription.close()
            raise
        stream = stream_turn(follower, subscription, session, first, heartbeat=ctx.heartbeat)
        return EventStream(stream, headers=headers, on_close=subscription.close, closing=ctx.closing)

    @router.get(
        "/{session_id}/messages",
        response_model=list[dict[str, Any]],
        summary="The conversation as AI SDK UIMessages",
    )
    async def ui_messages(session: Owned) -> list[dict[str, Any]] | Response:
        """The conversation as UIMessages (``useChat({messages})`` after a reload)."""
        if (followed := await ctx.views.current(session)) is not None:
            return JsonBytes(followed.body("ui"))
        return to_ui_messages((await session.state()).state)

    return router
