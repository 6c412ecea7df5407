"""Commands against the fold: every outcome and rejection reason the conversations seed names."""

from __future__ import annotations

import pytest

from orchestrator.core import event_types as ai
from orchestrator.core import payloads
from orchestrator.core.aistate import ActiveTurn, AIState
from orchestrator.core.commands import (
    EditInput,
    MoveInput,
    PauseSession,
    RemoveInput,
    Respond,
    ResumeSession,
    RetryTurn,
    SendInput,
    SendNow,
    StopTurn,
    command_event,
    decide,
    idempotent_id,
)
from orchestrator.core.errors import UsageError
from orchestrator.core.events import Event
from orchestrator.core.fold import CLOSED, DENIED
from orchestrator.core.parts import ToolPart
from orchestrator.core.plan import RunStep, RunTool
from orchestrator.core.stream import Failure, TextDelta, ToolCall

from .driver import Driver


def active(driver: Driver) -> ActiveTurn | None:
    return driver.state.active


def turn(driver: Driver) -> ActiveTurn:
    current = driver.state.active
    assert current is not None, "no active turn"
    return current


def status(driver: Driver) -> str:
    return driver.state.status


def texts(driver: Driver) -> list[str]:
    return [m.text for m in driver.state.messages]


def queue(driver: Driver) -> list[str]:
    return [i.id for i in driver.state.inbox.items]


def call(driver: Driver, call_id: str) -> ToolPart:
    for message in driver.state.messages:
        for part in message.parts:
            if isinstance(part, ToolPart) and part.id == call_id:
                return part
    raise AssertionError(call_id)


def busy() -> Driver:
    """A session with turn t1 running its first model step's tool (add_to_cart)."""
    d = Driver()
    d.submit(SendInput("u-1", "two mugs"))
    d.step(TextDelta("Adding."), ToolCall("c-1", "add_to_cart", {"qty": 2}))
    return d


# -- persistence and decisions -------------------------------------------------------------------


def test_every_command_is_persisted_then_decided() -> None:
    d = Driver()
    decision = d.submit(SendInput("u-1", "hi"), settle=False)
    assert [e.type for e in decision.events] == [ai.INPUT, ai.DECIDED]
    assert decision.events[0].id == "u-1"
    assert decision.events[1].payload == {"commandId": "u-1", "outcome": "applied"}
    assert d.state.receipt is not None and d.state.receipt.outcome == "applied"


def test_a_rejection_is_a_normal_result_with_its_reason() -> None:
    d = Driver()
    decision = d.submit(RemoveInput("r-1", "nope"))
    assert not decision.applied
    assert decision.receipt is not None and decision.receipt.reason == "not-pending"
    assert [e.type for e in d.log] == [ai.INPUT_REMOVE, ai.DECIDED]
    assert d.state.receipt == decision.receipt


def test_malformed_commands_raise_before_anything_is_written() -> None:
    d = Driver()
    with pytest.raises(UsageError, match="empty"):
        d.submit(SendInput("u-1", "   "))
    with pytest.raises(UsageError, match="reserved prefix"):
        d.submit(SendInput("troupe:x", "hi"))
    with pytest.raises(UsageError, match="after-turn"):
        command_event(PauseSession("p", "later"))  # type: ignore[arg-type]
    assert d.log == []


# -- send and admission ----------------------------------------------------------------------------


def test_an_idle_unpaused_send_starts_a_turn() -> None:
    d = Driver()
    d.submit(SendInput("u-1", "hi"))
    assert texts(d) == ["hi"]
    assert turn(d).input == ("u-1",)
    assert turn(d).phase == "starting"
    assert status(d) == "streaming"
    assert isinstance(d.settle(), RunStep)


def test_inputs_are_admitted_one_at_a_time() -> None:
    d = busy()
    d.submit(SendInput("u-2", "and a bowl"))
    d.submit(SendInput("u-3", "and a plate"))
    assert queue(d) == ["u-2", "u-3"]
    assert "and a bowl" not in texts(d)
    d.tool_done("Added.")
    d.step(TextDelta("Done."))
    assert turn(d).input == ("u-2",)
    assert queue(d) == ["u-3"]


