"""The Ray runtime for real: hosts, sub-agents across actors, the supervisor, crashes and pauses."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.bench.models import Burst, Drip
from actors.bench.nested import CALL, _apart, _delegate, _parent
from actors.client import Session
from actors.runtime import Runtime
from actors.subagents import SETTLE_AFTER
from orchestrator.core import event_types as ai
from orchestrator.core.aistate import AIState
from orchestrator.core.approvals import pending_approvals
from orchestrator.core.errors import UsageError
from orchestrator.core.fold import INTERRUPTED, fold_events
from orchestrator.core.mutations import ClientView
from orchestrator.core.parts import AgentMessage, NestedRun, ToolPart
from orchestrator.core.payloads import Nested
from orchestrator.core.stream import RunSnapshot
from orchestrator.run.agent import Agent, Compaction
from orchestrator.testing import ScriptedModel, eventually
from tests.fixtures.agents import Counter, approving_tree, delegating

from .conftest import ON_EVERY_STORE
from .helpers import CrashingModel, Gate, count_compact, count_lines, crashing_tool, gated_model

TIMEOUT = 60


def tool_parts(messages: Any) -> Iterator[ToolPart]:
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolPart):
                yield part


def call(messages: Any, name: str) -> ToolPart:
    return next(p for p in tool_parts(messages) if p.name == name)


async def host_of(rt: Runtime, session_id: str) -> Any:
    return rt.router.host(await rt.router.place(session_id))


async def wait_state(session: Session, predicate: Any, timeout: float = TIMEOUT) -> AIState:
    """The session's state once ``predicate`` holds: checked after every change its live view sees.

    (And every half second too: not every change of the full state, such as the inbox, reaches a
    client as a mutation.)
    """
    live = await session.live()
    try:

        async def holds() -> AIState | None:
            state = (await session.state()).state
            return state if predicate(state) else None

        return await eventually(holds, timeout, interval=0.5, wake=live.changed, what="the session's state")
    finally:
        await live.close()


def assert_nested_two_levels(messages: Any, priced: str = "Mugs cost 4.99.") -> None:
    research = call(messages, "delegate_to_researcher")
    assert (research.state, research.output) == ("done", "The mug is 4.99.")
    assert isinstance(research.agent, NestedRun) and research.agent.status == "idle"
    pricing = call(research.agent.messages, "delegate_to_pricer")
    assert (pricing.state, pricing.output) == ("done", priced)
    assert pricing.agent is not None and pricing.agent.messages[-1].final_text == priced
    if priced == "Mugs cost 4.99.":  # the scripted pricer looks the price up first
        assert call(pricing.agent.messages, "lookup_price").output == "4.99"


# -- scale and nesting ----------------------------------------------------------------------------------


@pytest.mark.slow
async def test_hosts_hand_the_interpreter_lock_to_rays_task_thread_sooner(runtime: Runtime) -> None:
    # Every call into a host passes through Ray's task thread, which waits for the lock the
    # host's busy event loop holds: hosts shorten Python's 5 ms switch interval (HostOptions).
    for host in await runtime.hosts():
        stats = await asyncio.wait_for(host.stats.remote(), TIMEOUT)
        assert stats["switch_interval"] == pytest.approx(0.001)


async def test_fifty_sessions_delegating_two_levels_deep(runtime: Runtime) -> None:
    agent = delegating()

    async def one(i: int) -> tuple[Session, Any]:
        session = runtime.session(f"s-{i}", agent=agent)
        live = await session.live()
        turn = await session.prompt("compare prices")
        result = await asyncio.wait_for(turn.finished, TIMEOUT)
        assert result.success, result
        await live.wait_for(lambda v: v.state.status == "idle" and v.index > 0, TIMEOUT)
        return session, live

    done = await asyncio.gather(*(one(i) for i in range(50)))
    for session, live in done:
        snapshot = await session.state()
        assert_nested_two_levels(snapshot.state.messages)
        # The live view built from mutations alone matches the session's state...
        await live.wait_for(lambda v, s=snapshot: v.index >= s.index, TIMEOUT)
        assert live.view.state.messages == snapshot.state.messages
        await live.close()
        # ...and the logs replay to it, the parent's and every sub-agent's.
        log = await runtime.store.read(session.id)
        assert fold_events(log) == snapshot.state
        research = call(snapshot.state.messages, "delegate_to_researcher")
        child = fold_events(await runtime.store.read(f"{session.id}/{research.id}"))
        assert research.agent is not None and child.messages == research.agent.messages


async def test_a_sub_agents_approval_is_answered_through_the_top_session(runtime: Runtime) -> None:
    session = runtime.session("approve-deep", agent=approving_tree(Counter()))
    turn = await session.prompt("a mug please")
    state = await wait_state(session, lambda s: bool(pending_approvals(s)))
    [approval] = pending_approvals(state)
    assert len(approval.path) == 2 and approval.name == "add_to_cart"
    receipt = await session.respond(approval.id, approved=True)
    assert receipt.outcome == "applied"
    result = await asyncio.wait_for(turn.finished, TIMEOUT)
    assert (result.success, result.text) == (True, "Ok.")
    final = (await session.state()).state
    research = call(final.messages, "delegate_to_researcher")
    assert research.agent is not None
    buying = call(research.agent.messages, "delegate_to_buyer")
    assert buying.agent is not None and call(buying.agent.messages, "add_to_cart").output == "Added."


async def test_a_session_streams_and_its_turn_resolves(runtime: Runtime) -> None:
    agent = Agent("a", "x", ScriptedModel([[{"text": "Hello there.", "chunk": 3}]], per_turn=True))
    session = runtime.session("one", agent=agent)
    subscription = session.subscribe()
    start = await subscription.ready()
    turn = await session.prompt("hi")
    result = await asyncio.wait_for(turn.finished, TIMEOUT)
    assert (result.success, result.text) == (True, "Hello there.")
    view = ClientView()  # the subscription alone rebuilds the conversation: it started before the turn
    async for mutation in subscription:
        assert mutation.index > start
        view.apply_batch([mutation])
        if mutation.type == "turn" and mutation["turn"] is None:
            break
    subscription.close()
    assert [m.text for m in view.state.messages] == ["hi", "Hello there."]
    info = await session.info()
    assert info["executing"] is False and info["lastTurn"]["outcome"] == "completed"


# -- crashes -----------------------------------------------------------------------------------------------

MODES = ["exit", "kill"]


async def crash(rt: Runtime, session_id: str, gate: Any, mode: str) -> None:
    """Kill the session's host: it either exits inside the step, or the test kills it at the gate."""
    if mode == "kill":
        await asyncio.wait_for(gate.wait_reached.remote(), TIMEOUT)
        ray.kill(await host_of(rt, session_id), no_restart=False)


