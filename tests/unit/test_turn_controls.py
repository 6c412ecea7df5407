"""Turn controls as the conversations seed has them, through the public API on LocalRuntime.

Pause holds steering and Send now; every turn-scoped command can name the turn it targets (a late
click is ``stale-turn``); a repeated stop or steer returns its first receipt; a move before itself
is a no-op; and a turn's outcome says how it ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, get_args

from actors.local import LocalRuntime
from orchestrator.core.aistate import AIState
from orchestrator.core.turn import TurnOutcome, TurnOutcomeKind
from orchestrator.run.agent import Agent
from orchestrator.testing import ScriptedModel, eventually
from tools import tool

TIMEOUT = 10


@tool(needs_approval=True)
async def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def waiting_agent(**options: Any) -> Agent:
    """Every turn asks to delete a file (and waits on its approval), then answers "done"."""
    steps: list[list[dict[str, Any]]] = [[{"tool": "delete_file", "input": {"path": "a"}}], [{"text": "done"}]]
    return Agent("a", "x", ScriptedModel(steps, per_turn=True), tools=[delete_file], **options)


async def state_of(session: Any) -> AIState:
    state: AIState = (await session.state()).state
    return state


async def until(session: Any, predicate: Callable[[AIState], bool], what: str) -> AIState:
    """The session's state once ``predicate`` holds for it."""
    seen: list[AIState] = []

    async def check() -> bool:
        state = await state_of(session)
        seen.append(state)
        return predicate(state)

    typed: Callable[[], bool | Awaitable[bool]] = check  # (mypy infers eventually's T from this)
    await eventually(typed, TIMEOUT, what=what)
    return seen[-1]


def phase(turn_id: str, name: str | None = None) -> Callable[[AIState], bool]:
    """``turn_id`` is active (in phase ``name``, when given)."""
    return lambda s: s.active is not None and s.active.id == turn_id and name in (None, s.active.phase)


async def awaiting(session: Any, turn_id: str) -> AIState:
    """Wait until ``turn_id`` is active and waits on its approval."""

    def pending(state: AIState) -> bool:
        return phase(turn_id)(state) and any(i.status == "pending" for i in state.interactions.values())

    return await until(session, pending, f"{turn_id} awaiting approval")


def idle(state: AIState) -> bool:
    return state.active is None and not state.inbox.items


# -- 1. steering and Send now preserve a pause ------------------------------------------------------------


async def test_steer_during_pause_after_turn_waits_first_in_the_queue_until_resume(rt: LocalRuntime) -> None:
    session = rt.session("s-1", agent=waiting_agent())
    turn = await session.prompt("delete a")
    await awaiting(session, "t1")
    await session.send("later", id="u-2")
    await session.pause("after-turn")
    assert (await session.steer("never mind", id="s-1", turn_id="t1")).outcome == "applied"

    paused = await until(session, phase("t1", "paused"), "the steered turn held at its handoff, paused")
    assert paused.turns == 1  # no new turn started while paused
    assert [i.id for i in paused.inbox.items] == ["s-1", "u-2"]  # the steering first

    await session.resume()
    assert (await asyncio.wait_for(turn.finished, TIMEOUT)).outcome == "handed-off"
    state = await until(session, phase("t2"), "t2 started")
    assert state.active is not None and state.active.input == ("s-1",)


async def test_send_now_during_pause_after_turn_waits_first_in_the_queue_until_resume(rt: LocalRuntime) -> None:
    session = rt.session("s-1", agent=waiting_agent())
    await session.prompt("delete a")
    await awaiting(session, "t1")
    await session.send("first", id="u-2")
    await session.send("second", id="u-3")
    await session.pause("after-turn")
    assert (await session.queue.send_now("u-3", "t1")).outcome == "applied"

    paused = await until(session, phase("t1", "paused"), "t1 paused at its handoff")
    assert paused.turns == 1 and [i.id for i in paused.inbox.items] == ["u-3", "u-2"]

    await session.resume()
    state = await until(session, phase("t2"), "t2 started")
    assert state.active is not None and state.active.input == ("u-3",)
    assert state.last_turn == ("t1", "handed-off")


