"""The run loop end to end, in process, on the scripted model and a real in-memory store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.core import event_types as ai
from orchestrator.core.aistate import AIState
from orchestrator.core.approvals import pending_approvals
from orchestrator.core.commands import PauseSession, Respond, ResumeSession, RetryTurn, SendInput, StopTurn
from orchestrator.core.errors import ModelError, ToolError, UsageError
from orchestrator.core.events import Event
from orchestrator.core.fold import DENIED, INTERRUPTED, fold_events
from orchestrator.core.parts import AgentMessage, CompactionPart, NestedRun, ToolPart
from orchestrator.core.stream import AgentStreamPart, StepFinish, TextDelta
from orchestrator.models.base import ModelRequest
from orchestrator.run.agent import Agent, Compaction, MetadataContext, ResolverContext
from orchestrator.run.children import ChildBatch, ChildRequest, ChildResult, Deliver
from orchestrator.run.inprocess import LocalChildren, LocalSessions
from orchestrator.run.runner import SessionRunner
from orchestrator.store import open_store
from orchestrator.store.base import EventStore
from orchestrator.testing import FunctionModel, Gate, ScriptedModel, eventually
from tests.fixtures.agents import Counter, GatedModel, approving_tree, cart_tool
from tools import Recovery, StaticTools, Tool, ToolContext, tool

TIMEOUT = 10


@pytest.fixture
def store() -> EventStore:
    return open_store("memory://")


@pytest.fixture
async def sessions(store: EventStore) -> AsyncIterator[LocalSessions]:
    local = LocalSessions(store)
    yield local
    await local.close()


def tool_parts(messages: Sequence[AgentMessage]) -> Iterator[ToolPart]:
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolPart):
                yield part


def call(state: AIState, name: str) -> ToolPart:
    return next(p for p in tool_parts(state.messages) if p.name == name)


def status(runner: SessionRunner) -> str:
    return runner.state.status


async def turn(runner: SessionRunner, input_id: str, text: str) -> str:
    await runner.submit(SendInput(input_id, text))
    outcome = await runner.wait_input(input_id, timeout=TIMEOUT)
    return outcome.outcome


def shopper(counter: Counter) -> Agent:
    """The seed's flow: a text, an ``add_to_cart`` call, then the reply's last text."""
    return Agent(
        "shopper",
        "Help the user shop.",
        ScriptedModel(
            [
                [{"text": "Adding them now.", "chunk": 4}, {"tool": "add_to_cart", "input": {"slug": "mug", "qty": 2}}],
                [{"text": "Done: two mugs."}],
            ]
        ),
        tools=[cart_tool(counter)],
    )


# -- the seed's flow ---------------------------------------------------------------------------------


async def test_the_add_to_cart_flow(sessions: LocalSessions) -> None:
    counter = Counter()
    agent = shopper(counter)
    runner = await sessions.open("s-1", agent)
    assert await turn(runner, "u-1", "Add two mugs to the cart") == "completed"
    state = runner.state
    assert state.status == "idle"
    assert [m.role for m in state.messages] == ["user", "assistant"]
    reply = state.messages[1]
    assert [p.type for p in reply.parts] == ["text", "tool", "text"]
    assert reply.text == "Adding them now.Done: two mugs."
    assert call(state, "add_to_cart").state == "done"
    assert call(state, "add_to_cart").output == "Added."
    assert counter.calls == [{"slug": "mug", "qty": 2}]
    assert fold_events(await sessions.store.read("s-1")) == state


async def test_a_step_or_a_call_that_ended_in_a_write_costs_no_planning_pass_of_its_own(
    sessions: LocalSessions, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The write that ends a step or a tool call plans what follows it; the task's end then asks
    # the session to plan again only when that write did not happen (a step cut off, a crash).
    agent = shopper(Counter())
    runner = await sessions.open("s-1", agent)
    await eventually(lambda: not runner._draining)  # the open's own planning pass
    passes: list[tuple[int, int]] = []
    commit = runner._commit_locked

    async def counted(events: Sequence[Event]) -> Any:
        applied = await commit(events)
        passes.append((len(events), len(applied)))
        return applied

    monkeypatch.setattr(runner, "_commit_locked", counted)
    assert await turn(runner, "u-1", "Add two mugs to the cart") == "completed"
    await asyncio.sleep(0.05)  # the last tasks' ends, had they asked for a pass
    assert passes and (0, 0) not in passes, passes


async def test_wait_for_returns_the_state_that_holds_or_times_out_and_forgets_the_waiter(
    sessions: LocalSessions,
) -> None:
    agent = Agent("echo", "Echo.", ScriptedModel([[{"text": "hi"}]]))
    runner = await sessions.open("s-1", agent)
    with pytest.raises(TimeoutError):
        await runner.wait_for(lambda s: s.turns == 1, 0.05)
    assert runner._waiters == 0  # a timed-out wait no longer asks writes to wake it
    waiting = asyncio.ensure_future(runner.wait_for(lambda s: s.turns == 1 and s.active is None, TIMEOUT))
    await asyncio.sleep(0)
    assert runner._waiters == 1
    await runner.submit(SendInput("u-1", "hello"))
    state = await waiting
    assert state.turns == 1 and state.messages[-1].text == "hi"
    assert runner._waiters == 0
    assert (await runner.wait_for(lambda s: s.turns == 1, 0)).turns == 1  # holds already: no wait at all


async def test_watch_input_calls_back_once_when_the_turn_ends_and_not_before(sessions: LocalSessions) -> None:
    model = GatedModel("first ", "second", first_only=True)
    runner = await sessions.open("s-1", Agent("a", "x", model, settings={}))
    with pytest.raises(UsageError, match="turn_of"):
        runner.watch_input("u-1", print)  # not sent yet: unknown here
    await runner.submit(SendInput("u-1", "go"))
    await model.gate.reached(TIMEOUT)
    heard: list[Any] = []
    cancelled: list[Any] = []
    runner.watch_input("u-1", heard.append)
    runner.watch_input("u-1", cancelled.append)()  # cancelled at once: never called
    await asyncio.sleep(0.05)
    assert heard == [] and runner._waiters == 0  # nothing waits as a task, nothing woken per write
    model.gate.open()
    await runner.wait_input("u-1", timeout=TIMEOUT)
    assert [(o.outcome, o.text) for o in heard] == [("completed", "first second")]
    assert cancelled == [] and runner._ledger.watchers == []
    late: list[Any] = []
    runner.watch_input("u-1", late.append)  # ended already: answered at the loop's next turn
    assert late == []
    await asyncio.sleep(0)
    assert [o.outcome for o in late] == ["completed"]


async def test_watch_input_hears_none_when_the_runner_closes_first(sessions: LocalSessions) -> None:
    model = GatedModel("first ", "second", first_only=True)
    runner = await sessions.open("s-1", Agent("a", "x", model, settings={}))
    await runner.submit(SendInput("u-1", "go"))
    await model.gate.reached(TIMEOUT)
    heard: list[Any] = []

    def broken(outcome: Any) -> None:
        raise RuntimeError("a watcher's bug")

    runner.watch_input("u-1", broken)  # fails when called: logged, and the others still hear
    runner.watch_input("u-1", heard.append)
    await runner.close()
    assert heard == [None]
    runner.watch_input("u-1", heard.append)  # closed already: None at the loop's next turn
    await asyncio.sleep(0)
    assert heard == [None, None]


async def test_the_model_is_sent_instructions_tools_and_the_tool_result(sessions: LocalSessions) -> None:
    model = ScriptedModel([[{"tool": "add_to_cart", "input": {"slug": "mug"}}], [{"text": "ok"}]])
    agent = Agent("shopper", "Help the user shop.", model, tools=[cart_tool(Counter())])
    runner = await sessions.open("s-1", agent)
    await turn(runner, "u-1", "one mug")
    first, second = model.requests
    assert first.instructions == "Help the user shop."
    assert [t.name for t in first.tools] == ["add_to_cart"]
    assert first.tools[0].parameters["required"] == ["slug"]
    assert (first.step_index, second.step_index, second.session_step_index) == (0, 1, 1)
    assert call(AIState(session=runner.state.session), "add_to_cart").output == "Added."
    assert [p.type for p in second.messages[-1].parts] == ["tool"]
    model.assert_consumed()


# -- delegation ------------------------------------------------------------------------------------


def delegating_agents() -> Agent:
    @tool
    async def lookup_price(slug: str) -> str:
        """Look up a price."""
        return "4.99"

    pricer = Agent(
        "pricer",
        "Price things.",
        ScriptedModel(
            [[{"tool": "lookup_price", "input": {"slug": "mug"}}], [{"text": "Mugs cost 4.99.", "chunk": 5}]]
        ),
        tools=[lookup_price],
    )
    researcher = Agent(
        "researcher",
        "Research.",
        ScriptedModel(
            [
                [
                    {"text": "Asking the pricer.", "chunk": 3},
                    {"tool": "delegate_to_pricer", "input": {"task": "price a mug"}},
                ],
                [{"text": "The mug is 4.99."}],
            ]
        ),
        agents=[pricer],
    )
    return Agent(
        "shop",
        "Shop.",
        ScriptedModel(
            [[{"tool": "delegate_to_researcher", "input": {"task": "compare mug prices"}}], [{"text": "It is 4.99."}]]
        ),
        agents=[researcher],
    )


async def test_a_two_level_delegation_nests_every_part_under_the_right_call(
    sessions: LocalSessions, store: EventStore
) -> None:
    runner = await sessions.open("s-1", delegating_agents())
    assert await turn(runner, "u-1", "compare") == "completed"
    state = runner.state
    research = call(state, "delegate_to_researcher")
    assert research.state == "done"
    assert research.output == "The mug is 4.99."
    nested = research.agent
    assert isinstance(nested, NestedRun) and nested.status == "idle"
    assert [m.role for m in nested.messages] == ["user", "assistant"]
    assert nested.messages[0].text == "compare mug prices"
    pricing = next(p for p in tool_parts(nested.messages) if p.name == "delegate_to_pricer")
    assert pricing.state == "done" and pricing.output == "Mugs cost 4.99."
    assert pricing.agent is not None
    inner = next(p for p in tool_parts(pricing.agent.messages) if p.name == "lookup_price")
    assert inner.state == "done" and inner.output == "4.99"
    # Each sub-agent has its own log, and the parent's nested copy is exactly its conversation.
    child_id = f"s-1/{research.id}"
    child = fold_events(await store.read(child_id))
    assert child.messages == nested.messages
    grandchild = fold_events(await store.read(f"{child_id}/{pricing.id}"))
    assert grandchild.messages == pricing.agent.messages
    assert fold_events(await store.read("s-1")) == state


async def test_a_delegate_that_finished_sends_its_child_no_stop(
    sessions: LocalSessions, monkeypatch: pytest.MonkeyPatch
) -> None:
    stops: list[str] = []
    stop = sessions.children.stop

    async def counted(child_id: str) -> None:
        stops.append(child_id)
        await stop(child_id)

    monkeypatch.setattr(sessions.children, "stop", counted)
    runner = await sessions.open("s-1", delegating_agents())
    assert await turn(runner, "u-1", "compare") == "completed"
    assert call(runner.state, "delegate_to_researcher").state == "done"
    assert stops == []  # both children had ended their turns: a stop would be a wasted command


async def delegating_to_a_held_child(sessions: LocalSessions, then: str) -> tuple[SessionRunner, GatedModel]:
    """A session whose delegate call runs a child held at its model's gate; the parent then says ``then``."""
    model = GatedModel("looking ", "found", first_only=True)
    researcher = Agent("researcher", "Research.", model)
    script = ScriptedModel([[{"tool": "delegate_to_researcher", "input": {"task": "look"}}], [{"text": then}]])
    runner = await sessions.open("s-1", Agent("shop", "Shop.", script, agents=[researcher]))
    await runner.submit(SendInput("u-1", "go"))
    await model.gate.reached(TIMEOUT)
    return runner, model