@ON_EVERY_STORE
@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
async def test_a_crash_during_a_model_step_restarts_the_step(runtime: Runtime, tmp_path: Path, mode: str) -> None:
    gate = Gate.remote()
    marker = str(tmp_path / "attempts")
    how = "gate" if mode == "kill" else "exit"
    agent = Agent("a", "x", CrashingModel("Hel", "lo.", marker, mode=how, store_url=runtime.store_url, gate=gate))
    session = runtime.session("crash-step", agent=agent)
    turn = await session.prompt("hi")
    await crash(runtime, session.id, gate, mode)
    queued = await session.prompt("and then?")
    result = await asyncio.wait_for(turn.finished, TIMEOUT)
    assert (result.success, result.text) == (True, "Hello.")  # rolled back and replayed, not "HelHello."
    assert (await asyncio.wait_for(queued.finished, TIMEOUT)).success  # no accepted input is lost
    events = await runtime.store.read(session.id)
    assert any(e.type == ai.STEP_SUPERSEDED and e.payload.get("reason") == "recovered" for e in events)
    assert (await session.state()).state.messages[1].text == "Hello."


def tool_agent(rt: Runtime, name: str, marker: str, recovery: str, mode: str, gate: Any) -> Agent:
    how = "gate" if mode == "kill" else "exit"
    return Agent(
        "a",
        "x",
        ScriptedModel([[{"tool": name, "input": {}}], [{"text": "Finished."}]], per_turn=True),
        tools=[crashing_tool(name, marker, recovery=recovery, mode=how, store_url=rt.store_url, gate=gate)],
    )


