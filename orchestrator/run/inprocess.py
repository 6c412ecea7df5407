"""Sessions in this process: the run loop without Ray (tests, scripts, and the Ray hosts' core).

``LocalChildren`` runs each delegate call's sub-agent as a ``SessionRunner`` on the same store;
``LocalSessions`` opens sessions with it. The Ray runtime implements the same ``Children`` port
across actors; the runner is the same.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from orchestrator.core.aistate import AIState, Receipt
from orchestrator.core.commands import PauseSession, Respond, ResumeSession, SendInput, StopTurn
from orchestrator.core.ids import command_id, task_input_id
from orchestrator.run.agent import Agent
from orchestrator.run.children import ChildRequest, ChildResult, Deliver, NestedForwarder, child_result
from orchestrator.run.log import Applied
from orchestrator.run.runner import SessionRunner
from orchestrator.store.base import EventStore

__all__ = ["LocalChildren", "LocalSessions", "drive_child"]


async def drive_child(runner: SessionRunner, forwarder: NestedForwarder, request: ChildRequest) -> ChildResult:
    """Start (or re-attach to) a child session's run and wait for its result.

    The caller has subscribed ``forwarder`` to ``runner``. A re-attach first sends the parent a
    snapshot to catch up; the task input goes in only once (its id is stable); a paused child is
    resumed. The result carries the child's final state for the parent's copy.
    """
    if runner.log.index > 0:  # re-attaching: the parent's copy must catch up first
        await forwarder.snapshot(runner.state, runner.log.index)
    task_id = task_input_id(request.child_id)
    state = runner.state
    if state.turns == 0 and state.inbox.get(task_id) is None and task_id not in state.pending:
        await runner.submit(SendInput(task_id, request.task))
    if runner.state.inbox.paused:
        await runner.submit(ResumeSession(command_id()))
    state = await runner.wait_for(lambda s: child_result(s) is not None)
    result = child_result(state)
    assert result is not None
    return replace(result, final=forwarder.snapshot_batch(state, runner.log.index))


class LocalChildren:
    """Runs sub-agent sessions in this process, on ``store``."""

    def __init__(self, store: EventStore, **runner_options: Any) -> None:
        self.store = store
        self.runner_options = runner_options
        self.runners: dict[str, SessionRunner] = {}

    async def runner(self, child_id: str, agent: Agent, *, fresh: bool = False) -> SessionRunner:
        """The child's runner, opened (and recovered) on first use (``fresh``: its log is empty, read nothing)."""
        runner = self.runners.get(child_id)
        if runner is None:
            runner = await SessionRunner.open(
                self.store, child_id, agent, children=self, fresh=fresh, **self.runner_options
            )
            self.runners[child_id] = runner
        return runner

    async def run(self, request: ChildRequest, deliver: Deliver) -> ChildResult:
        """Start or re-attach to the child and stream its batches until its turn ends."""
        runner = await self.runner(request.child_id, request.agent, fresh=request.fresh)
        forwarder = NestedForwarder(request.call_id, deliver)

        async def listen(applied: list[Applied], state: AIState, index: int) -> None:
            await forwarder.forward(applied, state, index)

        runner.listeners.append(listen)  # type: ignore[arg-type]
        try:
            return await drive_child(runner, forwarder, request)
        finally:
            runner.listeners.remove(listen)  # type: ignore[arg-type]

    async def stop(self, child_id: str) -> None:
        """Stop the child's turn."""
        runner = self.runners.get(child_id)
        if runner is not None:
            await runner.submit(StopTurn(command_id()))

    async def pause(self, child_id: str, when: str) -> None:
        """Pause the child."""
        runner = self.runners.get(child_id)
        if runner is not None:
            await runner.submit(PauseSession(command_id(), "now" if when == "now" else "after-turn"))

    async def resume(self, child_id: str) -> None:
        """Resume the child."""
        runner = self.runners.get(child_id)
        if runner is not None:
            await runner.submit(ResumeSession(command_id()))

    async def respond(self, child_id: str, agent: Agent, command: Respond) -> Receipt | None:
        """Answer the child's approval (its runner decides, as for any command)."""
        runner = await self.runner(child_id, agent)
        return (await runner.submit(command)).receipt

    async def close(self) -> None:
        """Close every child runner (their logs keep everything)."""
        for runner in list(self.runners.values()):
            await runner.close()
        self.runners.clear()


class LocalSessions:
    """Open sessions in this process, with sub-agents in this process too."""

    def __init__(self, store: EventStore, **runner_options: Any) -> None:
        self.store = store
        self.runner_options = runner_options
        self.children = LocalChildren(store, **runner_options)
        self.runners: dict[str, SessionRunner] = {}

    async def open(self, session_id: str, agent: Agent) -> SessionRunner:
        """The session's runner (recovering it from the store on first use)."""
        runner = self.runners.get(session_id)
        if runner is None:
            runner = await SessionRunner.open(
                self.store, session_id, agent, children=self.children, **self.runner_options
            )
            self.runners[session_id] = runner
        return runner

    async def close(self) -> None:
        """Close every runner (a crash, as far as the log can tell)."""
        for runner in list(self.runners.values()):
            await runner.close()
        self.runners.clear()
        await self.children.close()