# -- 2. a late stop never stops the next turn -------------------------------------------------------------


async def test_a_turns_stop_after_it_ended_is_stale_and_leaves_the_next_turn_running(rt: LocalRuntime) -> None:
    session = rt.session("s-1", agent=waiting_agent())
    first = await session.prompt("delete a")
    await awaiting(session, "t1")
    second = await session.prompt("delete b")
    assert (await session.stop(turn_id="t1")).receipt is not None  # t1 ends; t2 takes the next input
    await awaiting(session, "t2")
    assert await first.turn_id() == "t1" and await second.turn_id() == "t2"

    late = await first.stop()
    assert late.receipt is not None and late.receipt.reason == "stale-turn"
    assert late.cancelled_queued_prompts == 0
    named = await session.stop(turn_id="t1")
    assert named.receipt is not None and named.receipt.reason == "stale-turn"
    state = await state_of(session)
    assert state.active is not None and state.active.id == "t2"  # still running

    stopped = await second.stop()
    assert stopped.receipt is not None and stopped.receipt.outcome == "applied"
    assert (await asyncio.wait_for(second.finished, TIMEOUT)).outcome == "stopped"


async def test_a_prompt_still_queued_has_no_turn_to_stop(rt: LocalRuntime) -> None:
    session = rt.session("s-1", agent=waiting_agent())
    await session.prompt("delete a")
    await awaiting(session, "t1")
    queued = await session.prompt("delete b")
    assert await queued.turn_id() is None
    result = await queued.stop()
    assert result.receipt is None
    state = await state_of(session)
    assert state.active is not None and state.active.id == "t1"


async def test_a_turns_steer_after_it_ended_is_sent_and_never_steers_the_next_turn(rt: LocalRuntime) -> None:
    session = rt.session("s-1", agent=waiting_agent())
    first = await session.prompt("delete a")
    await awaiting(session, "t1")
    await session.prompt("delete b")
    await first.stop()
    await awaiting(session, "t2")
    receipt = await first.steer("about a", id="s-late")
    assert receipt.outcome == "applied"
    state = await state_of(session)
    item = state.inbox.get("s-late")
    assert item is not None and item.after_step_of is None  # queued, not steering t2
    assert state.active is not None and state.active.id == "t2"


async def test_retry_naming_an_older_turn_is_stale(rt: LocalRuntime) -> None:
    session = rt.session("s-1", agent=waiting_agent())
    await session.prompt("delete a")
    await awaiting(session, "t1")
    await session.prompt("delete b")
    await session.stop(turn_id="t1")
    await awaiting(session, "t2")
    stale = await session.retry(turn_id="t1")
    assert stale.reason == "stale-turn"
    state = await state_of(session)
    assert state.active is not None and state.active.id == "t2" and not state.retry_requested
    assert (await session.retry(turn_id="t2")).outcome == "applied"


# -- 3. a repeated stop or steer returns its first receipt --------------------------------------------------


async def test_a_repeated_stop_returns_its_first_receipt_after_the_turn_changed(rt: LocalRuntime) -> None:
    session = rt.session("s-1", agent=waiting_agent())
    await session.prompt("delete a")
    await awaiting(session, "t1")
    await session.prompt("delete b")
    first = await session.stop(id="x-1")
    assert first.receipt is not None and first.receipt.outcome == "applied"
    await awaiting(session, "t2")  # the queued prompt's turn

    again = await session.stop(id="x-1")
    assert again == first
    state = await state_of(session)
    assert state.active is not None and state.active.id == "t2"  # the repeat stopped nothing
    assert state.last_turn == ("t1", "stopped")

    await session.stop(turn_id="t2")
    await until(session, idle, "the session idle")
    assert await session.stop(id="x-1") == first  # and with no turn active


