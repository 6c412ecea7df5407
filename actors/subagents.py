"""A host's side of sub-agent sessions: running a child for its parent, and the in-process port.

A delegate call's child session is a session like any other on the host that runs it; what is
particular to it lives here. ``SubAgents.run`` drives the child for its parent and streams the
child's batches to the parent's host (a direct call when the parent is on the same host, else
the cluster's ``deliver``, one call in flight: ``actors.batch_sender``); a repeated ``run`` (the
parent recovered) re-attaches: a snapshot first, then batches. ``HostChildren`` is the
``Children`` port of a host whose sub-agents all run on it (the in-process runtime);
``actors.children.RayChildren`` routes them across hosts and calls this one for the children
that land here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from actors.batch_sender import BatchSender
from actors.registry import AgentRegistry
from orchestrator.core.aistate import AIState, Receipt
from orchestrator.core.commands import Command, PauseSession, Respond, ResumeSession, StopTurn
from orchestrator.core.errors import UsageError
from orchestrator.core.ids import child_agent_key, command_id
from orchestrator.run.agent import Agent
from orchestrator.run.children import ChildBatch, ChildRequest, ChildResult, Deliver, NestedForwarder
from orchestrator.run.inprocess import drive_child
from orchestrator.run.log import Applied
from orchestrator.run.runner import SessionRunner

__all__ = ["FINISHED_CHILD_LINGER", "SETTLE_AFTER", "SETTLE_LIMIT", "ChildHost", "HostChildren", "SubAgents"]

SETTLE_LIMIT = 2.0
"""Seconds a long child run that ended waits for its batches on their way to the parent
(``BatchSender.settled``); past it, its result carries its whole run, as when a batch was lost."""

SETTLE_AFTER = 64
"""Events in a child's log past which its run counts as long: worth a round trip to the parent's host
(~2 ms on a 2-vCPU VM) rather than sending it and writing it again. A shorter run's result goes at
once, with its run unless every batch has already landed."""

FINISHED_CHILD_LINGER = 0.5
"""Seconds a finished sub-agent stays in memory: its result is durable, and a re-attach refolds it."""

RemoteDeliver = Callable[[str, str, ChildBatch], Awaitable[Any]]
"""Send a child's batch to the parent session on another host (awaiting it waits for that host)."""


class HostedSession(Protocol):
    """What this module needs of a session a host holds."""

    runner: SessionRunner
    busy: int
    """Calls waiting inside the session: it does not deactivate while any is."""


class ChildHost(Protocol):
    """What this module needs of its host (``SessionHost`` is one)."""

    name: str
    registry: AgentRegistry

    @property
    def hosted(self) -> Mapping[str, HostedSession]:
        """The active sessions."""
        ...

    def activate(self, session_id: str, agent_key: str, *, fresh: bool = False) -> Awaitable[HostedSession]:
        """The session, activated (and recovered) on first use (``fresh``: its log is empty, read nothing)."""
        ...

    def touch(self, session_id: str, delay: float | None = None) -> None:
        """The session did something: it deactivates after ``delay`` of quiet."""
        ...


