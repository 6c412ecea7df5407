"""The session reducer: every row of the seed's Actions and Stream parts tables, and garbage."""

from __future__ import annotations

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
    parse_action,
    parse_part,
    resumable,
    session_reducer,
)
from orchestrator.core.actions import SessionAction
from orchestrator.core.reducer import CANCELLED_BY_ERROR, CANCELLED_BY_USER
from orchestrator.core.stream import AgentStreamPart


def run(state: SessionState, *actions: SessionAction | AgentStreamPart) -> SessionState:
    for action in actions:
        step = action if isinstance(action, Send | ApplyPart | ToolPhase | Stop | Retry | Reset) else ApplyPart(action)
        state = session_reducer(state, step)
    return state


def started(*parts: AgentStreamPart) -> SessionState:
    """A session with one user message and an assistant message `a-1` with ``parts`` applied."""
    return run(SessionState(), Send("u-1", "hi"), MessageStart("a-1"), *parts)


def tool(state: SessionState, call_id: str) -> ToolPart:
    for message in state.messages:
        for part in message.parts:
            if isinstance(part, ToolPart) and part.id == call_id:
                return part
    raise AssertionError(f"no call {call_id}")


# -- the seed's worked example ------------------------------------------------------------------


def test_seed_example_error_then_resumable_through_the_finished_call() -> None:
    state = SessionState()
    state = session_reducer(state, parse_action({"type": "send", "id": "u-1", "text": "Add two mugs to the cart"}))
    for part in [
        {"type": "message-start", "messageId": "a-1"},
        {
            "type": "tool-call",
            "messageId": "a-1",
            "id": "call-1",
            "name": "add_to_cart",
            "input": {"slug": "mug", "qty": 2},
        },
        {"type": "tool-result", "id": "call-1", "output": {"content": [{"type": "text", "text": "Added."}]}},
        {"type": "error", "error": "Couldn't reach the assistant.", "code": "network"},
    ]:
        state = session_reducer(state, parse_action({"type": "part", "part": part}))
        assert parse_action({"type": "part", "part": part}) == ApplyPart(parse_part(part))
    assert state.status == "error"
    assert state.error == SessionError("Couldn't reach the assistant.", "network")
    assert len(resumable(state.messages)) == 2


# -- actions -----------------------------------------------------------------------------------


def test_send_appends_a_user_message_with_one_text_part_streams_and_clears_the_error() -> None:
    failed = run(started(), Failure("boom"))
    state = session_reducer(failed, Send("u-2", "again"))
    last = state.messages[-1]
    assert last == AgentMessage("u-2", "user", (TextPart("u-2:0", "again"),))
    assert state.status == "streaming"
    assert state.error is None


def test_send_with_an_existing_id_changes_nothing() -> None:
    state = started()
    assert session_reducer(state, Send("u-1", "dup")) is state


def test_stop_idles_and_cancels_open_calls_nested_ones_included() -> None:
    state = started(ToolCall("c-1", "delegate_to_r", {}), ToolCall("c-2", "ask", {}))
    state = session_reducer(state, ToolPhase("ask", "awaiting-confirmation", "OK?"))
    state = run(state, ApplyPart(MessageStart("n-1"), "c-1"), ApplyPart(ToolCall("c-3", "lookup", {}), "c-1"))
    state = session_reducer(state, Stop())
    assert state.status == "idle"
    for call_id in ("c-1", "c-2"):
        assert tool(state, call_id).state == "cancelled"
        assert tool(state, call_id).error == CANCELLED_BY_USER
    nested = tool(state, "c-1").agent
    assert nested is not None
    assert nested.status == "idle"
    inner = nested.messages[0].parts[0]
    assert isinstance(inner, ToolPart) and inner.state == "cancelled"


def test_stop_leaves_finished_calls_alone() -> None:
    state = started(ToolCall("c-1", "t", {}), ToolResult("c-1", "ok"))
    state = session_reducer(state, Stop())
    assert tool(state, "c-1").state == "done"


def test_retry_without_a_user_message_is_a_no_op() -> None:
    state = run(SessionState(), MessageStart("a-0"), TextDelta("hello"))
    assert session_reducer(state, Retry()) is state


