"""Wire shapes: the seed's JSON (camelCase) for every value, and msgpack at the boundary.

``to_wire(value)`` gives the JSON-able dict a client or the store sees; ``parse_part``,
``parse_action``, ``parse_message`` and ``parse_state`` read it back, checking every field and
raising a ``ParseError`` that names the bad one. ``pack`` / ``unpack`` are msgpack over the
same shapes. One field table per type serves both directions, so they cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgpack

from orchestrator.core._codegen import decoder, encoder
from orchestrator.core._json import JsonValue
from orchestrator.core._pvec import PVec
from orchestrator.core._wire_fields import (
    _bool,
    _decoders,
    _encoders,
    _error_code,
    _Field,
    _int,
    _json,
    _kind,
    _list,
    _nonempty,
    _object,
    _one_of,
    _opt,
    _parse_tagged,
    _read_fields,
    _req,
    _str,
    _Table,
    _tagged,
    _within,
)
from orchestrator.core.actions import ApplyPart, Reset, Retry, Send, SessionAction, Stop, ToolPhase
from orchestrator.core.errors import ParseError
from orchestrator.core.parts import (
    AgentMessage,
    CompactionPart,
    DataPart,
    MessagePart,
    NestedRun,
    ReasoningPart,
    TextPart,
    ToolPart,
)
from orchestrator.core.state import SessionError, SessionState
from orchestrator.core.stream import (
    AgentStreamPart,
    CompactionUpdate,
    DataUpdate,
    Failure,
    Finish,
    MessageMetadata,
    MessageStart,
    Reasoning,
    RunSnapshot,
    StepFinish,
    TextDelta,
    ToolCall,
    ToolFailure,
    ToolInputDelta,
    ToolResult,
)

__all__ = [
    "action_from_wire",
    "action_to_wire",
    "message_from_wire",
    "message_part_from_wire",
    "message_to_wire",
    "pack",
    "parse_action",
    "parse_message",
    "parse_part",
    "parse_state",
    "part_from_wire",
    "part_to_wire",
    "part_to_wire_message",
    "run_from_wire",
    "run_status_to_wire",
    "state_from_wire",
    "state_to_wire",
    "unpack",
]


# -- field tables ------------------------------------------------------------------------------

_RUN_CODEC: Final = {
    "encode": lambda v: _run_to_wire(v),
    "decode": lambda v: run_from_wire(v),
}
"""A nested run inside a part (``nested-run``'s ``run``, a tool part's ``agent``)."""
_NESTED_RUN: Final = lambda v, w: _parse_run(v, f"{w}.", NestedRun)  # noqa: E731

_STREAM: Final[dict[str, _Table]] = {
    "message-start": (
        MessageStart,
        (_req("messageId", "message_id", _nonempty), _opt("metadata", "metadata", _object)),
    ),
    "text-delta": (TextDelta, (_req("delta", "delta", _str), _opt("messageId", "message_id", _nonempty))),
    "reasoning": (Reasoning, (_req("text", "text", _str), _opt("messageId", "message_id", _nonempty))),
    "tool-call": (
        ToolCall,
        (
            _req("id", "id", _nonempty),
            _req("name", "name", _nonempty),
            _opt("input", "input", _json),
            _opt("messageId", "message_id", _nonempty),
        ),
    ),
    "tool-input-delta": (
        ToolInputDelta,
        (
            _req("id", "id", _nonempty),
            _req("delta", "delta", _str),
            _opt("name", "name", _nonempty),
            _opt("messageId", "message_id", _nonempty),
        ),
    ),
    "tool-result": (
        ToolResult,
        (
            _req("id", "id", _nonempty),
            _opt("output", "output", _json),
            _opt("preliminary", "preliminary", _bool, False),
        ),
    ),
    "tool-error": (
        ToolFailure,
        (_req("id", "id", _nonempty), _req("error", "error", _str), _opt("code", "code", _nonempty)),
    ),
    "step-finish": (StepFinish, (_opt("usage", "usage", _object), _opt("finishReason", "finish_reason", _nonempty))),
    "finish": (Finish, (_opt("reason", "reason", _nonempty, "stop"),)),
    "error": (Failure, (_req("error", "error", _str), _opt("code", "code", _error_code))),
    "message-metadata": (
        MessageMetadata,
        (_req("metadata", "metadata", _object), _opt("messageId", "message_id", _nonempty)),
    ),
    "data": (
        DataUpdate,
        (
            _req("name", "name", _nonempty),
            _opt("data", "data", _json),
            _opt("id", "id", _nonempty),
            _opt("messageId", "message_id", _nonempty),
        ),
    ),
    "compaction": (
        CompactionUpdate,
        (
            _req("id", "id", _nonempty),
            _req("status", "status", _one_of("running", "completed", "failed", "interrupted")),
            _opt("summary", "summary", _str),
            _opt("inputTokens", "input_tokens", _int),
            _opt("thresholdTokens", "threshold_tokens", _int),
            _opt("usage", "usage", _object),
            _opt("messageId", "message_id", _nonempty),
        ),
    ),
    "nested-run": (RunSnapshot, (_req("run", "run", _NESTED_RUN, **_RUN_CODEC),)),
}
"""Every stream part: its class and field table, by wire tag."""


# -- stream parts ------------------------------------------------------------------------------

_STREAM_ENCODE: Final = _encoders(_STREAM)
_STREAM_DECODE: Final = _decoders(_STREAM)


def parse_part(obj: Any, *, where: str = "") -> AgentStreamPart:
    """A stream part from the seed's JSON, e.g. ``{"type": "text-delta", "delta": "Hi"}``.

    Raises:
        ParseError: naming the field that is missing, unknown or of the wrong kind.
    """
    part: AgentStreamPart = _parse_tagged(_STREAM, "stream part", obj, f"{where}." if where else "")
    return part


def part_to_wire(part: AgentStreamPart) -> dict[str, Any]:
    """The seed's JSON for a stream part."""
    return _STREAM_ENCODE[type(part)](part)