def test_passive_context_enters_with_the_next_generating_input() -> None:
    d = busy()
    d.submit(SendInput("ctx", "FYI: the shop closes at 6", role="system", generate=False))
    d.submit(SendInput("u-2", "anything else?"))
    d.tool_done()
    d.step(TextDelta("Done."))
    assert turn(d).input == ("ctx", "u-2")
    assert [m.id for m in d.state.messages][-2:] == ["ctx", "u-2"]


def test_only_passive_inputs_enter_without_a_turn() -> None:
    d = Driver()
    d.submit(SendInput("ctx", "note", generate=False))
    assert active(d) is None
    assert texts(d) == ["note"]
    assert queue(d) == []


# -- queue.edit -------------------------------------------------------------------------------------


def test_edit_replaces_a_pending_input_last_write_wins_keeping_identity() -> None:
    d = busy()
    d.submit(SendInput("u-2", "one bowl"))
    d.submit(EditInput("e-1", "u-2", "two bowls"))
    d.submit(EditInput("e-2", "u-2", "three bowls"))
    (item,) = d.state.inbox.items
    assert (item.id, item.role, item.text) == ("u-2", "user", "three bowls")


def test_edit_that_changes_the_role_is_role_mismatch() -> None:
    d = busy()
    d.submit(SendInput("u-2", "one bowl"))
    decision = d.submit(EditInput("e-1", "u-2", "x", role="system"))
    assert decision.receipt is not None and decision.receipt.reason == "role-mismatch"
    assert d.state.inbox.items[0].text == "one bowl"


def test_edit_that_loses_to_admission_is_not_pending() -> None:
    d = Driver()
    d.submit(SendInput("u-1", "hi"))  # admitted at once
    decision = d.submit(EditInput("e-1", "u-1", "hello"))
    assert decision.receipt is not None and decision.receipt.reason == "not-pending"
    assert texts(d) == ["hi"]


# -- queue.move and queue.remove --------------------------------------------------------------------


def test_move_before_an_input_or_to_the_end() -> None:
    d = busy()
    for i in (2, 3, 4):
        d.submit(SendInput(f"u-{i}", f"m{i}"))
    d.submit(MoveInput("m-1", "u-4", "u-2"))
    assert queue(d) == ["u-4", "u-2", "u-3"]
    d.submit(MoveInput("m-2", "u-4", None))
    assert queue(d) == ["u-2", "u-3", "u-4"]
    decision = d.submit(MoveInput("m-3", "gone", None))
    assert decision.receipt is not None and decision.receipt.reason == "not-pending"


def test_remove_keeps_the_submission_in_the_log_and_never_admits_it() -> None:
    d = busy()
    d.submit(SendInput("u-2", "bowl"))
    d.submit(RemoveInput("r-1", "u-2"))
    assert queue(d) == []
    assert any(e.id == "u-2" and e.type == ai.INPUT for e in d.log)
    again = d.submit(RemoveInput("r-2", "u-2"))
    assert again.receipt is not None and again.receipt.reason == "not-pending"
    d.tool_done()
    d.step(TextDelta("Done."))
    assert active(d) is None
    assert d.replay().inbox.items == ()


def test_remove_of_an_admitted_input_is_not_pending() -> None:
    d = busy()
    decision = d.submit(RemoveInput("r-1", "u-1"))
    assert decision.receipt is not None and decision.receipt.reason == "not-pending"


# -- steer and send now ------------------------------------------------------------------------------


def test_steer_hands_off_after_the_current_response_and_its_tools() -> None:
    d = busy()
    d.submit(SendInput("s-1", "actually, blue mugs", steer="t1"))
    d.submit(SendInput("s-2", "and only one", steer="t1"))
    assert queue(d) == ["s-1", "s-2"]
    assert turn(d).id == "t1"
    d.tool_done("Added.")  # the response's tool finishes first
    current = turn(d)
    assert current.id == "t2"
    assert current.input == ("s-1", "s-2")  # together, the last one generating
    assert d.state.last_turn == ("t1", "handed-off")
    assert call(d, "c-1").state == "done"  # output produced before the handoff stays