async def test_a_repeated_stop_reports_the_queued_prompts_it_cancelled(rt: LocalRuntime) -> None:
    session = rt.session("s-1", agent=waiting_agent())
    await session.prompt("delete a")
    await awaiting(session, "t1")
    await session.send("queued", id="u-2")
    first = await session.stop(cancel_queued=True, id="x-1")
    assert first.cancelled_queued_prompts == 1
    await until(session, idle, "the session idle")
    assert await session.stop(cancel_queued=True, id="x-1") == first
    reused = await session.stop(cancel_queued=False, id="x-1")
    assert reused.receipt is not None and reused.receipt.reason == "PARTIAL_DUPLICATE_BATCH"


async def test_a_repeated_steer_returns_its_first_receipt_after_the_turn_changed(rt: LocalRuntime) -> None:
    session = rt.session("s-1", agent=waiting_agent())
    await session.prompt("delete a")
    await awaiting(session, "t1")
    first = await session.steer("no, b", id="s-1")
    assert first.outcome == "applied"
    await awaiting(session, "t2")  # the steering handed off: t2 runs it

    again = await session.steer("no, b", id="s-1")
    assert again == first
    state = await state_of(session)
    assert state.active is not None and state.active.id == "t2" and state.inbox.items == ()
    other = await session.steer("something else", id="s-1")
    assert other.reason == "PARTIAL_DUPLICATE_BATCH"  # the id reused with other content


# -- 6. moving an input before itself ---------------------------------------------------------------------


async def test_moving_an_input_before_itself_leaves_the_queue_as_it_is(rt: LocalRuntime) -> None:
    session = rt.session("s-1", agent=waiting_agent())
    await session.pause("after-turn")
    for input_id in ("u-1", "u-2", "u-3"):
        await session.send(input_id, id=input_id)
    receipt = await session.queue.move("u-1", "u-1")
    assert receipt.outcome == "applied"
    assert [i.id for i in (await state_of(session)).inbox.items] == ["u-1", "u-2", "u-3"]


# -- 7. the turn's outcome, readable --------------------------------------------------------------------


def test_the_outcome_is_a_literal_a_ui_can_switch_on() -> None:
    assert set(get_args(TurnOutcomeKind)) >= {"completed", "handed-off", "stopped", "failed", "superseded", "removed"}
    assert TurnOutcome("t1", "handed-off", "").success
    assert not any(TurnOutcome("t1", kind, "").success for kind in ("stopped", "failed", "superseded", "removed"))


async def test_a_steered_turn_succeeds_as_handed_off(rt: LocalRuntime) -> None:
    session = rt.session("s-1", agent=waiting_agent())
    turn = await session.prompt("delete a")
    await awaiting(session, "t1")
    await session.steer("never mind", turn_id="t1")
    result = await asyncio.wait_for(turn.finished, TIMEOUT)
    assert (result.outcome, result.success) == ("handed-off", True)


async def test_a_turn_cut_off_by_max_steps_says_so(rt: LocalRuntime) -> None:
    @tool
    def look(q: str) -> str:
        """Look something up."""
        return "found"

    steps: list[list[dict[str, Any]]] = [[{"tool": "look", "input": {"q": "a"}}], [{"text": "never reached"}]]
    agent = Agent("a", "x", ScriptedModel(steps, per_turn=True), tools=[look], max_steps=1)
    session = rt.session("s-1", agent=agent)
    result = await asyncio.wait_for((await session.prompt("look")).finished, TIMEOUT)
    assert (result.outcome, result.reason) == ("completed", "max-steps")
    plain = rt.session("s-2", agent=Agent("a", "x", ScriptedModel([[{"text": "hi"}]], per_turn=True)))
    done = await asyncio.wait_for((await plain.prompt("hi")).finished, TIMEOUT)
    assert (done.outcome, done.reason, done.success) == ("completed", "stop", True)


async def test_a_failed_turn_gives_its_error_code_as_the_reason(rt: LocalRuntime) -> None:
    steps = [[{"error": "Couldn't reach the assistant.", "code": "network"}]]
    agent = Agent("a", "x", ScriptedModel(steps, per_turn=True))
    session = rt.session("s-1", agent=agent)
    result = await asyncio.wait_for((await session.prompt("hi")).finished, TIMEOUT)
    assert (result.outcome, result.reason, result.success) == ("failed", "network", False)