def part_from_wire(obj: Mapping[str, Any]) -> AgentStreamPart:
    """A stream part from trusted wire data (the store): no per-field checks."""
    part: AgentStreamPart = _STREAM_DECODE[obj["type"]](obj)
    return part


# -- actions -----------------------------------------------------------------------------------

_ACTION_TAGS: Final = dict.fromkeys(("send", "part", "toolPhase", "tool_phase", "stop", "retry", "reset"))


def parse_action(obj: Any) -> SessionAction:
    """A session action from the seed's JSON, e.g. ``{"type": "send", "id": "u-1", "text": "Hi"}``.

    ``toolPhase`` is also accepted as ``tool_phase``.

    Raises:
        ParseError: naming the field that is missing, unknown or of the wrong kind.
    """
    tag = _tagged(obj, "session action", "", _ACTION_TAGS)
    if tag == "send":
        kw = _read_fields(obj, (_req("id", "id", _nonempty), _req("text", "text", _str)), "a 'send' action", "")
        return Send(**kw)
    if tag == "part":
        kw = _read_fields(
            obj, (_req("part", "part", lambda v, w: v), _opt("within", "within", _within)), "a 'part' action", ""
        )
        return ApplyPart(parse_part(kw["part"], where="part"), kw.get("within"))
    if tag in ("toolPhase", "tool_phase"):
        kw = _read_fields(
            obj,
            (
                _req("name", "name", _nonempty),
                _req("state", "state", _one_of("running", "awaiting-confirmation")),
                _opt("prompt", "prompt", _str),
                _opt("id", "id", _nonempty),
            ),
            "a 'toolPhase' action",
            "",
        )
        return ToolPhase(**kw)
    _read_fields(obj, (), f"a {tag!r} action", "")
    simple: dict[str, type[Stop | Retry | Reset]] = {"stop": Stop, "retry": Retry, "reset": Reset}
    return simple[tag]()


def action_from_wire(obj: Mapping[str, Any]) -> SessionAction:
    """A session action from trusted wire data (our own nested batches): no per-field checks."""
    tag = obj["type"]
    if tag == "part":
        within = obj.get("within")
        return ApplyPart(
            part_from_wire(obj["part"]), within if isinstance(within, str) or within is None else tuple(within)
        )
    if tag in ("toolPhase", "tool_phase"):
        return ToolPhase(obj["name"], obj["state"], obj.get("prompt"), obj.get("id"))
    if tag == "send":
        return Send(obj["id"], obj["text"])
    simple: dict[str, type[Stop | Retry | Reset]] = {"stop": Stop, "retry": Retry, "reset": Reset}
    return simple[tag]()