def test_retry_streams_and_resumes_from_resumable() -> None:
    state = started(ToolCall("c-1", "t", {}), ToolResult("c-1", "ok"), TextDelta("half a rep"), Failure("down"))
    state = session_reducer(state, Retry())
    assert state.status == "streaming"
    assert state.error is None
    assert [p.type for p in state.messages[-1].parts] == ["tool"]


def test_reset_returns_the_empty_session() -> None:
    assert session_reducer(started(TextDelta("x")), Reset()) == SessionState()


def test_tool_phase_sets_the_newest_open_call_of_that_name() -> None:
    state = started(ToolCall("c-1", "t", {}), ToolResult("c-1", "ok"), ToolCall("c-2", "t", {}))
    state = session_reducer(state, ToolPhase("t", "awaiting-confirmation", "Allow?"))
    assert tool(state, "c-2").state == "awaiting-confirmation"
    assert tool(state, "c-2").prompt == "Allow?"
    assert tool(state, "c-1").state == "done"
    state = session_reducer(state, ToolPhase("t", "running"))
    assert tool(state, "c-2").state == "running"
    assert tool(state, "c-2").prompt is None


def test_tool_phase_returns_the_same_object_when_nothing_changes() -> None:
    state = started(ToolCall("c-1", "t", {}))
    assert session_reducer(state, ToolPhase("t", "running")) is state
    assert session_reducer(state, ToolPhase("missing", "running")) is state
    done = run(state, ToolResult("c-1", 1))
    assert session_reducer(done, ToolPhase("t", "awaiting-confirmation")) is done


def test_tool_phase_reaches_nested_calls() -> None:
    state = started(ToolCall("c-1", "delegate_to_r", {}))
    state = run(state, ApplyPart(MessageStart("n-1"), "c-1"), ApplyPart(ToolCall("c-2", "lookup", {}), "c-1"))
    state = session_reducer(state, ToolPhase("lookup", "awaiting-confirmation", "Look up?"))
    nested = tool(state, "c-1").agent
    assert nested is not None
    inner = nested.messages[0].parts[0]
    assert isinstance(inner, ToolPart) and inner.state == "awaiting-confirmation" and inner.prompt == "Look up?"


def test_tool_phase_by_id_addresses_one_call_exactly() -> None:
    state = started(ToolCall("c-1", "t", {}), ToolCall("c-2", "t", {}))
    state = session_reducer(state, ToolPhase("t", "awaiting-confirmation", "?", id="c-1"))
    assert tool(state, "c-1").state == "awaiting-confirmation"
    assert tool(state, "c-2").state == "running"


# -- stream parts ------------------------------------------------------------------------------


def test_message_start_appends_an_empty_assistant_message() -> None:
    state = run(SessionState(), Send("u-1", "hi"), MessageStart("a-1"))
    assert state.messages[-1] == AgentMessage("a-1", "assistant")


def test_message_start_twice_changes_nothing() -> None:
    state = started()
    assert session_reducer(state, ApplyPart(MessageStart("a-1"))) is state


def test_text_delta_appends_to_the_last_text_part_or_adds_one() -> None:
    state = started(TextDelta("Hel"), TextDelta("lo"))
    assert state.messages[-1].parts == (TextPart("a-1:0", "Hello"),)
    state = run(state, ToolCall("c-1", "t", {}), TextDelta("after"))
    parts = state.messages[-1].parts
    assert [p.type for p in parts] == ["text", "tool", "text"]
    assert parts[2] == TextPart("a-1:2", "after")


def test_text_delta_by_message_id_reaches_an_earlier_message() -> None:
    state = run(started(TextDelta("one")), Send("u-2", "more"), MessageStart("a-2"), TextDelta("x", "a-1"))
    assert state.messages[1].text == "onex"
    assert state.messages[3].text == ""


def test_reasoning_adds_a_reasoning_part() -> None:
    state = started(Reasoning("think"), Reasoning("more"))
    assert state.messages[-1].parts == (ReasoningPart("a-1:0", "think"), ReasoningPart("a-1:1", "more"))