class SubAgents:
    """The sub-agent sessions of one host, run for their parents (see the module docstring)."""

    def __init__(self, host: ChildHost, remote_deliver: RemoteDeliver) -> None:
        self.host = host
        self.remote_deliver = remote_deliver
        self._forwarders: dict[tuple[str, str], Any] = {}

    async def run(self, request: ChildRequest, root_key: str, parent_host: str) -> ChildResult:
        """Run (or re-attach to) a child session, streaming its batches to the parent's host."""
        hosted = await self._hosted(request.child_id, request.agent, root_key, request.fresh)
        runner = hosted.runner

        deliver = self._deliverer(parent_host, request.parent_id)
        forwarder = NestedForwarder(request.call_id, deliver)

        async def listen(applied: Sequence[Applied], state: AIState, index: int) -> None:
            await forwarder.forward(applied, state, index)

        # A re-attach (the parent recovered) replaces the forwarder of the earlier attach.
        key = (request.child_id, request.call_id)
        previous = self._forwarders.pop(key, None)
        if previous is not None:
            with contextlib.suppress(ValueError):
                runner.listeners.remove(previous)
        self._forwarders[key] = listen
        runner.listeners.append(listen)
        hosted.busy += 1
        try:
            result = await drive_child(runner, forwarder, request)
            # A long run waits for its batches on their way; a short one's result goes at once
            # (the wait is a round trip to the parent's host, the snapshot small).
            wait = SETTLE_LIMIT if runner.log.index > SETTLE_AFTER else 0.0
            if isinstance(deliver, BatchSender) and await deliver.settled(wait):
                # Every batch is with the parent, which writes them: its copy is whole without the
                # run as it ended (the whole run, to send and to write again).
                result = replace(result, final=None)
            return result
        finally:
            hosted.busy -= 1
            with contextlib.suppress(ValueError):
                runner.listeners.remove(listen)
            if self._forwarders.get(key) is listen:
                del self._forwarders[key]
            # A finished sub-agent is rarely asked again: it leaves memory (a dedicated one frees its
            # process) soon, rather than after the idle timeout; a parent's recovery refolds it.
            self.host.touch(request.child_id, FINISHED_CHILD_LINGER)

    async def command(self, child_id: str, agent: Any, root_key: str, command: Command) -> Receipt | None:
        """A command for a sub-agent session (an answer to its approval); returns its receipt."""
        hosted = await self._hosted(child_id, agent, root_key)
        receipt = (await hosted.runner.submit(command)).receipt
        self.host.touch(child_id)
        return receipt

    async def _hosted(self, child_id: str, agent: Any, root_key: str, fresh: bool = False) -> HostedSession:
        """The child session, activated under its agent (``agent`` may be only its name).

        ``fresh``: its delegate call has just started it, so its log is empty (nothing to read).
        """
        host = self.host
        hosted = host.hosted.get(child_id)
        if hosted is not None:
            return hosted
        child_key = child_agent_key(root_key, agent.name)
        if not host.registry.has(child_key):
            root = await host.registry.get(root_key)
            sub = root.find(agent.name)
            if sub is None:
                sub = agent if isinstance(agent, Agent) else None
            if sub is None:
                raise UsageError(f"agent {root_key!r} has no sub-agent {agent.name!r}")
            host.registry.put(child_key, sub)
        return await host.activate(child_id, child_key, fresh=fresh)

    def _deliverer(self, parent_host: str, parent_id: str) -> Deliver:
        if parent_host == self.host.name:

            async def local(batch: ChildBatch) -> None:
                await self.deliver(parent_id, batch)

            return local
        remote_deliver = self.remote_deliver

        def send(batch: ChildBatch) -> Awaitable[Any]:
            return remote_deliver(parent_host, parent_id, batch)

        # The child never waits for a batch to land (only, at the end of a long run, for all of
        # them: BatchSender.settled): batches carry sequence numbers, and a lost one is healed by
        # the snapshot the child sends when the parent re-attaches, and with its result.
        return BatchSender(send)

    async def deliver(self, session_id: str, batch: ChildBatch) -> bool:
        """A child's batch for session ``session_id`` (a parent hosted here; dropped if it is not): whether taken."""
        hosted = self.host.hosted.get(session_id)
        if hosted is None:
            return False
        await hosted.runner.deliver(batch)
        return True

    async def control(self, session_id: str, action: str, when: str = "now") -> None:
        """Stop, pause or resume a session that is active here (a parent's cascade)."""
        hosted = self.host.hosted.get(session_id)
        if hosted is None:
            return
        command: Command
        if action == "stop":
            command = StopTurn(command_id())
        elif action == "pause":
            command = PauseSession(command_id(), "now" if when == "now" else "after-turn")
        else:
            command = ResumeSession(command_id())
        await hosted.runner.submit(command)


class HostChildren:
    """The ``Children`` port of a session whose sub-agents run on its own host."""

    def __init__(self, sub: SubAgents, agent_key: str) -> None:
        self.sub = sub
        self.root_key = agent_key.split("#", 1)[0]

    async def run(self, request: ChildRequest, deliver: Deliver) -> ChildResult:
        """Start or re-attach to the child; its batches reach the parent on this host."""
        return await self.sub.run(request, self.root_key, self.sub.host.name)

    async def respond(self, child_id: str, agent: Agent, command: Respond) -> Receipt | None:
        """Answer the child's approval."""
        return await self.sub.command(child_id, agent, self.root_key, command)

    async def stop(self, child_id: str) -> None:
        """Stop the child's turn."""
        await self.sub.control(child_id, "stop")

    async def pause(self, child_id: str, when: str) -> None:
        """Pause the child."""
        await self.sub.control(child_id, "pause", when)

    async def resume(self, child_id: str) -> None:
        """Resume the child."""
        await self.sub.control(child_id, "resume")