def action_to_wire(action: SessionAction) -> dict[str, Any]:
    """The seed's JSON for an action."""
    match action:
        case Send(id=i, text=t):
            return {"type": "send", "id": i, "text": t}
        case ApplyPart(part=p, within=w):
            out: dict[str, Any] = {"type": "part", "part": part_to_wire(p)}
            if w is not None:
                out["within"] = w if isinstance(w, str) else list(w)
            return out
        case ToolPhase():
            phase: dict[str, Any] = {"type": "toolPhase", "name": action.name, "state": action.state}
            if action.prompt is not None:
                phase["prompt"] = action.prompt
            if action.id is not None:
                phase["id"] = action.id
            return phase
        case Stop() | Retry() | Reset():
            return {"type": action.type}


# -- message parts, messages, states ------------------------------------------------------------

_TOOL_STATES = _one_of("running", "awaiting-confirmation", "done", "error", "cancelled")
_RUN_STATUS = _one_of("idle", "streaming", "error")
_ROLE = _one_of("user", "assistant", "system")

_MESSAGE_PARTS: Final[dict[str, _Table]] = {
    "text": (TextPart, (_req("id", "id", _nonempty), _req("text", "text", _str))),
    "reasoning": (ReasoningPart, (_req("id", "id", _nonempty), _req("text", "text", _str))),
    "tool": (
        ToolPart,
        (
            _req("id", "id", _nonempty),
            _req("name", "name", _str),
            _req("state", "state", _TOOL_STATES),
            _opt("input", "input", _json, omit="never"),
            _opt("output", "output", _json, omit="none"),
            _opt("error", "error", _str, omit="none"),
            _opt("prompt", "prompt", _str, omit="none"),
            _opt("inputText", "input_text", _str, omit="none"),
            _opt("agent", "agent", _NESTED_RUN, omit="none", **_RUN_CODEC),
        ),
    ),
    "compaction": (
        CompactionPart,
        (
            _req("id", "id", _nonempty),
            _req("status", "status", _one_of("running", "completed", "failed", "interrupted")),
            _opt("summary", "summary", _str, omit="none"),
            _opt("inputTokens", "input_tokens", _int, omit="none"),
            _opt("thresholdTokens", "threshold_tokens", _int, omit="none"),
            _opt("usage", "usage", _object, omit="none"),
        ),
    ),
    "data": (
        DataPart,
        (_req("id", "id", _nonempty), _req("name", "name", _nonempty), _opt("data", "data", _json, omit="never")),
    ),
}
"""Every message part: its class and field table, by wire tag."""

_MESSAGE_PART_ENCODE: Final = _encoders(_MESSAGE_PARTS)
_MESSAGE_PART_DECODE: Final = _decoders(_MESSAGE_PARTS)

_MESSAGE: Final[tuple[_Field, ...]] = (
    _req("id", "id", _nonempty),
    _req("role", "role", _ROLE),
    _opt(
        "parts",
        "parts",
        lambda v, w: tuple(_list(v, w, _parse_message_part)),
        (),
        omit="never",
        encode=lambda v: [_MESSAGE_PART_ENCODE[type(p)](p) for p in v],
        decode=lambda v: tuple(_MESSAGE_PART_DECODE[p["type"]](p) for p in v),
    ),
    _opt("revision", "revision", _int, 0, omit="never"),
    _opt("metadata", "metadata", _object, omit="none", encode=dict),
)
"""A message's field table."""

_MESSAGE_ENCODE: Final = encoder(AgentMessage, [f.row for f in _MESSAGE])
_MESSAGE_DECODE: Final = decoder(AgentMessage, [f.row for f in _MESSAGE])


def part_to_wire_message(part: MessagePart, *, with_agent: bool = True) -> dict[str, Any]:
    """The wire JSON of a message part (``with_agent=False`` leaves a nested run out)."""
    wire = _MESSAGE_PART_ENCODE[type(part)](part)
    if not with_agent:
        wire.pop("agent", None)
    return wire


def run_status_to_wire(run: SessionState | NestedRun) -> dict[str, Any]:
    """``{"status", "error"?}`` of a run."""
    out: dict[str, Any] = {"status": run.status}
    if run.error is not None:
        out["error"] = _error_to_wire(run.error)
    return out


def _parse_message_part(obj: Any, prefix: str) -> MessagePart:
    part: MessagePart = _parse_tagged(_MESSAGE_PARTS, "message part", obj, prefix)
    return part