def test_steering_goes_after_earlier_steering_and_before_queued_input() -> None:
    d = busy()
    d.submit(SendInput("u-2", "later"))
    d.submit(SendInput("s-1", "steer one", steer="t1"))
    d.submit(SendInput("s-2", "steer two", steer="t1"))
    assert queue(d) == ["s-1", "s-2", "u-2"]


def test_steer_with_no_active_turn_sends_like_a_message() -> None:
    d = Driver()
    d.submit(SendInput("s-1", "hello", steer="t9"))
    assert turn(d).input == ("s-1",)


def test_steering_closes_an_unanswered_approval_so_the_tool_never_runs() -> None:
    d = Driver()
    d.submit(SendInput("u-1", "delete it"))
    d.step(ToolCall("c-1", "rm", {}))
    d.tool_done(approval="i-1")
    assert call(d, "c-1").state == "awaiting-confirmation"
    d.submit(SendInput("s-1", "no wait", steer="t1"))
    assert turn(d).id == "t2"
    assert d.state.interactions["i-1"].status == "closed"
    assert call(d, "c-1").state == "cancelled"
    assert call(d, "c-1").error == CLOSED
    assert d.state.tools["c-1"].attempts == 0


def test_a_denied_approval_never_blocks_the_handoff() -> None:
    d = Driver()
    d.submit(SendInput("u-1", "delete it"))
    d.step(ToolCall("c-1", "rm", {}))
    d.tool_done(approval="i-1")
    d.submit(Respond("a-1", "i-1", approved=False))
    assert call(d, "c-1").error == DENIED
    d.submit(SendInput("s-1", "ok then", steer="t1"))
    assert turn(d).id == "t2"


def test_send_now_hands_a_queued_input_off_after_earlier_steering() -> None:
    d = busy()
    d.submit(SendInput("u-2", "queued"))
    d.submit(SendInput("s-1", "steer", steer="t1"))
    d.submit(SendNow("n-1", "u-2", "t1"))
    assert queue(d) == ["s-1", "u-2"]
    assert d.state.inbox.items[1].after_step_of == "t1"
    d.tool_done()
    assert turn(d).input == ("s-1", "u-2")


def test_send_now_promotes_passive_user_input_to_generation() -> None:
    d = busy()
    d.submit(SendInput("u-2", "fyi", generate=False))
    d.submit(SendNow("n-1", "u-2", "t1"))
    assert d.state.inbox.items[0].generate


def test_send_now_of_non_user_context_is_not_user_input() -> None:
    d = busy()
    d.submit(SendInput("ctx", "note", role="system", generate=False))
    decision = d.submit(SendNow("n-1", "ctx", "t1"))
    assert decision.receipt is not None and decision.receipt.reason == "not-user-input"


def test_send_now_with_a_stale_observed_turn_leaves_the_queue_alone() -> None:
    d = busy()
    d.submit(SendInput("u-2", "a"))
    d.submit(SendInput("u-3", "b"))
    decision = d.submit(SendNow("n-1", "u-3", "t0"))
    assert decision.receipt is not None and decision.receipt.reason == "stale-turn"
    assert queue(d) == ["u-2", "u-3"]


def test_send_now_with_no_active_turn_admits_it_next() -> None:
    d = Driver()
    d.submit(PauseSession("p-1"))
    d.submit(SendInput("u-1", "a"))
    d.submit(SendInput("u-2", "b"))
    d.submit(SendNow("n-1", "u-2"))
    assert queue(d) == ["u-2", "u-1"]


# -- stop ---------------------------------------------------------------------------------------------