def test_tool_call_adds_a_running_tool_part() -> None:
    state = started(ToolCall("c-1", "add_to_cart", {"slug": "mug"}))
    assert state.messages[-1].parts == (ToolPart("c-1", "add_to_cart", {"slug": "mug"}, "running"),)


def test_tool_input_deltas_carry_a_draft_then_the_call_completes_it() -> None:
    state = started(ToolInputDelta("c-1", '{"slug": "m', name="add_to_cart"), ToolInputDelta("c-1", 'ug", "qty"'))
    call = tool(state, "c-1")
    assert call.input_text == '{"slug": "mug", "qty"'
    assert call.input == {"slug": "mug"}
    assert call.state == "running"
    state = run(state, ToolCall("c-1", "add_to_cart", {"slug": "mug", "qty": 2}))
    call = tool(state, "c-1")
    assert call.input == {"slug": "mug", "qty": 2}
    assert call.input_text is None
    assert len(state.messages[-1].parts) == 1
    assert session_reducer(state, ApplyPart(ToolInputDelta("c-1", "late"))) is state


def test_tool_result_marks_the_call_done_with_its_output() -> None:
    state = started(ToolCall("c-1", "t", {}), ToolResult("c-1", {"ok": True}))
    assert tool(state, "c-1").state == "done"
    assert tool(state, "c-1").output == {"ok": True}


def test_preliminary_tool_output_shows_while_the_call_runs() -> None:
    state = started(ToolCall("c-1", "t", {}), ToolResult("c-1", "25%", preliminary=True))
    assert tool(state, "c-1").state == "running"
    assert tool(state, "c-1").output == "25%"
    state = run(state, ToolResult("c-1", "done!"))
    assert (tool(state, "c-1").state, tool(state, "c-1").output) == ("done", "done!")


def test_tool_error_is_error_or_cancelled_by_its_code() -> None:
    state = started(ToolCall("c-1", "t", {}), ToolCall("c-2", "t", {}))
    state = run(state, ToolFailure("c-1", "bad input"), ToolFailure("c-2", "stopped", "cancelled"))
    assert (tool(state, "c-1").state, tool(state, "c-1").error) == ("error", "bad input")
    assert (tool(state, "c-2").state, tool(state, "c-2").error) == ("cancelled", "stopped")


def test_step_finish_changes_nothing() -> None:
    state = started(TextDelta("x"))
    assert session_reducer(state, ApplyPart(StepFinish({"inputTokens": 3}, "stop"))) is state


def test_finish_idles_and_only_aborted_cancels_open_calls() -> None:
    state = started(ToolCall("c-1", "t", {}))
    done = run(state, Finish())
    assert done.status == "idle"
    assert tool(done, "c-1").state == "running"
    aborted = run(state, Finish("aborted"))
    assert aborted.status == "idle"
    assert tool(aborted, "c-1").state == "cancelled"


def test_error_sets_the_error_and_cancels_open_calls() -> None:
    state = started(ToolCall("c-1", "t", {}), Failure("limit", "rate_limited"))
    assert state.status == "error"
    assert state.error == SessionError("limit", "rate_limited")
    assert tool(state, "c-1").state == "cancelled"
    assert tool(state, "c-1").error == CANCELLED_BY_ERROR


def test_message_metadata_is_shallow_merged() -> None:
    state = started(MessageMetadata({"status": "writing"}), MessageMetadata({"status": "complete", "usage": {"n": 1}}))
    message = state.messages[-1]
    assert message.metadata == {"status": "complete", "usage": {"n": 1}}


def test_data_parts_are_added_and_replaced_by_id() -> None:
    state = started(DataUpdate("card", {"v": 1}, "d-1"), DataUpdate("card", {"v": 2}, "d-1"), DataUpdate("note", 3))
    assert state.messages[-1].parts == (DataPart("d-1", "card", {"v": 2}), DataPart("a-1:1", "note", 3))


def test_compaction_parts_are_upserted_by_id() -> None:
    state = started(CompactionUpdate("k-1", "running", input_tokens=900, threshold_tokens=800))
    state = run(state, CompactionUpdate("k-1", "completed", summary="short", input_tokens=900, threshold_tokens=800))
    assert state.messages[-1].parts == (CompactionPart("k-1", "completed", "short", 900, 800),)


