"""``Session.reset()`` and ``Session.fork(at=, id=)`` on the in-process runtime."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from actors.client import Turn
from actors.local import LocalRuntime
from orchestrator.core import event_types as ai
from orchestrator.core.errors import UsageError
from orchestrator.core.fold import INTERRUPTED
from orchestrator.core.ids import child_session_id
from orchestrator.core.parts import AgentMessage, ToolPart
from orchestrator.run.agent import Agent
from orchestrator.testing import Gate, ScriptedModel
from tools import ToolContext, tool

TIMEOUT = 10


def talker() -> Agent:
    return Agent("a", "x", ScriptedModel([[{"text": "Hello.", "chunk": 2}]], per_turn=True))


def charging(gate: Gate, calls: list[str]) -> Agent:
    """An agent whose one tool is a ``report`` tool that counts its calls and waits at ``gate``."""

    @tool(name="charge", recovery="report")
    async def charge(context: ToolContext) -> str:
        """Charge the card."""
        calls.append(context.call_id)
        await gate.wait()
        return "charged"

    model = ScriptedModel([[{"tool": "charge", "input": {}}], [{"text": "Done."}]])
    return Agent("a", "x", model, tools=[charge])


def tool_parts(messages: Sequence[AgentMessage]) -> list[ToolPart]:
    return [p for m in messages for p in m.parts if isinstance(p, ToolPart)]


# -- reset -------------------------------------------------------------------------------------


async def test_reset_starts_a_new_conversation_and_the_log_keeps_the_old_one(rt: LocalRuntime) -> None:
    session = rt.session("s-1", agent=talker())
    assert (await asyncio.wait_for((await session.prompt("hi")).finished, TIMEOUT)).success
    before = await session.state()

    receipt = await session.reset(id="reset-1")

    assert (receipt.command_id, receipt.outcome) == ("reset-1", "applied")
    after = await session.state()
    assert list(after.state.messages) == [] and after.state.inbox.items == ()
    events = await rt.store.read("s-1")
    assert events[-2].type == ai.SESSION_RESET and len(events) == before.index + 2
    assert [m.text for m in (await session.state(through=before.index)).state.messages] == ["hi", "Hello."]
    assert await session.reset(id="reset-1") == receipt  # a retry replays
    result = await asyncio.wait_for((await session.prompt("again")).finished, TIMEOUT)
    assert (result.turn_id, result.text) == ("t2", "Hello.")  # turn ids never repeat
    assert [m.text for m in await session.messages()] == ["again", "Hello."]


async def test_reset_stops_the_turn_in_flight_first(rt: LocalRuntime) -> None:
    gate, calls = Gate(), list[str]()
    session = rt.session("s-1", agent=charging(gate, calls))
    turn = await session.prompt("pay")
    await session.send("and then this", id="queued")
    await gate.reached(TIMEOUT)

    await session.reset()

    outcome = await asyncio.wait_for(turn.finished, TIMEOUT)
    assert outcome.outcome == "stopped"
    state = (await session.state()).state
    assert (list(state.messages), state.inbox.items, state.active) == ([], (), None)
    gate.open()
    assert calls == [calls[0]]  # cancelled, not run again


# -- fork --------------------------------------------------------------------------------------


async def test_a_fork_folds_to_the_source_state_at_every_index(rt: LocalRuntime) -> None:
    session = rt.session("s-1", agent=talker())
    for text in ("one", "two"):
        assert (await asyncio.wait_for((await session.prompt(text)).finished, TIMEOUT)).success
    await session.send("a note", role="system", generate=False)
    last = (await session.state()).index
    for at in range(last + 1):
        fork = await session.fork(at=at, id=f"f-{at}")
        source = (await session.state(through=at)).state
        assert (await fork.state(through=at)).state == source, f"fork at {at}"
    assert (await rt.session("f-0", agent=talker()).state()).index == 0


async def test_a_fork_runs_on_its_own(rt: LocalRuntime) -> None:
    session = rt.session("s-1", agent=talker())
    assert (await asyncio.wait_for((await session.prompt("one")).finished, TIMEOUT)).success
    at = (await session.state()).index
    assert (await asyncio.wait_for((await session.prompt("two")).finished, TIMEOUT)).success

    fork = await session.fork(at=at, id="s-2")
    assert fork.id == "s-2" and fork.agent_key == session.agent_key
    assert [m.text for m in await fork.messages()] == ["one", "Hello."]
    result = await asyncio.wait_for((await fork.prompt("other")).finished, TIMEOUT)
    assert result.turn_id == "t2"
    assert [m.text for m in await fork.messages()] == ["one", "Hello.", "other", "Hello."]
    assert [m.text for m in await session.messages()] == ["one", "Hello.", "two", "Hello."]


async def test_a_fork_mid_turn_recovers_and_no_report_tool_runs_twice(rt: LocalRuntime) -> None:
    gate, calls = Gate(), list[str]()
    agent = charging(gate, calls)
    session = rt.session("s-1", agent=agent)
    turn = await session.prompt("pay")
    await gate.reached(TIMEOUT)
    at = (await session.state()).index  # the call has started and not finished

    fork = await session.fork(at=at, id="s-2")

    # The fork's copy of the turn that admitted the prompt (input ids carry over): it recovers.
    recovered = await asyncio.wait_for(Turn(fork, turn.id, None).finished, TIMEOUT)
    assert (recovered.turn_id, recovered.outcome) == ("t1", "completed")
    charge = tool_parts(await fork.messages())[0]
    assert (charge.state, charge.error) == ("error", INTERRUPTED)
    assert (await fork.messages())[-1].final_text == "Done."
    gate.open()
    assert (await asyncio.wait_for(turn.finished, TIMEOUT)).success
    assert len(calls) == 1  # ran once, in the source; the fork did not run it again
    assert tool_parts(await session.messages())[0].output == "charged"


async def test_a_fork_of_a_parent_carries_its_sub_agent(rt: LocalRuntime) -> None:
    researcher = Agent("researcher", "r", ScriptedModel([[{"text": "A mug costs $5.", "chunk": 2}]]))
    model = ScriptedModel(
        [[{"tool": "delegate_to_researcher", "input": {"task": "prices"}}], [{"text": "Mugs cost $5."}]]
    )
    session = rt.session("s-1", agent=Agent("a", "x", model, agents=[researcher]))
    assert (await asyncio.wait_for((await session.prompt("price?")).finished, TIMEOUT)).success
    at = (await session.state()).index
    call_id = tool_parts(await session.messages())[0].id

    fork = await session.fork(at=at, id="s-2")

    child, forked = child_session_id("s-1", call_id), child_session_id("s-2", call_id)
    child_events, forked_events = await rt.store.read(child), await rt.store.read(forked)
    assert [e.type for e in forked_events] == [e.type for e in child_events] and forked_events
    assert (await fork.state()).state == (await session.state()).state
    assert [m.text for m in await fork.messages()] == ["price?", "Mugs cost $5."]


@pytest.mark.parametrize(
    ("at", "new_id", "phrase"),
    [
        (99, "s-2", "its log ends at"),
        (-1, "s-2", "pass an index from 0"),
        (1, "taken", "already has events; choose a new id"),
        (1, "s-1", "into itself"),
        (1, "a/b", "without '/'"),
    ],
)
async def test_a_bad_fork_names_the_problem_and_writes_nothing(
    rt: LocalRuntime, at: int, new_id: str, phrase: str
) -> None:
    session = rt.session("s-1", agent=talker())
    assert (await asyncio.wait_for((await session.prompt("hi")).finished, TIMEOUT)).success
    await rt.session("taken", agent=talker()).send("mine", generate=False)
    before = {s.session_id: s.last_index for s in await rt.store.list_sessions()}
    with pytest.raises(UsageError, match=phrase):
        await session.fork(at=at, id=new_id)
    assert {s.session_id: s.last_index for s in await rt.store.list_sessions()} == before


async def test_a_fork_mid_delegation_does_not_run_the_sub_agents_report_tool_again(rt: LocalRuntime) -> None:
    gate, calls = Gate(), list[str]()
    researcher = charging(gate, calls)
    researcher = Agent("researcher", "r", researcher.model, tools=researcher.tools)
    model = ScriptedModel([[{"tool": "delegate_to_researcher", "input": {"task": "pay"}}], [{"text": "Paid."}]])
    session = rt.session("s-1", agent=Agent("a", "x", model, agents=[researcher]))
    turn = await session.prompt("pay via the researcher")
    await gate.reached(TIMEOUT)
    at = (await session.state()).index

    fork = await session.fork(at=at, id="s-2")

    recovered = await asyncio.wait_for(Turn(fork, turn.id, None).finished, TIMEOUT)
    assert (recovered.outcome, recovered.text) == ("completed", "Paid.")
    delegate = tool_parts(await fork.messages())[0]
    assert delegate.agent is not None
    charge = tool_parts(delegate.agent.messages)[0]
    assert (charge.state, charge.error) == ("error", INTERRUPTED)
    gate.open()
    assert (await asyncio.wait_for(turn.finished, TIMEOUT)).success
    assert len(calls) == 1  # the sub-agent's report tool ran once: in the source