def test_stop_ends_the_turn_cancels_open_calls_and_admits_the_next_input() -> None:
    d = busy()
    d.submit(SendInput("u-2", "next"))
    d.submit(StopTurn("x-1", "t1"))
    assert call(d, "c-1").state == "cancelled"
    assert d.state.last_turn == ("t1", "stopped")
    assert turn(d).input == ("u-2",)


def test_stop_cancels_the_turns_steering() -> None:
    d = busy()
    d.submit(SendInput("s-1", "steer", steer="t1"))
    d.submit(SendInput("u-2", "queued"))
    d.submit(StopTurn("x-1", "t1"))
    assert turn(d).input == ("u-2",)


def test_stop_aimed_at_a_finished_turn_is_stale_turn() -> None:
    d = busy()
    d.tool_done()
    d.step(TextDelta("Done."))
    decision = d.submit(StopTurn("x-1", "t1"))
    assert decision.receipt is not None and decision.receipt.reason == "stale-turn"


def test_stop_with_nothing_to_address_writes_nothing() -> None:
    d = Driver()
    decision = d.submit(StopTurn("x-1"))
    assert decision.events == () and decision.receipt is None
    assert d.log == []


def test_stop_with_cancel_queued_clears_the_inbox() -> None:
    d = busy()
    d.submit(SendInput("u-2", "a"))
    d.submit(StopTurn("x-1", "t1", cancel_queued=True))
    assert active(d) is None and queue(d) == []


# -- pause and resume ---------------------------------------------------------------------------------


def test_pause_after_turn_lets_the_turn_finish_and_holds_admission() -> None:
    d = busy()
    d.submit(SendInput("u-2", "next"))
    d.submit(PauseSession("p-1", "after-turn"))
    d.tool_done()
    d.step(TextDelta("Done."))
    assert active(d) is None
    assert queue(d) == ["u-2"]
    assert d.state.inbox.paused
    d.submit(ResumeSession("r-1"))
    assert turn(d).input == ("u-2",)


def test_pause_now_goes_pausing_then_paused_and_resume_continues_the_turn() -> None:
    d = busy()
    d.submit(PauseSession("p-1", "now"))
    # Nothing is running between steps, so the pause settles at once.
    assert turn(d).phase == "paused"
    assert d.settle() is None
    d.submit(SendInput("u-2", "queued while paused"))
    d.submit(ResumeSession("r-1"))
    assert turn(d).id == "t1"  # retained work first
    assert isinstance(d.settle(), RunTool)
    d.tool_done()
    d.step(TextDelta("Done."))
    assert turn(d).input == ("u-2",)


def test_while_paused_every_send_waits_in_the_inbox() -> None:
    d = Driver()
    d.submit(PauseSession("p-1"))
    d.submit(SendInput("u-1", "hi"))
    assert active(d) is None and queue(d) == ["u-1"]


def test_steering_a_paused_turn_enters_together_on_resume_without_its_own_work() -> None:
    d = busy()
    d.submit(PauseSession("p-1", "now"))
    d.submit(SendInput("s-1", "first", steer="t1"))
    d.submit(SendInput("s-2", "second", steer="t1"))
    assert turn(d).phase == "paused"
    d.submit(ResumeSession("r-1"))
    current = turn(d)
    assert current.id == "t2" and current.input == ("s-1", "s-2")
    assert d.state.tools["c-1"].attempts == 0  # the paused turn's tool never ran


# -- retry -----------------------------------------------------------------------------------------


def test_retry_without_a_user_message_is_nothing_to_retry() -> None:
    decision = Driver().submit(RetryTurn("r-1"))
    assert decision.receipt is not None and decision.receipt.reason == "nothing-to-retry"


