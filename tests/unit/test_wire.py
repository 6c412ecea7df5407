"""Wire shapes: the seed's JSON in, clear errors for anything else, msgpack and pickle round trips."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

import orchestrator
from orchestrator import (
    AgentMessage,
    ApplyPart,
    CompactionPart,
    CompactionUpdate,
    DataPart,
    DataUpdate,
    Failure,
    Finish,
    MessageMetadata,
    MessageStart,
    NestedRun,
    ParseError,
    Reasoning,
    ReasoningPart,
    Reset,
    Retry,
    Send,
    SessionError,
    SessionState,
    StepFinish,
    Stop,
    TextDelta,
    TextPart,
    ToolCall,
    ToolFailure,
    ToolInputDelta,
    ToolPart,
    ToolPhase,
    ToolResult,
    UsageError,
    parse_action,
    parse_message,
    parse_part,
    parse_state,
)
from orchestrator.core import errors, payloads
from orchestrator.core._pvec import PVec
from orchestrator.core.actions import SessionAction
from orchestrator.core.events import Event
from orchestrator.core.payloads import parse_payload, payload_from_wire, payload_to_wire
from orchestrator.core.stream import AgentStreamPart
from orchestrator.core.wire import (
    action_to_wire,
    message_to_wire,
    pack,
    part_from_wire,
    part_to_wire,
    state_to_wire,
    unpack,
)

SEED_PARTS: list[tuple[dict[str, Any], AgentStreamPart]] = [
    ({"type": "message-start", "messageId": "a-1"}, MessageStart("a-1")),
    ({"type": "text-delta", "messageId": "a-1", "delta": "Hi"}, TextDelta("Hi", "a-1")),
    ({"type": "text-delta", "delta": "Hi"}, TextDelta("Hi")),
    ({"type": "reasoning", "text": "hmm"}, Reasoning("hmm")),
    (
        {
            "type": "tool-call",
            "messageId": "a-1",
            "id": "call-1",
            "name": "add_to_cart",
            "input": {"slug": "mug", "qty": 2},
        },
        ToolCall("call-1", "add_to_cart", {"slug": "mug", "qty": 2}, "a-1"),
    ),
    (
        {"type": "tool-input-delta", "id": "call-1", "delta": '{"sl', "name": "add"},
        ToolInputDelta("call-1", '{"sl', "add"),
    ),
    (
        {"type": "tool-result", "id": "call-1", "output": {"content": [{"type": "text", "text": "Added."}]}},
        ToolResult("call-1", {"content": [{"type": "text", "text": "Added."}]}),
    ),
    ({"type": "tool-result", "id": "c", "output": "25%", "preliminary": True}, ToolResult("c", "25%", True)),
    ({"type": "tool-error", "id": "c", "error": "nope", "code": "cancelled"}, ToolFailure("c", "nope", "cancelled")),
    (
        {"type": "step-finish", "usage": {"inputTokens": 1}, "finishReason": "stop"},
        StepFinish({"inputTokens": 1}, "stop"),
    ),
    ({"type": "finish"}, Finish()),
    ({"type": "finish", "reason": "aborted"}, Finish("aborted")),
    (
        {"type": "error", "error": "Couldn't reach the assistant.", "code": "network"},
        Failure("Couldn't reach the assistant.", "network"),
    ),
    ({"type": "message-metadata", "metadata": {"status": "writing"}}, MessageMetadata({"status": "writing"})),
    ({"type": "data", "name": "card", "data": [1, 2], "id": "d"}, DataUpdate("card", [1, 2], "d")),
    (
        {
            "type": "compaction",
            "id": "k",
            "status": "completed",
            "summary": "s",
            "inputTokens": 9,
            "thresholdTokens": 8,
        },
        CompactionUpdate("k", "completed", "s", 9, 8),
    ),
]


@pytest.mark.parametrize(("wire", "value"), SEED_PARTS)
def test_parse_part_accepts_the_seed_json_and_round_trips(wire: dict[str, Any], value: AgentStreamPart) -> None:
    assert parse_part(wire) == value
    assert part_to_wire(value) == wire
    assert part_from_wire(unpack(pack(part_to_wire(value)))) == value
    assert pickle.loads(pickle.dumps(value)) == value


@pytest.mark.parametrize(
    ("obj", "field", "words"),
    [
        ({"type": "text-delta"}, "delta", "required"),
        ({"type": "text-delta", "delta": 3}, "delta", "must be a string"),
        ({"type": "text-delta", "delta": "x", "messageID": "a"}, "messageID", "not a field"),
        ({"type": "tool-call", "id": "c", "name": ""}, "name", "non-empty"),
        ({"type": "tool-call", "id": "c", "name": "t", "input": {"x": {1, 2}}}, "input.x", "must be JSON"),
        ({"type": "error", "error": "e", "code": "teapot"}, "code", "must be one of"),
        ({"type": "tool-result", "id": "c", "preliminary": "yes"}, "preliminary", "true or false"),
        ({"type": "text"}, "type", "stream part"),
        ({"delta": "x"}, "type", "stream part"),
    ],
)
def test_parse_part_names_the_bad_field(obj: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_part(obj)
    assert info.value.field == field
    assert words in info.value.message
    assert isinstance(info.value, UsageError)


def test_parse_part_rejects_a_non_object() -> None:
    with pytest.raises(ParseError, match="must be an object"):
        parse_part(["text-delta"])


ACTIONS: list[tuple[dict[str, Any], SessionAction]] = [
    ({"type": "send", "id": "u-1", "text": "Hi"}, Send("u-1", "Hi")),
    ({"type": "part", "part": {"type": "finish"}}, ApplyPart(Finish())),
    ({"type": "part", "part": {"type": "finish"}, "within": "c-1"}, ApplyPart(Finish(), "c-1")),
    ({"type": "part", "part": {"type": "finish"}, "within": ["c-1", "c-2"]}, ApplyPart(Finish(), ("c-1", "c-2"))),
    (
        {"type": "toolPhase", "name": "t", "state": "awaiting-confirmation", "prompt": "ok?"},
        ToolPhase("t", "awaiting-confirmation", "ok?"),
    ),
    ({"type": "stop"}, Stop()),
    ({"type": "retry"}, Retry()),
    ({"type": "reset"}, Reset()),
]


@pytest.mark.parametrize(("wire", "value"), ACTIONS)
def test_parse_action_accepts_the_seed_json_and_round_trips(wire: dict[str, Any], value: SessionAction) -> None:
    assert parse_action(wire) == value
    assert action_to_wire(value) == wire
    assert pickle.loads(pickle.dumps(value)) == value


def test_parse_action_accepts_tool_phase_in_snake_case() -> None:
    assert parse_action({"type": "tool_phase", "name": "t", "state": "running"}) == ToolPhase("t", "running")


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ({"type": "send", "text": "x"}, "id"),
        ({"type": "part", "part": {"type": "text-delta"}}, "part.delta"),
        ({"type": "part", "part": {"type": "finish"}, "within": []}, "within"),
        ({"type": "toolPhase", "name": "t", "state": "done"}, "state"),
        ({"type": "stop", "now": True}, "now"),
        ({"type": "jump"}, "type"),
    ],
)
def test_parse_action_names_the_bad_field(obj: dict[str, Any], field: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_action(obj)
    assert info.value.field == field


def rich_state() -> SessionState:
    nested = NestedRun(
        PVec([AgentMessage("r-1", "assistant", (TextPart("r-1:0", "4.99"),), 3)]),
        "error",
        SessionError("sub", "network"),
    )
    message = AgentMessage(
        "a-1",
        "assistant",
        (
            TextPart("a-1:0", "Hello"),
            ReasoningPart("a-1:1", "think"),
            ToolPart("c-1", "delegate_to_r", {"task": "x"}, "done", output="4.99", agent=nested),
            ToolPart("c-2", "t", state="awaiting-confirmation", prompt="ok?", input_text='{"a": [1'),
            ToolPart("c-3", "t", {}, "error", error="bad"),
            CompactionPart("k", "completed", "sum", 10, 8, {"inputTokens": 3}),
            DataPart("d", "card", {"x": [1, None, True, 1.5]}),
        ),
        7,
        {"status": "complete"},
    )
    user = AgentMessage("u-1", "user", (TextPart("u-1:0", "hi ✓"),))
    return SessionState(PVec([user, message]), "error", SessionError("boom", "rate_limited"))


def test_a_rich_state_round_trips_through_json_msgpack_and_pickle() -> None:
    state = rich_state()
    wire = state_to_wire(state)
    assert parse_state(wire) == state
    assert parse_state(unpack(pack(wire))) == state
    assert pickle.loads(pickle.dumps(state)) == state
    for message in state.messages:
        assert parse_message(message_to_wire(message)) == message
        assert pickle.loads(pickle.dumps(message)) == message


def test_a_streaming_tool_call_shows_its_draft_on_the_wire() -> None:
    call = rich_state().messages[1].parts[3]
    assert isinstance(call, ToolPart)
    wire = state_to_wire(rich_state())["messages"][1]["parts"][3]
    assert wire["inputText"] == '{"a": [1'
    assert wire["input"] == {"a": [1]}
    assert call.input == {"a": [1]}


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ({"messages": [{"id": "m", "role": "robot"}]}, "messages[0].role"),
        (
            {"messages": [{"id": "m", "role": "user", "parts": [{"type": "tool", "id": "c", "name": "t"}]}]},
            "messages[0].parts[0].state",
        ),
        ({"status": "busy"}, "status"),
        ({"error": {"message": "x", "code": "oops"}}, "error.code"),
        ({"messages": {}}, "messages"),
    ],
)
def test_parse_state_names_the_bad_field(obj: dict[str, Any], field: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_state(obj)
    assert info.value.field == field


def test_values_are_immutable() -> None:
    state = rich_state()
    call = state.messages[1].parts[2]
    with pytest.raises(AttributeError):
        call.state = "running"  # type: ignore[union-attr]
    with pytest.raises(AttributeError):
        state.messages[0].parts[0].id = "x"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        state.status = "idle"  # type: ignore[misc]


@pytest.mark.parametrize(
    "error",
    [
        errors.TroupeError("root"),
        errors.UsageError("use"),
        errors.ParseError("bad", "a.b"),
        errors.ConfigError("cfg"),
        errors.RunError("run"),
        errors.ModelError("model", "network"),
        errors.ToolError("tool"),
        errors.ToolError("slow timed out after 1 s", "timeout"),
        errors.StoreError("store"),
        errors.ConcurrencyConflict("moved", "s-1", 3, 4),
        errors.PartialDuplicateBatch("dup", "e-1"),
    ],
)
def test_every_error_pickles_with_its_fields(error: errors.TroupeError) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert copy.message == error.message
    assert copy.__dict__ == error.__dict__
    assert str(copy) == str(error)


def test_a_tool_error_keeps_its_code_across_a_pickle() -> None:
    copy = pickle.loads(pickle.dumps(errors.ToolError("slow timed out after 1 s", "timeout")))
    assert (copy.message, copy.code) == ("slow timed out after 1 s", "timeout")
    assert errors.ToolError("failed").code is None


def test_every_exported_name_imports() -> None:
    eager = [n for n in orchestrator.__all__ if n not in {"Runtime", "tool", "ToolContext"}]
    for name in eager:
        assert getattr(orchestrator, name) is not None, name


# -- built-in event payloads ---------------------------------------------------------------------

PAYLOADS: list[tuple[str, dict[str, Any]]] = [
    ("ai.input", {"role": "user", "text": "Hi", "generate": True, "steer": "t1"}),
    ("ai.input.move", {"inputId": "u-1", "beforeId": None}),
    ("ai.turn.stop", {"turnId": None, "cancelQueued": True}),
    ("ai.control.decided", {"commandId": "u-1", "outcome": "rejected", "reason": "not-pending"}),
    ("ai.turn.started", {"turnId": "t1", "inputIds": ["u-1", "u-2"], "messageId": "t1:reply", "retry": False}),
    ("ai.stream", {"stepId": "t1.s0", "parts": [{"type": "text-delta", "delta": "Hi"}, {"type": "finish"}]}),
    ("ai.stream", {"callId": "c1", "parts": [{"type": "tool-result", "id": "c1", "output": 1, "preliminary": True}]}),
    ("ai.step.finished", {"stepId": "s", "finishReason": "tool-calls", "toolCalls": [{"id": "c1", "name": "x"}]}),
    ("ai.tool.finished", {"callId": "c1", "output": None}),
    ("ai.nested", {"callId": "c1", "seq": 2, "actions": [{"type": "send", "id": "u", "text": "t"}, {"type": "stop"}]}),
    ("ai.compaction", {"id": "k", "status": "completed", "summary": "S", "through": 3, "usage": {"inputTokens": 1}}),
    ("ai.turn.retry", {}),
]


@pytest.mark.parametrize(("kind", "wire"), PAYLOADS)
def test_a_builtin_payload_reads_the_same_checked_and_trusted_and_writes_its_wire_shape(
    kind: str, wire: dict[str, Any]
) -> None:
    checked = parse_payload(kind, wire)
    assert checked == payload_from_wire(kind, wire)
    assert checked.type == kind
    assert payload_to_wire(checked) == wire
    assert unpack(pack(payload_to_wire(checked))) == wire


@pytest.mark.parametrize(
    ("kind", "wire", "where"),
    [
        ("ai.turn.started", {"turnId": "t1", "inputIds": [1], "messageId": "m"}, "payload.inputIds.0"),
        ("ai.turn.started", {"turnId": "t1", "inputIds": [], "messageId": "m", "bogus": 1}, "payload.bogus"),
        ("ai.tool.started", {"name": "x"}, "payload.callId"),
        ("ai.stream", {"parts": [{"type": "text-delta"}]}, "payload.parts[0].delta"),
        ("ai.turn.phase", {"turnId": "t1", "phase": "dancing"}, "payload.phase"),
    ],
)
def test_a_bad_builtin_payload_is_refused_naming_the_field(kind: str, wire: dict[str, Any], where: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse_payload(kind, wire)
    assert caught.value.field == where
    assert kind in caught.value.message


def test_parse_payload_refuses_an_app_type_and_a_non_object() -> None:
    with pytest.raises(ParseError, match="not a built-in event type"):
        parse_payload("cart.item_added", {})
    with pytest.raises(ParseError, match="must be an object"):
        parse_payload("ai.input", ["x"])


def test_an_event_made_typed_and_the_same_event_read_from_wire_are_the_same_content() -> None:
    typed = Event("e-1", "ai.stream", data=payloads.Stream("t1.s0", parts=(TextDelta("Hi"), Finish())))
    assert typed.payload == {"stepId": "t1.s0", "parts": [{"type": "text-delta", "delta": "Hi"}, {"type": "finish"}]}
    stored = Event("e-1", "ai.stream", unpack(pack(typed.payload)), 5.0, "s", 3)
    assert stored.data == typed.data
    assert stored.same_content(typed) and typed.same_content(stored)
    changed = Event("e-1", "ai.stream", data=payloads.Stream("t1.s0", parts=(TextDelta("Ho"),)))
    assert not changed.same_content(typed)
    assert pickle.loads(pickle.dumps(stored)) == stored
    assert pickle.loads(pickle.dumps(stored)).data == stored.data


def test_an_event_whose_typed_payload_is_of_another_type_is_refused() -> None:
    with pytest.raises(UsageError, match=r"ai\.turn\.retry"):
        Event("e-1", "ai.stream", data=payloads.TurnRetry())


def test_an_app_event_has_no_typed_payload() -> None:
    assert Event("e-1", "cart.item_added", {"slug": "mug"}).data is None