@ON_EVERY_STORE
@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
async def test_a_crash_during_a_rerun_tool_runs_it_again(runtime: Runtime, tmp_path: Path, mode: str) -> None:
    gate, marker = Gate.remote(), tmp_path / "runs"
    session = runtime.session(
        "crash-rerun", agent=tool_agent(runtime, "sync_inventory", str(marker), "rerun", mode, gate)
    )
    turn = await session.prompt("sync")
    await crash(runtime, session.id, gate, mode)
    result = await asyncio.wait_for(turn.finished, TIMEOUT)
    assert (result.success, result.text) == (True, "Finished.")
    runs = marker.read_text().splitlines()
    assert len(runs) == 2 and runs[0].split()[0] == runs[1].split()[0]  # same call id: an idempotency key
    state = (await session.state()).state
    assert call(state.messages, "sync_inventory").output == "sync_inventory done"


@ON_EVERY_STORE
@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
async def test_a_crash_during_a_report_tool_reports_it_once(runtime: Runtime, tmp_path: Path, mode: str) -> None:
    gate, marker = Gate.remote(), tmp_path / "runs"
    session = runtime.session(
        "crash-report", agent=tool_agent(runtime, "charge_card", str(marker), "report", mode, gate)
    )
    turn = await session.prompt("pay")
    await crash(runtime, session.id, gate, mode)
    result = await asyncio.wait_for(turn.finished, TIMEOUT)
    assert result.success
    assert count_lines(marker) == 1  # it ran exactly once
    state = (await session.state()).state
    charge = call(state.messages, "charge_card")
    assert (charge.state, charge.error) == ("error", INTERRUPTED)
    events = await runtime.store.read(session.id)
    assert sum(1 for e in events if e.type == ai.TOOL_FAILED and e.payload.get("code") == "interrupted") == 1


@ON_EVERY_STORE
@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
async def test_a_crash_during_a_running_sub_agent(runtime: Runtime, tmp_path: Path, mode: str) -> None:
    gate, marker = Gate.remote(), str(tmp_path / "attempts")
    how = "gate" if mode == "kill" else "exit"
    pricer = CrashingModel("Mugs cost ", "4.99.", marker, mode=how, store_url=runtime.store_url, gate=gate)
    agent = delegating(pricer_model=pricer)
    session = runtime.session("crash-child", agent=agent)
    turn = await session.prompt("compare")
    if mode == "kill":
        await asyncio.wait_for(gate.wait_reached.remote(), TIMEOUT)
        state = (await session.state()).state
        research = call(state.messages, "delegate_to_researcher")
        grandchild = f"{session.id}/{research.id}/"
        hosts = {n for n in runtime.host_names}
        # Kill the host that runs the pricer (the grandchild), wherever it was placed.
        for name in hosts:
            sessions = await runtime.router.host(name).sessions.remote()
            if any(s.startswith(grandchild) for s in sessions):
                ray.kill(runtime.router.host(name), no_restart=False)
    result = await asyncio.wait_for(turn.finished, TIMEOUT)
    assert (result.success, result.text) == (True, "It is 4.99.")
    state = (await session.state()).state
    research = call(state.messages, "delegate_to_researcher")
    assert research.state == "done" and research.output == "The mug is 4.99."
    assert research.agent is not None
    pricing = call(research.agent.messages, "delegate_to_pricer")
    assert pricing.output == "Mugs cost 4.99."
    assert pricing.agent is not None and pricing.agent.messages[-1].text == "Mugs cost 4.99."


# -- pause and resume on a tree ------------------------------------------------------------------------------