def test_every_change_bumps_the_message_revision() -> None:
    state = started()
    revisions = [state.messages[-1].revision]
    for part in (TextDelta("a"), TextDelta("b"), ToolCall("c-1", "t", {}), ToolResult("c-1", 1)):
        state = run(state, part)
        revisions.append(state.messages[-1].revision)
    assert revisions == sorted(set(revisions))


# -- nested runs (within) ------------------------------------------------------------------------


def two_levels() -> SessionState:
    """A delegate call c-1 whose sub-agent made a delegate call c-2 with a running sub-sub-agent."""
    state = started(ToolCall("c-1", "delegate_to_researcher", {"task": "t"}))
    return run(
        state,
        ApplyPart(MessageStart("r-1"), "c-1"),
        ApplyPart(TextDelta("thinking"), "c-1"),
        ApplyPart(ToolCall("c-2", "delegate_to_pricer", {}), "c-1"),
        ApplyPart(MessageStart("p-1"), ("c-1", "c-2")),
    )


def nested(state: SessionState, *path: str) -> NestedRun:
    messages = state.messages
    run_: NestedRun | None = None
    for call_id in path:
        call = next(p for m in messages for p in m.parts if isinstance(p, ToolPart) and p.id == call_id)
        assert call.agent is not None
        run_ = call.agent
        messages = run_.messages
    assert run_ is not None
    return run_


def test_within_applies_the_part_to_the_delegate_calls_nested_run() -> None:
    state = two_levels()
    assert nested(state, "c-1").messages[0].text == "thinking"
    assert nested(state, "c-1").status == "streaming"


def test_within_a_single_call_id_is_found_at_any_depth() -> None:
    by_id = session_reducer(two_levels(), ApplyPart(TextDelta("4.99"), "c-2"))
    by_path = session_reducer(two_levels(), ApplyPart(TextDelta("4.99"), ("c-1", "c-2")))
    assert nested(by_id, "c-1", "c-2").messages[0].text == "4.99"
    assert by_id == by_path


def test_a_nested_finish_or_error_ends_only_the_nested_run() -> None:
    state = session_reducer(two_levels(), ApplyPart(Finish(), ("c-1", "c-2")))
    assert nested(state, "c-1", "c-2").status == "idle"
    assert nested(state, "c-1").status == "streaming"
    assert state.status == "streaming"
    state = session_reducer(state, ApplyPart(Failure("sub failed", "network"), "c-1"))
    assert nested(state, "c-1").status == "error"
    assert nested(state, "c-1").error == SessionError("sub failed", "network")
    assert state.status == "streaming"
    assert tool(state, "c-1").state == "running"


def test_stop_reaches_calls_two_levels_down() -> None:
    state = session_reducer(two_levels(), ApplyPart(ToolCall("c-3", "lookup_price", {}), ("c-1", "c-2")))
    state = session_reducer(state, Stop())
    inner = nested(state, "c-1", "c-2").messages[0].parts[0]
    assert isinstance(inner, ToolPart) and inner.state == "cancelled"
    assert tool(state, "c-1").state == "cancelled"


def test_within_that_names_no_call_changes_nothing() -> None:
    state = two_levels()
    assert session_reducer(state, ApplyPart(TextDelta("x"), "nope")) is state
    assert session_reducer(state, ApplyPart(TextDelta("x"), ("c-2",))) is state  # c-2 is not top-level
    assert session_reducer(state, ApplyPart(TextDelta("x"), ("c-1", "nope"))) is state


def test_nested_deltas_share_structure_with_the_previous_state() -> None:
    before = two_levels()
    after = session_reducer(before, ApplyPart(TextDelta("!"), "c-1"))
    assert after.messages[0] is before.messages[0]
    assert nested(after, "c-1", "c-2") is nested(before, "c-1", "c-2")


# -- parts that refer to nothing ----------------------------------------------------------------