async def test_a_stop_reaches_the_sub_agent_of_a_running_delegate(sessions: LocalSessions) -> None:
    runner, model = await delegating_to_a_held_child(sessions, "never")
    await runner.submit(StopTurn("x-1"))
    assert (await runner.wait_input("u-1", timeout=TIMEOUT)).outcome == "stopped"
    research = call(runner.state, "delegate_to_researcher")
    assert research.state == "cancelled"
    child = sessions.children.runners[f"s-1/{research.id}"]
    state = await child.wait_for(lambda s: s.active is None, TIMEOUT)
    assert state.last_turn is not None and state.last_turn[1] == "stopped"
    assert len(model.requests) == 1


async def test_a_pause_now_while_a_finished_delegate_s_result_waits_to_be_written_leaves_it_done(
    sessions: LocalSessions, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pause lands after the delegate queued its outcome, before that outcome is durable.

    The child has ended its turn, so the pause has nothing to cut: the child gets no pause, and
    the call is not reset (that reset would follow the outcome, and the fold would ignore it).
    """
    pauses: list[str] = []
    pause = sessions.children.pause

    async def counted(child_id: str, when: str) -> None:
        pauses.append(child_id)
        await pause(child_id, when)

    monkeypatch.setattr(sessions.children, "pause", counted)
    runner, model = await delegating_to_a_held_child(sessions, "ok")
    await eventually(lambda: not runner._draining, TIMEOUT, what="the parent's writes are done")
    # The parent's writes from here: an app event's (held, so the write lock stays taken while
    # the outcome queues), the pause's (goes through), the outcome's (held while the pause acts).
    commit, holds = runner.log.commit, [Gate(), None, Gate()]
    calls: list[int] = []

    async def held_commit(*args: Any, **kwargs: Any) -> Any:
        calls.append(len(calls))
        gate = holds[len(calls) - 1] if len(calls) <= len(holds) else None
        if gate is not None:
            await gate.wait()
        return await commit(*args, **kwargs)

    monkeypatch.setattr(runner.log, "commit", held_commit)
    pushing = asyncio.ensure_future(runner.push([Event("note-1", "app.note", {})]))
    first, outcome = holds[0], holds[2]
    assert first is not None and outcome is not None
    await first.reached(TIMEOUT)
    model.gate.open()  # the child ends its turn; the delegate queues its outcome
    work = runner._calls.running[call(runner.state, "delegate_to_researcher").id]
    await eventually(lambda: work.settling, TIMEOUT, what="the delegate's outcome is queued")
    pausing = asyncio.ensure_future(runner.submit(PauseSession("p-1", "now")))
    await eventually(lambda: bool(runner._lock._waiters), TIMEOUT, what="the pause waits for the lock")
    first.open()  # the pause takes the lock before the queued outcome is written
    await asyncio.wait_for(asyncio.gather(pushing, pausing), TIMEOUT)
    await outcome.reached(TIMEOUT)
    # Everything else that is ready runs now (all in this loop, on a memory store): the pause
    # cancels the session's work while the outcome is not yet durable.
    await asyncio.sleep(0.05)
    outcome.open()
    await eventually(
        lambda: not runner._cancelling and runner.state.tools[work.call_id].final, TIMEOUT, what="the pause is done"
    )
    await runner.idle(TIMEOUT)
    assert call(runner.state, "delegate_to_researcher").state == "done"
    events = await runner.log.store.read("s-1")
    assert [e.type for e in events if e.type in (ai.TOOL_RESET, ai.TOOL_FAILED, ai.TOOL_FINISHED)] == [ai.TOOL_FINISHED]
    assert pauses == []


class LateChildren(LocalChildren):
    """Sub-agents whose batches reach the parent late and out of order (as Ray calls can)."""

    async def run(self, request: ChildRequest, deliver: Deliver) -> ChildResult:
        batches: list[ChildBatch] = []

        async def collect(batch: ChildBatch) -> None:
            batches.append(batch)

        result = await super().run(request, collect)
        assert result.final is not None and batches[0].prev is None
        # The final snapshot comes first; the child's very first snapshot, sent long before, after it.
        await deliver(result.final)
        await deliver(batches[0])
        return replace(result, final=None)


async def test_a_late_first_snapshot_never_replaces_a_newer_one(store: EventStore) -> None:
    agents = delegating_agents()
    children = LateChildren(store)
    runner = await SessionRunner.open(store, "s-1", agents, children=children)
    assert await turn(runner, "u-1", "compare") == "completed"
    research = call(runner.state, "delegate_to_researcher")
    assert research.agent is not None
    child = fold_events(await store.read(f"s-1/{research.id}"))
    assert research.agent.messages == child.messages  # the newest snapshot won
    await runner.close()
    await children.close()


# -- approvals ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["static", "dynamic"])
async def test_an_approved_call_runs_and_a_denied_one_never_does(sessions: LocalSessions, source: str) -> None:
    """The same gate whether the tool is in a fixed list (checked while the call's start is
    assembled) or comes from a source (listed and checked in the call's task)."""
    counter = Counter()
    cart = cart_tool(counter, approval=True)
    agent = Agent(
        "shopper",
        "Shop.",
        ScriptedModel([[{"tool": "add_to_cart", "input": {"slug": "mug"}}], [{"text": "ok"}]], per_turn=True),
        tools=[cart] if source == "static" else [StaticTools((cart,))],
    )
    runner = await sessions.open("s-1", agent)
    await runner.submit(SendInput("u-1", "one mug"))
    state = await runner.wait_for(lambda s: any(i.status == "pending" for i in s.interactions.values()), TIMEOUT)
    interaction = next(iter(state.interactions.values()))
    pending = call(state, "add_to_cart")
    assert pending.state == "awaiting-confirmation" and pending.prompt
    assert counter.calls == []
    await runner.submit(Respond("r-1", interaction.id, approved=True))
    assert (await runner.wait_input("u-1", timeout=TIMEOUT)).outcome == "completed"
    assert counter.calls == [{"slug": "mug", "qty": 1}]

    await runner.submit(SendInput("u-2", "another"))
    state = await runner.wait_for(
        lambda s: any(i.status == "pending" for i in s.interactions.values() if i.id != interaction.id), TIMEOUT
    )
    second = next(i for i in state.interactions.values() if i.status == "pending")
    await runner.submit(Respond("r-2", second.id, approved=False))
    assert (await runner.wait_input("u-2", timeout=TIMEOUT)).outcome == "completed"
    assert len(counter.calls) == 1
    denied = next(p for p in tool_parts(runner.state.messages) if p.id == second.call_id)
    assert (denied.state, denied.error) == ("error", DENIED)


async def test_an_approval_two_sub_agents_down_is_answered_through_the_top_session(
    sessions: LocalSessions, store: EventStore
) -> None:
    counter = Counter()
    runner = await sessions.open("s-1", approving_tree(counter))
    await runner.submit(SendInput("u-1", "a mug please"))
    state = await runner.wait_for(lambda s: bool(pending_approvals(s)), TIMEOUT)
    [approval] = pending_approvals(state)
    research = call(state, "delegate_to_researcher")
    assert research.agent is not None
    buying = next(p for p in tool_parts(research.agent.messages) if p.name == "delegate_to_buyer")
    assert approval.path == (research.id, buying.id) and approval.name == "add_to_cart" and approval.prompt
    assert approval.id == f"{research.id}/{buying.id}/{approval.call_id}:approval"
    assert counter.calls == []
    # A wrong path is a plain rejection; the right one is decided by the buyer's own session.
    wrong = await runner.submit(Respond("r-0", f"call-x/{approval.call_id}:approval", approved=True))
    assert wrong.receipt is not None and (wrong.receipt.outcome, wrong.receipt.reason) == ("rejected", "not-pending")
    answered = await runner.submit(Respond("r-1", approval.id, approved=True))
    assert answered.applied
    assert (await runner.wait_input("u-1", timeout=TIMEOUT)).outcome == "completed"
    assert counter.calls == [{"slug": "mug", "qty": 1}]
    assert pending_approvals(runner.state) == []
    buyer_log = await store.read(f"s-1/{research.id}/{buying.id}")
    assert [e.payload["interactionId"] for e in buyer_log if e.type == ai.RESPOND] == [f"{approval.call_id}:approval"]
    again = await runner.submit(Respond("r-2", approval.id, approved=True))  # the call is over now
    assert again.receipt is not None and again.receipt.outcome == "rejected"


# -- invalid arguments ----------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["static", "dynamic"])
async def test_invalid_arguments_go_back_to_the_model_which_corrects_them(sessions: LocalSessions, source: str) -> None:
    counter = Counter()
    cart = cart_tool(counter)
    model = ScriptedModel(
        [
            [{"tool": "add_to_cart", "input": {"slug": "mug", "qty": "two"}}],
            [{"tool": "add_to_cart", "input": {"slug": "mug", "qty": 2}}],
            [{"text": "Added two."}],
        ]
    )
    tools = [cart] if source == "static" else [StaticTools((cart,))]
    runner = await sessions.open("s-1", Agent("shopper", "Shop.", model, tools=tools))
    assert await turn(runner, "u-1", "two mugs") == "completed"
    first, second = list(tool_parts(runner.state.messages))
    assert first.state == "error" and "qty" in (first.error or "") and "integer" in (first.error or "")
    assert second.state == "done"
    assert counter.calls == [{"slug": "mug", "qty": 2}]
    seen = [p for p in tool_parts(model.requests[1].messages)]
    assert seen[0].state == "error"


async def test_an_unknown_tool_is_reported_to_the_model(sessions: LocalSessions) -> None:
    model = ScriptedModel([[{"tool": "fly", "input": {}}], [{"text": "sorry"}]])
    runner = await sessions.open("s-1", Agent("shopper", "Shop.", model, tools=[cart_tool(Counter())]))
    assert await turn(runner, "u-1", "fly") == "completed"
    failed = call(runner.state, "fly")
    assert failed.state == "error" and "add_to_cart" in (failed.error or "")


async def test_a_tool_that_raises_or_times_out_ends_as_a_tool_error(sessions: LocalSessions) -> None:
    @tool
    def explode(what: str) -> str:
        """Explode."""
        raise RuntimeError(f"{what} blew up")

    @tool(timeout=0.05)
    async def slow() -> str:
        """Take forever."""
        await asyncio.sleep(60)
        return "never"

    model = ScriptedModel(
        [[{"tool": "explode", "input": {"what": "the oven"}}, {"tool": "slow", "input": {}}], [{"text": "hm"}]]
    )
    runner = await sessions.open("s-1", Agent("a", "x", model, tools=[explode, slow]))
    assert await turn(runner, "u-1", "go") == "completed"
    assert call(runner.state, "explode").error == "explode failed: the oven blew up"
    assert call(runner.state, "slow").error == "slow timed out after 0.05 s"


async def test_a_tool_failure_carries_the_code_of_its_error_never_one_read_from_its_words(
    sessions: LocalSessions, store: EventStore
) -> None:
    @tool
    def upstream() -> str:
        """Call a service that gives up (the tool's own error, whatever its words)."""
        raise ToolError("the upstream timed out")

    @tool(timeout=0.05)
    async def slow() -> str:
        """Take forever."""
        await asyncio.sleep(60)
        return "never"

    calls = [
        {"tool": "upstream", "input": {}},
        {"tool": "slow", "input": {}},
        {"tool": "add_to_cart", "input": {"slug": "mug", "qty": "two"}},
    ]
    model = ScriptedModel([calls, [{"text": "hm"}]])
    runner = await sessions.open("s-1", Agent("a", "x", model, tools=[upstream, slow, cart_tool(Counter())]))
    assert await turn(runner, "u-1", "go") == "completed"
    failed = {e.payload["callId"]: e.payload.get("code") for e in await store.read("s-1") if e.type == ai.TOOL_FAILED}
    codes = {p.name: failed[p.id] for p in tool_parts(runner.state.messages)}
    assert codes == {"upstream": None, "slow": "timeout", "add_to_cart": "invalid_arguments"}


# -- retry and failure ---------------------------------------------------------------------------------


async def test_retry_after_a_failed_step_resumes_after_the_finished_tool(sessions: LocalSessions) -> None:
    counter = Counter()
    model = ScriptedModel(
        [
            [{"tool": "add_to_cart", "input": {"slug": "mug", "qty": 2}}],
            [{"text": "Now I will sa"}, {"error": "Couldn't reach the assistant.", "code": "network"}],
            [{"text": "Done: two mugs."}],
        ]
    )
    runner = await sessions.open("s-1", Agent("shopper", "Shop.", model, tools=[cart_tool(counter)]))
    assert await turn(runner, "u-1", "two mugs") == "failed"
    assert status(runner) == "error"
    assert runner.state.error is not None and runner.state.error.code == "network"
    await runner.submit(RetryTurn("r-1"))
    await runner.wait_for(lambda s: s.turns == 2 and s.active is None, TIMEOUT)
    assert runner.state.status == "idle"
    reply = runner.state.messages[-1]
    assert [p.type for p in reply.parts] == ["tool", "text"]
    assert reply.text == "Done: two mugs."
    assert counter.calls == [{"slug": "mug", "qty": 2}]  # not run twice
    assert [p.type for p in model.requests[2].messages[-1].parts] == ["tool"]


async def test_an_adapter_that_throws_becomes_an_error_with_its_message(sessions: LocalSessions) -> None:
    def boom(request: ModelRequest) -> list[AgentStreamPart]:
        raise ValueError("the adapter broke")

    runner = await sessions.open("s-1", Agent("a", "x", FunctionModel(boom)))
    assert await turn(runner, "u-1", "hi") == "failed"
    assert runner.state.error is not None and runner.state.error.message == "the adapter broke"


async def test_a_resolver_that_raises_fails_the_turn_and_retry_runs_it_again(sessions: LocalSessions) -> None:
    broken = {"yes": True}
    model = ScriptedModel([[{"text": "hello"}]], per_turn=True)

    def pick(context: ResolverContext) -> ScriptedModel:
        if broken["yes"]:
            raise RuntimeError("no model for this plan")
        return model

    runner = await sessions.open("s-1", Agent("a", lambda c: f"turn {c.turn_id}", pick))
    assert await turn(runner, "u-1", "hi") == "failed"
    assert runner.state.error is not None and runner.state.error.message == "no model for this plan"
    broken["yes"] = False
    await runner.submit(RetryTurn("r-1"))
    await runner.wait_for(lambda s: s.turns == 2 and s.active is None, TIMEOUT)
    assert runner.state.messages[-1].text == "hello"
    assert model.requests[0].instructions == "turn t2"


# -- stop, supersede, pause ---------------------------------------------------------------------------


async def test_stop_mid_tool_cancels_the_call(sessions: LocalSessions) -> None:
    gate = Gate()
    cancelled = asyncio.Event()

    @tool
    async def wait_forever(context: ToolContext) -> str:
        """Wait."""
        try:
            await gate.wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    model = ScriptedModel([[{"tool": "wait_forever", "input": {}}], [{"text": "unreachable"}]])
    runner = await sessions.open("s-1", Agent("a", "x", model, tools=[wait_forever]))
    await runner.submit(SendInput("u-1", "go"))
    await gate.reached(TIMEOUT)
    await runner.submit(StopTurn("x-1"))
    outcome = await runner.wait_input("u-1", timeout=TIMEOUT)
    assert outcome.outcome == "stopped"
    await asyncio.wait_for(cancelled.wait(), TIMEOUT)
    assert call(runner.state, "wait_forever").state == "cancelled"
    assert runner.state.status == "idle"
    assert len(model.requests) == 1


async def test_retry_supersedes_a_running_generation_and_drops_its_later_parts(sessions: LocalSessions) -> None:
    model = GatedModel("first ", "LATE", first_only=True)
    runner = await sessions.open("s-1", Agent("a", "x", model, settings={}))
    await runner.submit(SendInput("u-1", "go"))
    await model.gate.reached(TIMEOUT)
    await runner.wait_for(lambda s: "first" in s.messages[-1].text, TIMEOUT)
    await runner.submit(RetryTurn("r-1"))
    model.gate.open()
    await runner.wait_for(lambda s: s.turns == 2 and s.active is None, TIMEOUT)
    texts = [m.text for m in runner.state.messages]
    assert texts == ["go", "first LATE"]
    events = await sessions.store.read("s-1")
    assert any(e.type == ai.TURN_FINISHED and e.payload.get("outcome") == "superseded" for e in events)
    assert all(
        "LATE" not in str(e.payload) for e in events if e.type == ai.STREAM and e.payload.get("stepId") == "t1.1"
    )


async def test_pause_now_cancels_the_running_step_and_resume_runs_it_again(sessions: LocalSessions) -> None:
    model = GatedModel("partial ", "rest", first_only=True)
    runner = await sessions.open("s-1", Agent("a", "x", model))
    await runner.submit(SendInput("u-1", "go"))
    await model.gate.reached(TIMEOUT)
    await runner.submit(PauseSession("p-1", "now"))
    state = await runner.wait_for(lambda s: s.active is not None and s.active.phase == "paused", TIMEOUT)
    assert state.messages[-1].role == "user"  # the cut step's partial output was rolled back
    await runner.submit(ResumeSession("r-1"))
    assert (await runner.wait_input("u-1", timeout=TIMEOUT)).outcome == "completed"
    assert runner.state.messages[-1].text == "partial rest"


# -- compaction, metadata, dynamic tools ------------------------------------------------------------------


async def test_compaction_summarizes_once_over_the_threshold_and_keeps_the_log_complete(
    sessions: LocalSessions,
) -> None:
    model = FunctionModel(lambda r: [{"text": "x" * 400}])
    agent = Agent("a", "x", model, compaction=Compaction(threshold_tokens=120, instructions="Keep ids."))
    runner = await sessions.open("s-1", agent)
    for i in range(3):
        assert await turn(runner, f"u-{i}", f"message {i}") == "completed"
    state = runner.state
    assert state.compaction is not None and state.compaction.status == "completed"
    assert len(state.messages) == 6  # the conversation stays complete
    compactions = [p for m in state.messages for p in m.parts if isinstance(p, CompactionPart)]
    assert compactions and compactions[0].status == "completed" and compactions[0].summary
    summaries = [r for r in model.requests if r.purpose == "compact"]
    # The guidance goes in the request's last message; its instructions are the agent's own
    # (issue 12, item 8: they were replaced by the built-in summary instructions).
    assert summaries and "Keep ids." in summaries[0].messages[-1].text
    assert summaries[0].instructions == "x"
    last = [r for r in model.requests if r.purpose == "generate"][-1]
    assert last.messages[0].id == "troupe:summary"
    assert len(last.messages) < len(state.messages)


async def test_a_failed_summary_leaves_the_context_as_it_was(sessions: LocalSessions) -> None:
    def answer(request: ModelRequest) -> list[Mapping[str, Any]]:
        if request.purpose == "compact":
            raise ModelError("summary refused", "bad_request")
        return [{"text": "y" * 400}]

    # on_failure="continue" is today's behaviour kept as an option; the default fails the turn
    # (tests/unit/test_compaction.py).
    runner = await sessions.open(
        "s-1",
        Agent("a", "x", FunctionModel(answer), compaction=Compaction(threshold_tokens=100, on_failure="continue")),
    )
    for i in range(2):
        assert await turn(runner, f"u-{i}", f"m{i}") == "completed"
    assert runner.state.compaction is not None and runner.state.compaction.status == "failed"
    assert [p.status for m in runner.state.messages for p in m.parts if isinstance(p, CompactionPart)][-1] == "failed"


async def test_message_metadata_is_merged_at_step_start_and_finish(sessions: LocalSessions) -> None:
    def metadata(context: MetadataContext) -> Mapping[str, Any]:
        if context.part == "start":
            return {"status": "writing"}
        return {"status": "complete", "usage": dict(context.usage or {})}

    model = FunctionModel(lambda r: [TextDelta("hi"), StepFinish({"inputTokens": 5, "outputTokens": 1}, "stop")])
    runner = await sessions.open("s-1", Agent("a", "x", model, message_metadata=metadata))
    await turn(runner, "u-1", "hello")
    assert runner.state.messages[-1].metadata == {"status": "complete", "usage": {"inputTokens": 5, "outputTokens": 1}}


async def test_a_step_that_crashes_outside_the_model_fails_the_turn_with_the_reason(sessions: LocalSessions) -> None:
    def metadata(context: MetadataContext) -> Mapping[str, Any]:
        raise KeyError("status")

    model = FunctionModel(lambda r: [TextDelta("hi")])
    runner = await sessions.open("s-1", Agent("a", "x", model, message_metadata=metadata))
    assert await turn(runner, "u-1", "hello") == "failed"
    assert runner.state.status == "error"
    assert runner.state.error is not None
    assert "KeyError" in runner.state.error.message and "status" in runner.state.error.message


async def test_a_step_that_crashes_before_its_start_is_durable_still_fails_the_turn(tmp_path: Path) -> None:
    # A model step starts while its start is being written; on SQLite that write is not yet
    # durable when a crash at the step's very start is handled. The turn must fail all the same,
    # not stay running with nobody to end it.
    def metadata(context: MetadataContext) -> Mapping[str, Any]:
        raise KeyError("status")

    store = open_store(f"sqlite:///{tmp_path / 'crash.db'}")
    local = LocalSessions(store)
    try:
        agent = Agent("a", "x", FunctionModel(lambda r: [TextDelta("hi")]), message_metadata=metadata)
        for i in range(3):
            runner = await local.open(f"s-{i}", agent)
            assert await turn(runner, f"u-{i}", "hello") == "failed"
            assert runner.state.error is not None and "KeyError" in runner.state.error.message
            assert runner.state.active is None
    finally:
        await local.close()
        await store.close()


async def test_the_tool_list_is_read_again_after_every_call(sessions: LocalSessions) -> None:
    @tool
    async def unlock() -> str:
        """Unlock the secret tool."""
        source.unlocked = True
        return "unlocked"

    @tool
    async def secret() -> str:
        """The secret."""
        return "42"

    class Source:
        unlocked = False

        async def list_tools(self, app: Mapping[str, Any]) -> Sequence[Tool]:
            return [unlock, secret] if self.unlocked else [unlock]

    source = Source()
    model = ScriptedModel([[{"tool": "unlock", "input": {}}], [{"tool": "secret", "input": {}}], [{"text": "done"}]])
    runner = await sessions.open("s-1", Agent("a", "x", model, tools=[source]))
    assert await turn(runner, "u-1", "go") == "completed"
    assert [t.name for t in model.requests[0].tools] == ["unlock"]
    assert [t.name for t in model.requests[1].tools] == ["unlock", "secret"]
    assert call(runner.state, "secret").output == "42"


async def test_a_tool_streams_preliminary_output_replaced_by_the_final_one(sessions: LocalSessions) -> None:
    seen: list[Any] = []

    @tool
    async def progress(context: ToolContext) -> str:
        """Report progress."""
        await context.emit("50%")
        await runner.wait_for(lambda s: call(s, "progress").output == "50%", TIMEOUT)
        seen.append(call(runner.state, "progress").state)
        return "100%"

    runner = await sessions.open(
        "s-1", Agent("a", "x", ScriptedModel([[{"tool": "progress", "input": {}}], [{"text": "ok"}]]), tools=[progress])
    )
    await turn(runner, "u-1", "go")
    assert seen == ["running"]
    assert call(runner.state, "progress").output == "100%"


# -- recovery: a crash is a close without writing, then a fresh open on the same store -----------------------


async def crash_and_reopen(store: EventStore, agent: Agent, old: LocalSessions) -> tuple[LocalSessions, SessionRunner]:
    await old.close()
    fresh = LocalSessions(store)
    return fresh, await fresh.open("s-1", agent)


async def test_recovery_restarts_a_running_model_step_at_the_same_position(store: EventStore) -> None:
    model = GatedModel("Hel", "lo", first_only=True)
    agent = Agent("a", "x", model)
    first = LocalSessions(store)
    runner = await first.open("s-1", agent)
    await runner.submit(SendInput("u-1", "hi"))
    await model.gate.reached(TIMEOUT)
    await runner.wait_for(lambda s: s.messages[-1].text == "Hel", TIMEOUT)
    second, runner = await crash_and_reopen(store, agent, first)
    try:
        await runner.wait_for(lambda s: s.active is None, TIMEOUT)
        assert runner.state.messages[-1].text == "Hello"  # rolled back, replayed, not duplicated
        assert [r.session_step_index for r in model.requests] == [0, 0]
        events = await store.read("s-1")
        assert [e.payload["reason"] for e in events if e.type == ai.STEP_SUPERSEDED] == ["recovered"]
    finally:
        await second.close()


def blocking_tool(gate: Gate, counter: Counter, recovery: Recovery) -> Tool:
    @tool(name="charge", recovery=recovery)
    async def charge(context: ToolContext) -> str:
        """Charge the card."""
        counter.calls.append({"attempt": context.attempt, "call": context.call_id})
        if context.attempt == 1:
            await gate.wait()
        return "charged"

    return charge


async def test_recovery_runs_a_rerun_tool_again(store: EventStore) -> None:
    gate, counter = Gate(), Counter()
    agent = Agent(
        "a",
        "x",
        ScriptedModel([[{"tool": "charge", "input": {}}], [{"text": "ok"}]]),
        tools=[blocking_tool(gate, counter, "rerun")],
    )
    first = LocalSessions(store)
    runner = await first.open("s-1", agent)
    await runner.submit(SendInput("u-1", "pay"))
    await gate.reached(TIMEOUT)
    second, runner = await crash_and_reopen(store, agent, first)
    try:
        await runner.wait_for(lambda s: s.active is None, TIMEOUT)
        assert [c["attempt"] for c in counter.calls] == [1, 2]
        assert counter.calls[0]["call"] == counter.calls[1]["call"]  # the same idempotency key
        assert call(runner.state, "charge").output == "charged"
    finally:
        await second.close()


async def test_recovery_reports_an_interrupted_report_tool_exactly_once(store: EventStore) -> None:
    gate, counter = Gate(), Counter()
    model = ScriptedModel([[{"tool": "charge", "input": {}}], [{"text": "It may have been charged."}]])
    agent = Agent("a", "x", model, tools=[blocking_tool(gate, counter, "report")])
    first = LocalSessions(store)
    runner = await first.open("s-1", agent)
    await runner.submit(SendInput("u-1", "pay"))
    await gate.reached(TIMEOUT)
    second, runner = await crash_and_reopen(store, agent, first)
    try:
        await runner.wait_for(lambda s: s.active is None, TIMEOUT)
        assert len(counter.calls) == 1
        charge = call(runner.state, "charge")
        assert (charge.state, charge.error) == ("error", INTERRUPTED)
        events = await store.read("s-1")
        assert sum(1 for e in events if e.type == ai.TOOL_FAILED and e.payload.get("code") == "interrupted") == 1
        assert runner.state.messages[-1].final_text == "It may have been charged."
    finally:
        await second.close()
    third = LocalSessions(store)  # a second recovery adds nothing
    try:
        runner = await third.open("s-1", agent)
        assert len(await store.read("s-1")) == len(events)
    finally:
        await third.close()


async def test_recovery_keeps_the_policy_a_dynamic_tools_start_recorded(store: EventStore) -> None:
    """A tool from a dynamic source (an MCP server) says its policy in ``ai.tool.started``: after a
    crash it holds even when the source no longer lists the tool (the server is unreachable)."""
    gate, counter = Gate(), Counter()

    class Source:
        def __init__(self, tools: Sequence[Tool]) -> None:
            self.tools = tools

        async def list_tools(self, app: Mapping[str, Any]) -> Sequence[Tool]:
            return self.tools

    model = ScriptedModel([[{"tool": "charge", "input": {}}], [{"text": "It may have been charged."}]])
    before = Agent("a", "x", model, tools=[Source([blocking_tool(gate, counter, "report")])])
    first = LocalSessions(store)
    runner = await first.open("s-1", before)
    await runner.submit(SendInput("u-1", "pay"))
    await gate.reached(TIMEOUT)
    started = [e for e in await store.read("s-1") if e.type == ai.TOOL_STARTED]
    assert [e.payload.get("recovery") for e in started] == ["report"]
    second, runner = await crash_and_reopen(store, replace(before, tools=[Source([])]), first)
    try:
        await runner.wait_for(lambda s: s.active is None, TIMEOUT)
        assert len(counter.calls) == 1
        assert (call(runner.state, "charge").state, call(runner.state, "charge").error) == ("error", INTERRUPTED)
    finally:
        await second.close()


async def test_recovery_runs_a_tool_that_was_scheduled_but_never_started(store: EventStore) -> None:
    counter = Counter()
    agent = Agent(
        "a",
        "x",
        ScriptedModel([[{"tool": "add_to_cart", "input": {"slug": "mug"}}], [{"text": "ok"}]]),
        tools=[cart_tool(counter)],
    )
    # The log a crash right after the model step leaves: the call is scheduled, nothing started.
    await store.append(
        "s-1",
        [
            Event("u-1", ai.INPUT, {"role": "user", "text": "one mug", "generate": True}),
            Event("troupe:u-1:decided", ai.DECIDED, {"commandId": "u-1", "outcome": "applied"}),
            Event("troupe:s-1#3", ai.TURN_STARTED, {"turnId": "t1", "inputIds": ["u-1"], "messageId": "troupe:t1"}),
            Event("troupe:s-1#4", ai.STEP_STARTED, {"turnId": "t1", "stepId": "t1.1", "turnStep": 0, "sessionStep": 0}),
            Event(
                "troupe:s-1#5",
                ai.STREAM,
                {
                    "stepId": "t1.1",
                    "parts": [
                        {"type": "tool-call", "id": "call-1-1-1", "name": "add_to_cart", "input": {"slug": "mug"}}
                    ],
                },
            ),
            Event(
                "troupe:s-1#6",
                ai.STEP_FINISHED,
                {
                    "stepId": "t1.1",
                    "finishReason": "tool-calls",
                    "toolCalls": [{"id": "call-1-1-1", "name": "add_to_cart"}],
                },
            ),
        ],
        expected_index=0,
    )
    local = LocalSessions(store)
    try:
        runner = await local.open("s-1", agent)
        await runner.wait_for(lambda s: s.active is None, TIMEOUT)
        assert counter.calls == [{"slug": "mug", "qty": 1}]
        assert runner.state.messages[-1].final_text == "ok"
    finally:
        await local.close()


async def test_recovery_reattaches_a_running_sub_agent(store: EventStore) -> None:
    model = GatedModel("Resear", "ched.", first_only=True)
    researcher = Agent("researcher", "Research.", model)
    shop = Agent(
        "shop",
        "Shop.",
        ScriptedModel([[{"tool": "delegate_to_researcher", "input": {"task": "look"}}], [{"text": "Thanks."}]]),
        agents=[researcher],
    )
    first = LocalSessions(store)
    runner = await first.open("s-1", shop)
    await runner.submit(SendInput("u-1", "research"))
    await model.gate.reached(TIMEOUT)
    await runner.wait_for(lambda s: "Resear" in str(call(s, "delegate_to_researcher").agent), TIMEOUT)
    second, runner = await crash_and_reopen(store, shop, first)
    try:
        await runner.wait_for(lambda s: s.active is None, TIMEOUT)
        delegate = call(runner.state, "delegate_to_researcher")
        assert (delegate.state, delegate.output) == ("done", "Researched.")
        assert delegate.agent is not None and delegate.agent.messages[-1].text == "Researched."
        assert runner.state.messages[-1].final_text == "Thanks."
        assert len(model.requests) == 2  # the child resumed from its own log: one restarted step
    finally:
        await second.close()