def message_from_wire(obj: Mapping[str, Any]) -> AgentMessage:
    """A message from trusted wire data (our own mutations and snapshots): no per-field checks."""
    message: AgentMessage = _MESSAGE_DECODE(obj)
    return message


def run_from_wire(obj: Mapping[str, Any]) -> NestedRun:
    """A sub-agent's run from trusted wire data (a nested snapshot, a tool part's ``agent``)."""
    run: NestedRun = _trusted_run(obj, NestedRun, "streaming")
    return run


def _trusted_run(obj: Mapping[str, Any], kind: type[Any], default_status: str) -> Any:
    """A session state or a nested run from trusted wire data: no per-field checks."""
    error = obj.get("error")
    return kind(
        PVec([_MESSAGE_DECODE(m) for m in obj.get("messages", ())]),
        obj.get("status", default_status),
        None if error is None else SessionError(error["message"], error.get("code")),
    )


def message_part_from_wire(obj: Mapping[str, Any]) -> MessagePart:
    """A message part from trusted wire data."""
    part: MessagePart = _MESSAGE_PART_DECODE[obj["type"]](obj)
    return part


def message_to_wire(message: AgentMessage) -> dict[str, Any]:
    """The wire JSON of a message (``{"id", "role", "parts", "revision", "metadata"?}``)."""
    return _MESSAGE_ENCODE(message)


def parse_message(obj: Any, *, where: str = "") -> AgentMessage:
    """A message from its wire JSON. Raises ``ParseError`` naming the bad field."""
    prefix = f"{where}." if where else ""
    if not isinstance(obj, Mapping):
        raise ParseError(f"{where or 'a message'} must be an object, got {_kind(obj)}", where)
    return AgentMessage(**_read_fields(obj, _MESSAGE, "a message", prefix))


def _run_to_wire(run: SessionState | NestedRun) -> dict[str, Any]:
    out: dict[str, Any] = {"messages": [_MESSAGE_ENCODE(m) for m in run.messages], "status": run.status}
    if run.error is not None:
        out["error"] = _error_to_wire(run.error)
    return out


def _error_to_wire(error: SessionError) -> dict[str, Any]:
    return {"message": error.message} if error.code is None else {"message": error.message, "code": error.code}


def _parse_error(value: Any, where: str) -> SessionError:
    if not isinstance(value, Mapping):
        raise ParseError(f"{where} must be an object like {{'message': ..., 'code': ...}}", where)
    kw = _read_fields(
        value,
        (_req("message", "message", _str), _opt("code", "code", _error_code)),
        "an error",
        f"{where}.",
    )
    return SessionError(kw["message"], kw.get("code"))


def _parse_run(obj: Any, prefix: str, kind: type[Any]) -> Any:
    if not isinstance(obj, Mapping):
        raise ParseError(f"{prefix.rstrip('.') or 'the state'} must be an object, got {_kind(obj)}", prefix.rstrip("."))
    kw = _read_fields(
        obj,
        (
            _opt(
                "messages", "messages", lambda v, w: _list(v, w, lambda m, mw: parse_message(m, where=mw.rstrip(".")))
            ),
            _opt("status", "status", _RUN_STATUS),
            _opt("error", "error", _parse_error),
        ),
        "a session state" if kind is SessionState else "a nested run",
        prefix,
    )
    default_status = "idle" if kind is SessionState else "streaming"
    return kind(PVec(kw["messages"] or ()), kw["status"] or default_status, kw["error"])


def state_to_wire(state: SessionState) -> dict[str, Any]:
    """The wire JSON of a session state (``{"messages", "status", "error"?}``)."""
    return _run_to_wire(state)


def state_from_wire(obj: Mapping[str, Any]) -> SessionState:
    """A session state from trusted wire data (our own snapshots): no per-field checks."""
    state: SessionState = _trusted_run(obj, SessionState, "idle")
    return state


def parse_state(obj: Any) -> SessionState:
    """A session state from its wire JSON. Raises ``ParseError`` naming the bad field."""
    state: SessionState = _parse_run(obj, "", SessionState)
    return state


# -- msgpack -----------------------------------------------------------------------------------


def pack(obj: JsonValue | Mapping[str, Any]) -> bytes:
    """Msgpack bytes of a wire value."""
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def unpack(data: bytes) -> Any:
    """A wire value from msgpack bytes (lists stay lists)."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False)