def test_retry_resumes_from_the_last_finished_tool_call() -> None:
    d = Driver()
    d.submit(SendInput("u-1", "two mugs"))
    d.step(ToolCall("c-1", "add_to_cart", {}))
    d.tool_done("Added.")
    effect = d.settle()
    assert isinstance(effect, RunStep)
    d.append(Event("", ai.STEP_STARTED, {"turnId": "t1", "stepId": effect.step_id, "turnStep": 1, "sessionStep": 1}))
    d.append(Event("", ai.STREAM, {"stepId": effect.step_id, "parts": [{"type": "text-delta", "delta": "cut sh"}]}))
    d.append(Event("", ai.STEP_FAILED, {"stepId": effect.step_id, "error": "down", "code": "network"}))
    d.append(Event("", ai.TURN_FINISHED, {"turnId": "t1", "outcome": "failed", "error": "down", "code": "network"}))
    assert status(d) == "error"
    d.submit(RetryTurn("r-1"))
    assert turn(d).id == "t2"
    assert status(d) == "streaming"
    assert [p.type for p in d.state.messages[-1].parts] == ["tool"]
    assert call(d, "c-1").state == "done"


def test_retry_supersedes_a_running_turn() -> None:
    d = busy()
    d.submit(RetryTurn("r-1"))
    assert d.state.last_turn == ("t1", "superseded")
    assert turn(d).id == "t2"


# -- respond ---------------------------------------------------------------------------------------


def test_respond_approved_lets_the_tool_run() -> None:
    d = Driver()
    d.submit(SendInput("u-1", "delete it"))
    d.step(ToolCall("c-1", "rm", {}))
    d.tool_done(approval="i-1")
    d.submit(Respond("a-1", "i-1", approved=True))
    assert d.state.interactions["i-1"].status == "approved"
    d.tool_done("removed")
    assert call(d, "c-1").state == "done"


def test_respond_denied_ends_the_call_and_tells_the_model() -> None:
    d = Driver()
    d.submit(SendInput("u-1", "delete it"))
    d.step(ToolCall("c-1", "rm", {}))
    d.tool_done(approval="i-1")
    d.submit(Respond("a-1", "i-1", approved=False, reason="too risky"))
    part = call(d, "c-1")
    assert part.state == "error" and part.error == f"{DENIED} Reason: too risky"
    assert d.state.tools["c-1"].status == "denied"
    assert isinstance(d.settle(), RunStep)  # the model hears about it next


def test_respond_to_an_unknown_or_answered_interaction_is_not_pending() -> None:
    d = Driver()
    assert d.submit(Respond("a-1", "nope", True)).receipt.reason == "not-pending"  # type: ignore[union-attr]


# -- identity ---------------------------------------------------------------------------------------


def test_idempotent_id_is_stable_and_distinct() -> None:
    assert idempotent_id("room", "s-1", "evt-9") == idempotent_id("room", "s-1", "evt-9")
    assert idempotent_id("room", "s-1", "evt-9") != idempotent_id("room", "s-2", "evt-9")
    assert not idempotent_id("a").startswith("troupe:")
    with pytest.raises(UsageError):
        idempotent_id()


def test_the_message_id_is_the_input_event_id() -> None:
    d = Driver()
    d.submit(SendInput("u-77", "hi"))
    assert d.state.messages[0].id == "u-77"


def test_replaying_the_log_equals_the_kept_state() -> None:
    d = busy()
    d.submit(SendInput("u-2", "a"))
    d.submit(SendInput("s-1", "b", steer="t1"))
    d.tool_done()
    d.step(TextDelta("ok"), Failure("x"))
    assert d.replay() == d.state


def test_decide_is_pure() -> None:
    d = busy()
    before = d.state
    decide(before, StopTurn("x", "t1"))
    assert d.state is before


def test_decide_writes_typed_payloads_in_the_permanent_wire_shape() -> None:
    decision = decide(AIState(), SendInput("u-1", "Hi"), at=7.0)
    command, decided = decision.events
    assert command.data == payloads.Input("user", "Hi", True)
    assert command.payload == {"role": "user", "text": "Hi", "generate": True}
    assert decided.data == payloads.Decided("u-1", "applied")
    assert decided.payload == {"commandId": "u-1", "outcome": "applied"}
    moved = command_event(MoveInput("m-1", "u-1"))
    assert moved.payload == {"inputId": "u-1", "beforeId": None}  # null kept, as every log has it
