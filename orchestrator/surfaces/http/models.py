"""The HTTP API's request and response bodies (pydantic, camelCase on the wire).

Request bodies forbid unknown fields, so a misspelt field is named in a 422 instead of being
silently ignored (the chat request is the exception: ``useChat`` may add fields of its own).
Ids a client chooses may not start with ``troupe:`` (Troupe's own) and event types may not start
with ``ai.``; both are a 400 naming the field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from orchestrator.core._json import json_problem
from orchestrator.core.events import BUILTIN_PREFIX, RESERVED_ID_PREFIX
from orchestrator.surfaces.http.errors import NOT_STORABLE, RESERVED

__all__ = [
    "SESSION_ID_PATTERN",
    "SESSION_ID_SCHEMA",
    "ChatRequest",
    "CreateSession",
    "EditRequest",
    "EventsPushed",
    "MessageList",
    "MoveRequest",
    "PauseRequest",
    "PromptRequest",
    "PromptResult",
    "PushEvent",
    "PushRequest",
    "QueueRequest",
    "ReceiptBody",
    "RespondRequest",
    "RetryRequest",
    "SendNowRequest",
    "SendRequest",
    "SessionCreated",
    "SessionList",
    "SessionRow",
    "StateBody",
    "SteerRequest",
    "StopRequest",
    "StopResult",
    "UIMessageBody",
]

MAX_TEXT = 1_000_000
SESSION_ID_PATTERN = "^[A-Za-z0-9._:@-]{1,128}$"
"""The session ids a client may choose, as the OpenAPI document says it (``troupe:...`` ones are a 400)."""
SESSION_ID_SCHEMA: dict[str, Any] = {"pattern": SESSION_ID_PATTERN, "minLength": 1, "maxLength": 128}
"""A session id's JSON schema (path parameters and body fields; ``deps.check_session_id`` checks it)."""


def _not_reserved(value: str) -> str:
    if "\x00" in value:
        raise ValueError("contains a NUL character (U+0000), which no id may hold; remove it")
    if value.startswith(RESERVED_ID_PREFIX):
        raise PydanticCustomError(
            RESERVED,
            # pydantic fills {name} from the context, and only that: the quoting is done here.
            "ids starting with {prefix} are Troupe's own; choose another id",
            {"prefix": repr(RESERVED_ID_PREFIX)},
        )
    return value


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty or only whitespace; send some text")
    if "\x00" in value:
        raise ValueError("contains a NUL character (U+0000), which is never text; remove it")
    return value


def _app_type(value: str) -> str:
    if value.startswith(BUILTIN_PREFIX):
        raise PydanticCustomError(
            RESERVED,
            "{value} is a built-in Troupe event type; clients push their contract's app events only",
            {"value": repr(value)},
        )
    return value


ClientId = Annotated[str, Field(min_length=1, max_length=256), AfterValidator(_not_reserved)]
"""An id a client chooses (an input, a command, an event)."""


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("contains a NUL character (U+0000), which no id may hold; remove it")
    return value


RefId = Annotated[str, Field(min_length=1, max_length=1024), AfterValidator(_no_nul)]
"""An id a client refers to (an input, a turn, an interaction: Troupe's own ids included)."""
Text = Annotated[str, Field(min_length=1, max_length=MAX_TEXT), AfterValidator(_not_blank)]
"""A message's text."""
Role = Literal["user", "assistant", "system"]


def _storable(data: Any) -> Any:
    """Refuse a body holding what the log cannot (``2**64``, a lone surrogate, deep nesting), naming where.

    ``json.loads`` accepts those, and pydantic's ``JsonValue`` and ``Any`` fields pass them on, so
    the one JSON-value check (``json_problem``) runs over the whole body first: anything it would
    refuse at the store is a 422 before a command is decided.
    """
    problem = json_problem(data, "")
    if problem is None:
        return data
    field = problem.path.removeprefix(".") or "body"
    raise PydanticCustomError(NOT_STORABLE, "{field} {what}", {"field": field, "what": problem.what})