@pytest.mark.slow
async def test_pause_now_and_resume_a_tree_of_three(runtime: Runtime) -> None:
    gate = Gate.remote()
    agent = delegating(pricer_model=gated_model(gate, "Mugs cost 4.99."))
    session = runtime.session("tree-now", agent=agent)
    turn = await session.prompt("compare")
    await asyncio.wait_for(gate.wait_reached.remote(), TIMEOUT)
    await session.pause("now")
    state = await wait_state(session, lambda s: s.active is not None and s.active.phase == "paused")
    research = call(state.messages, "delegate_to_researcher")
    child_id = f"{session.id}/{research.id}"
    directory = await runtime.supervisor.tree.remote(session.id)
    assert child_id in directory and len(directory) == 3
    for sid in directory:
        entry = await runtime.supervisor.where.remote(sid)
        snap, _ = await runtime.router.host(entry["host"]).snapshot.remote(sid, entry["agent"])
        assert snap.inbox.paused, sid
    await gate.open.remote()
    await session.resume()
    result = await asyncio.wait_for(turn.finished, TIMEOUT)
    assert result.success and result.text == "It is 4.99."
    # The pricer's cut step was rolled back and ran again from the start ("waiting " once).
    assert_nested_two_levels((await session.state()).state.messages, "waiting Mugs cost 4.99.")


@pytest.mark.slow
async def test_pause_after_turn_on_a_tree_lets_the_turn_finish_and_holds_the_next(runtime: Runtime) -> None:
    gate = Gate.remote()
    agent = delegating(pricer_model=gated_model(gate, "Mugs cost 4.99."))
    session = runtime.session("tree-after", agent=agent)
    turn = await session.prompt("compare")
    await asyncio.wait_for(gate.wait_reached.remote(), TIMEOUT)
    await session.pause("after-turn")
    await gate.open.remote()
    assert (await asyncio.wait_for(turn.finished, TIMEOUT)).success
    second = await session.prompt("again")
    state = await wait_state(session, lambda s: s.inbox.paused and len(s.inbox.items) == 1)
    assert state.active is None
    await session.resume()
    assert (await asyncio.wait_for(second.finished, TIMEOUT)).success


@ON_EVERY_STORE
async def test_a_host_killed_right_after_accepting_a_prompt_runs_the_turn_by_itself(runtime: Runtime) -> None:
    session = runtime.session("killed-early", agent=Agent("dripper", "Drip.", Drip(seconds=0.2)))
    await session.prompt("go")  # accepted: the input is in the log
    ray.kill(await host_of(runtime, session.id), no_restart=False)

    async def turn_ended() -> list[str] | None:
        # Only the store is read: no client call re-activates the session.
        log = await runtime.store.read(session.id)
        return [e.type for e in log] if any(e.type == ai.TURN_FINISHED for e in log) else None

    types = await eventually(turn_ended, TIMEOUT, interval=0.05, what="the turn ended in the log")
    assert ai.STREAM in types


# -- deactivation ----------------------------------------------------------------------------------------------


async def test_an_idle_session_deactivates_and_reactivates_with_its_state(runtime: Runtime) -> None:
    agent = Agent("a", "x", ScriptedModel([[{"text": "one"}], [{"text": "two"}]]))
    session = runtime.session("sleepy", agent=agent)
    assert (await (await session.prompt("first")).finished).success
    host = await host_of(runtime, session.id)
    assert session.id in await host.sessions.remote()
    assert await runtime.deactivate_idle() >= 1
    assert session.id not in await host.sessions.remote()
    result = await (await session.prompt("second")).finished
    assert result.text == "two"
    messages: list[AgentMessage] = await session.messages()
    assert [m.text for m in messages] == ["first", "one", "second", "two"]


# -- compaction ----------------------------------------------------------------------------------------------