def test_garbage_parts_never_raise_and_return_the_same_state() -> None:
    empty = SessionState()
    user_only = run(empty, Send("u-1", "hi"))
    cases: list[tuple[SessionState, AgentStreamPart]] = [
        (empty, TextDelta("orphan")),
        (user_only, TextDelta("before any assistant message")),
        (user_only, Reasoning("r")),
        (user_only, ToolCall("c-9", "t", {})),
        (started(), TextDelta("x", "no-such-message")),
        (started(), ToolResult("unknown", 1)),
        (started(), ToolFailure("unknown", "e")),
        (started(), TextDelta("")),
        (started(), ToolInputDelta("c", "")),
        (started(ToolCall("c-1", "t", {}), ToolResult("c-1", 1)), ToolResult("c-1", 2)),
        (started(ToolCall("c-1", "t", {}), ToolFailure("c-1", "e")), ToolResult("c-1", 2)),
        (started(), MessageMetadata({})),
        (empty, MessageMetadata({"a": 1})),
    ]
    for state, part in cases:
        assert session_reducer(state, ApplyPart(part)) is state, part


def test_a_late_result_for_a_cancelled_call_still_lands() -> None:
    state = run(started(ToolCall("c-1", "t", {})), Stop(), ToolResult("c-1", "late"))
    assert tool(state, "c-1").state == "done"


# -- resumable -----------------------------------------------------------------------------------


def test_resumable_keeps_through_the_last_finished_call_after_the_last_user_message() -> None:
    state = started(
        TextDelta("Sure."),
        ToolCall("c-1", "t", {}),
        ToolResult("c-1", 1),
        ToolCall("c-2", "t", {}),
        ToolFailure("c-2", "boom"),
        TextDelta("cut sh"),
        ToolCall("c-3", "t", {}),
    )
    kept = resumable(state.messages)
    assert [p.type for p in kept[-1].parts] == ["text", "tool", "tool"]
    assert kept[-1].parts[-1].id == "c-2"
    assert kept[-1].revision > state.messages[-1].revision


def test_resumable_with_no_finished_call_goes_back_to_the_last_user_message() -> None:
    state = started(TextDelta("partial"), ToolCall("c-1", "t", {}))
    kept = resumable(state.messages)
    assert [m.id for m in kept] == ["u-1"]


def test_resumable_ignores_finished_calls_before_the_last_user_message() -> None:
    state = run(
        started(ToolCall("c-1", "t", {}), ToolResult("c-1", 1), Finish()), Send("u-2", "next"), MessageStart("a-2")
    )
    state = run(state, TextDelta("partial"))
    assert [m.id for m in resumable(state.messages)] == ["u-1", "a-1", "u-2"]


def test_resumable_without_a_user_message_returns_the_messages_unchanged() -> None:
    state = run(SessionState(), MessageStart("a-0"), TextDelta("hi"))
    assert resumable(state.messages) is state.messages


def test_resumable_drops_later_messages_after_the_finished_call() -> None:
    state = started(ToolCall("c-1", "t", {}), ToolResult("c-1", 1))
    state = run(state, MessageStart("a-2"), TextDelta("more"))
    assert [m.id for m in resumable(state.messages)] == ["u-1", "a-1"]


def test_resumable_is_idempotent() -> None:
    state = started(ToolCall("c-1", "t", {}), ToolResult("c-1", 1), TextDelta("x"))
    once = resumable(state.messages)
    assert resumable(once) == once


def test_resumable_accepts_a_plain_list() -> None:
    messages = list(started(ToolCall("c-1", "t", {}), ToolResult("c-1", 1), TextDelta("x")).messages)
    assert len(resumable(messages)) == 2


def test_text_of_old_versions_never_changes() -> None:
    base = started(TextDelta("abc"))
    left = run(base, TextDelta("L"))
    right = run(base, TextDelta("R"))
    assert base.messages[-1].text == "abc"
    assert left.messages[-1].text == "abcL"
    assert right.messages[-1].text == "abcR"


def test_long_text_streams_into_one_part() -> None:
    state = started()
    for i in range(5000):
        state = run(state, TextDelta(f"{i:04d}"))
    assert state.messages[-1].text == "".join(f"{i:04d}" for i in range(5000))
    assert len(state.messages[-1].parts) == 1