class _Body(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _storable_body(cls, data: Any) -> Any:
        return _storable(data)


class _Out(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)


# -- sessions ---------------------------------------------------------------------------------------


class CreateSession(_Body):
    """Create a session (the caller's key owns it)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"id": "s-1"}, {}]})

    id: str | None = Field(
        default=None, description="The session id (default: a fresh one).", json_schema_extra=SESSION_ID_SCHEMA
    )


class SessionCreated(_Out):
    """The created session."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"id": "s-1"}]})

    id: str


class SessionRow(_Out):
    """One of the caller's sessions."""

    id: str
    created_at: float = Field(description="When it was created (seconds since the epoch).")


class SessionList(_Out):
    """A page of the caller's sessions, in id order."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"items": [{"id": "s-1", "createdAt": 1.7e9}], "next": None}]}
    )

    items: list[SessionRow]
    next: str | None = Field(description="Pass as `after` for the next page (`null`: this is the last).")


# -- commands ---------------------------------------------------------------------------------------


class ReceiptBody(_Out):
    """How a command was applied. A rejection is a normal result (HTTP 200), not an error."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"commandId": "msg-1", "outcome": "applied"},
                {"commandId": "edit-1", "outcome": "rejected", "reason": "not-pending"},
            ]
        }
    )

    command_id: str
    outcome: Literal["applied", "rejected"]
    reason: str | None = Field(
        default=None,
        exclude_if=lambda reason: reason is None,  # absent on an applied receipt
        description="Why it was rejected: `not-pending`, `stale-turn`, `role-mismatch`, `nothing-to-retry`, ...",
    )


class SendRequest(_Body):
    """Put an input in the session's durable inbox (a turn starts when the session is idle)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"text": "Add two mugs to the cart", "id": "u-1"}]})

    text: Text
    id: ClientId | None = Field(default=None, description="The input id; a resubmission with it is a replay.")
    role: Role = "user"
    generate: bool = Field(default=True, description="`false`: passive context that enters with the next input.")


class PromptRequest(_Body):
    """Send a user message; with `wait`, answer when its turn has ended."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"text": "Hi", "wait": True}]})

    text: Text
    id: ClientId | None = None
    wait: bool = False
    timeout: float = Field(default=300.0, gt=0, le=3600, description="With `wait`: seconds to wait at most.")


class PromptResult(_Out):
    """The prompt's receipt and, when waited for, how its turn ended (`outcome` null: still running)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "inputId": "u-1",
                    "receipt": {"commandId": "u-1", "outcome": "applied"},
                    "success": True,
                    "outcome": "completed",
                    "text": "Hello!",
                    "error": None,
                    "turnId": "t1",
                }
            ]
        }
    )

    input_id: str
    receipt: ReceiptBody | None
    success: bool | None = None
    outcome: str | None = Field(
        default=None, description="`completed`, `failed`, `stopped`, `superseded`, `handed-off` or `removed`."
    )
    text: str | None = None
    error: str | None = None
    turn_id: str | None = None


class StopRequest(_Body):
    """End the turn the client saw now (default: whatever turn is active)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"turnId": "t1", "commandId": "stop-1"}]})

    cancel_queued: bool = Field(default=False, description="Also cancel every queued input.")
    command_id: ClientId | None = None
    turn_id: RefId | None = Field(
        default=None,
        min_length=1,
        description="The turn the client saw: `stale-turn` once it has ended, so a late click never stops "
        "the next turn. Without it, the stop ends whatever turn is active.",
    )


class StopResult(_Out):
    """What the stop did (`receipt` null: no turn was active)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"receipt": {"commandId": "stop-1", "outcome": "applied"}, "cancelledQueuedPrompts": 0}]
        }
    )

    receipt: ReceiptBody | None
    cancelled_queued_prompts: int


class RetryRequest(_Body):
    """Resume from the last finished tool call (supersedes a running turn)."""

    command_id: ClientId | None = None
    turn_id: RefId | None = Field(
        default=None,
        min_length=1,
        description="The turn the client saw (active, or the last to end): `stale-turn` once another turn "
        "has started. Without it, the latest turn is retried.",
    )


class ResetRequest(_Body):
    """Stop the active turn and start a new conversation (the log keeps the old one)."""

    command_id: ClientId | None = None


class ForkRequest(_Body):
    """A new session whose log is this one's events through ``at`` (time travel)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"at": 12, "id": "s-2"}, {"at": 0}]})

    at: int = Field(ge=0, description="The log index to fork at (0 .. the session's last index).")
    id: str | None = Field(
        default=None, description="The new session's id (default: a fresh one).", json_schema_extra=SESSION_ID_SCHEMA
    )


