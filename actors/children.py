"""``RayChildren``: the sub-agent port across session hosts.

A delegate call's child session runs on the host the router places it on (possibly this one).
The parent's host awaits ``child_run`` on the child's host, which streams the child's batches
back to the parent's host as fire-and-forget ``deliver`` calls and returns the child's result.
If the child's host dies, the parent waits for it to restart and calls again (``CHILD_CALL``):
the child session recovers from its own log and the new call re-attaches (a snapshot first,
then batches). A child placed on this host is run here, through ``HostChildren``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from actors.errors import SessionMoved
from actors.options import ACTOR_ERRORS
from actors.retry import CHILD_CALL, RetriesExhausted
from actors.router import HostNotFound, Router
from actors.subagents import HostChildren, SubAgents
from orchestrator.core.aistate import Receipt
from orchestrator.core.commands import Respond
from orchestrator.run.agent import Agent
from orchestrator.run.children import ChildRequest, ChildResult, Deliver

__all__ = ["RayChildren"]

_RETRIED: tuple[type[Exception], ...] = (*ACTOR_ERRORS, SessionMoved, HostNotFound)
"""What the call to a child's host is retried across (``Router.on_host``)."""


class RayChildren:
    """Runs a host's sub-agent sessions on session hosts (see the module docstring)."""

    def __init__(self, sub: SubAgents, router: Router, agent_key: str, introduce: Callable[[str], Any]) -> None:
        self.here = HostChildren(sub, agent_key)
        self.name = sub.host.name
        self.router = router
        self.root_key = self.here.root_key
        self.introduce = introduce
        """This host's own handle for a first child run on a host (``None`` after): the child's
        host calls back with it, without a lookup by name."""

    async def run(self, request: ChildRequest, deliver: Deliver) -> ChildResult:
        """Start or re-attach to the child; its batches reach the parent through its host."""
        if await self.router.place(request.child_id) == self.name:
            # Placed here: run it without the retry loop's frames and closures held for as long
            # as the sub-agent works (~1 KB for every delegate call in flight). A failure the loop
            # would retry sends the call down the full path, which asks again where the child is.
            try:
                return await self.here.sub.run(request, self.root_key, self.name)
            except _RETRIED:
                self.router.forget(request.child_id)
                request = replace(request, fresh=False)  # the attempt may have started the child
        # Ship the sub-agent's name, not the agent: the child's host loads it from the registry.
        light = replace(request, agent=_AgentName(request.agent.name))  # type: ignore[arg-type]
        attempts = 0

        async def call(target: str) -> ChildResult:
            nonlocal attempts
            attempts += 1
            first = attempts == 1  # a retry may find the child started by the attempt before it
            if target == self.name:
                return await self.here.run(request if first else replace(request, fresh=False), deliver)
            result: ChildResult = await self.router.host(target).child_run.remote(
                light if first else replace(light, fresh=False), self.root_key, self.name, self.introduce(target)
            )
            return result

        try:
            return await self.router.on_host(request.child_id, call, CHILD_CALL)
        except RetriesExhausted:
            return ChildResult(None, f"sub-agent session {request.child_id} could not be reached")

    async def respond(self, child_id: str, agent: Agent, command: Respond) -> Receipt | None:
        """Answer the child's approval on the child's host."""
        name = _AgentName(agent.name)

        async def call(target: str) -> Receipt | None:
            if target == self.name:
                return await self.here.respond(child_id, agent, command)
            answer: Receipt | None = await self.router.host(target).child_command.remote(
                child_id, name, self.root_key, command
            )
            return answer

        try:
            return await self.router.on_host(child_id, call, CHILD_CALL)
        except RetriesExhausted:
            return Receipt(command.id, "rejected", "unreachable")

    async def _control(self, child_id: str, action: str, when: str = "now") -> None:
        target = await self.router.place(child_id)
        if target == self.name:
            await self.here.sub.control(child_id, action, when)
            return
        try:
            await self.router.host(target).control.remote(child_id, action, when)
        except ACTOR_ERRORS:
            pass  # a dead host's sessions recover on restart; the parent's own state decides

    async def stop(self, child_id: str) -> None:
        """Stop the child's turn."""
        await self._control(child_id, "stop")

    async def pause(self, child_id: str, when: str) -> None:
        """Pause the child."""
        await self._control(child_id, "pause", when)

    async def resume(self, child_id: str) -> None:
        """Resume the child."""
        await self._control(child_id, "resume")


class _AgentName:
    """Stands in for an ``Agent`` in a child request: only its name crosses the wire."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name