async def test_compaction_on_ray_the_catalog_default_and_a_custom_compact(runtime: Runtime) -> None:
    text = "x" * 400  # about 100 tokens a turn: the 300-token default threshold is crossed by turn 4
    model = ScriptedModel([[{"text": text}]], per_turn=True, context_window=400)
    session = runtime.session("windowed", agent=Agent("a", "x", model))
    for i in range(5):
        result = await asyncio.wait_for((await session.prompt(f"m{i}")).finished, TIMEOUT)
        assert result.success
    state = (await session.state()).state
    assert state.model_metadata["scripted"].status == "resolved"
    assert state.compaction is not None and state.compaction.status == "completed"
    assert state.compaction.threshold_tokens == 300 and state.indicator is None
    assert len(state.messages) == 10  # the conversation stays complete

    custom = Compaction(should_compact=lambda c: len(c.messages) > 2, compact=count_compact)
    other = runtime.session(
        "custom", agent=Agent("b", "x", ScriptedModel([[{"text": "ok"}]], per_turn=True), compaction=custom)
    )
    for i in range(2):
        assert (await asyncio.wait_for((await other.prompt(f"m{i}")).finished, TIMEOUT)).success
    summary = (await other.state()).state.compaction
    assert summary is not None and summary.summary is not None and summary.summary.startswith("2 messages before")


# -- calls ------------------------------------------------------------------------------------------


async def test_calls_made_in_one_turn_of_the_loop_reach_each_host_as_one_batch(runtime: Runtime) -> None:
    sessions = [runtime.session(f"b-{i}", agent=delegating()) for i in range(20)]
    await sessions[0].state()  # the agent is registered: from here no call waits before it is sent
    hosts = await runtime.hosts()

    async def batched() -> tuple[int, int]:
        stats = await asyncio.gather(*(asyncio.wait_for(h.stats.remote(), TIMEOUT) for h in hosts))
        return sum(s["batches"] for s in stats), sum(s["batched"] for s in stats)

    batches0, calls0 = await batched()
    pushes = [s.push(("note.added", {"n": i})) for i, s in enumerate(sessions)]
    bad = sessions[3].push(("note.added", {"n": float("nan")}))  # refused by the host, in the batch
    *indexes, refused = await asyncio.gather(*pushes, bad, return_exceptions=True)

    assert all(isinstance(i, int) and i >= 1 for i in indexes), indexes
    assert isinstance(refused, UsageError) and "JSON" in str(refused), refused
    for i, session in enumerate(sessions):  # each push landed in its own session, once
        log = await runtime.store.read(session.id)
        assert [e.payload for e in log if e.type == "note.added"] == [{"n": i}]
    per_host = collections.Counter(runtime.router.place_now(s.id) for s in [*sessions, sessions[3]])
    together = [n for n in per_host.values() if n > 1]  # a call alone goes as itself
    assert await batched() == (batches0 + len(together), calls0 + sum(together)), per_host


async def test_a_long_child_across_actors_sends_its_run_once(runtime: Runtime) -> None:
    # A long run's batches reach the parent before its result does (BatchSender.settled), so the
    # result carries no snapshot of the whole run and the parent writes the run once: its first
    # batch is the run so far (a snapshot), every later one a part of it.
    parts = 50_000  # a write every 256 parts (flush_parts): ~200 events
    session_id = _apart(runtime.host_names, "once")
    turn = await runtime.session(session_id, agent=_parent(Agent("child", "Stream.", Burst(parts)))).prompt("go")
    assert (await asyncio.wait_for(turn.finished, TIMEOUT)).success
    parent_log = await runtime.store.read(session_id)
    nested = [e.data for e in parent_log if isinstance(e.data, Nested)]
    snapshots = [n for n in nested if any(isinstance(getattr(a, "part", None), RunSnapshot) for a in n.actions)]
    assert nested and snapshots == nested[:1]
    delegate = _delegate(parent_log)
    assert delegate is not None and delegate.agent is not None and delegate.agent.messages[-1].text == "A000" * parts
    child_log = await runtime.store.read(f"{session_id}/{CALL}")
    assert len(child_log) > SETTLE_AFTER  # a long run
    assert nested[-1].seq == child_log[-1].index  # the copy got to the child's last event