class SessionForked(_Out):
    """The fork: a new session, owned by the caller."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"id": "s-2", "source": "s-1", "at": 12}]})

    id: str
    source: str
    at: int


class SteerRequest(_Body):
    """Redirect the active turn after its current response and tools (sends when none is active)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"text": "Make it three mugs", "turnId": "t1"}]})

    text: Text
    id: ClientId | None = None
    turn_id: RefId | None = Field(
        default=None,
        description="The turn the client saw (default: whatever turn is active); once it has ended, the text is "
        "sent like a message.",
    )


class QueueRequest(_Body):
    """A queue operation on a pending input."""

    input_id: RefId
    command_id: ClientId | None = None


class EditRequest(QueueRequest):
    """Replace a pending input's text."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"inputId": "u-2", "text": "Three mugs"}]})

    text: Text
    role: Role = "user"


class MoveRequest(QueueRequest):
    """Move a pending input before another (`beforeId` null: to the end)."""

    before_id: RefId | None = None


class SendNowRequest(QueueRequest):
    """Hand a queued input off to the turn the client saw (default: whatever turn is active)."""

    turn_id: RefId | None = Field(
        default=None, description="The turn the client saw: `stale-turn` (the queue unchanged) once it has ended."
    )


class PauseRequest(_Body):
    """Close admission after the turn, or now (which also cancels current work)."""

    when: Literal["after-turn", "now"] = "after-turn"


class RespondRequest(_Body):
    """Answer an approval."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"interactionId": "call-1:approval", "approved": True}]})

    interaction_id: RefId
    approved: bool
    reason: str | None = Field(default=None, max_length=10_000)


class PushEvent(_Body):
    """An app event of the agent's contract."""

    type: Annotated[str, Field(min_length=1, max_length=256), AfterValidator(_app_type)]
    payload: dict[str, JsonValue] = Field(default_factory=dict)
    id: ClientId | None = None


class PushRequest(_Body):
    """Append app events (the contract's `authorize` hook decides)."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"events": [{"type": "cart.item_added", "payload": {"slug": "mug"}}]}]}
    )

    events: list[PushEvent] = Field(min_length=1, max_length=1000)


class EventsPushed(_Out):
    """The log index after the pushed events."""

    index: int


# -- reading ----------------------------------------------------------------------------------------


class StateBody(_Out):
    """A session's state and the log index it reflects."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "index": 7,
                    "state": {
                        "messages": [{"id": "u-1", "role": "user", "parts": [], "revision": 0}],
                        "status": "idle",
                        "inbox": {"items": [], "paused": False},
                        "active": None,
                        "lastTurn": {"id": "t1", "outcome": "completed"},
                        "interactions": [],
                        "app": {},
                        "usage": {"inputTokens": 0, "outputTokens": 0},
                    },
                }
            ]
        }
    )

    state: dict[str, Any] = Field(
        description="`messages`/`status`/`error` (the wire state), `inbox`, `active`, `lastTurn`, "
        "`interactions`, `app`, `usage`."
    )
    index: int


class MessageList(_Out):
    """The conversation, as wire messages."""

    messages: list[dict[str, Any]]


# -- the AI SDK chat endpoint -----------------------------------------------------------------------


class UIMessageBody(BaseModel):
    """An AI SDK UIMessage as `useChat` sends it (parts are checked where they are used)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str = Field(min_length=1, max_length=256)
    role: Role
    parts: list[dict[str, Any]] = Field(default_factory=list)
    metadata: Any = None


class ChatRequest(BaseModel):
    """What `useChat` with `DefaultChatTransport` posts (`id` is the session id)."""

    model_config = ConfigDict(
        extra="allow",
        frozen=True,
        json_schema_extra={
            "examples": [
                {
                    "id": "chat-1",
                    "trigger": "submit-message",
                    "messages": [{"id": "u-1", "role": "user", "parts": [{"type": "text", "text": "Hi"}]}],
                }
            ]
        },
    )

    @model_validator(mode="before")
    @classmethod
    def _storable_body(cls, data: Any) -> Any:
        return _storable(data)

    id: str = Field(min_length=1, max_length=128, json_schema_extra={"pattern": SESSION_ID_PATTERN})
    messages: list[UIMessageBody] = Field(default_factory=list)
    trigger: Literal["submit-message", "regenerate-message"] = "submit-message"
    message_id: str | None = Field(default=None, alias="messageId", title="Message id")
