"""``RayChildren``: the sub-agent port across session hosts.

A delegate call's child session runs on the host the router places it on (possibly this one).
The parent's host awaits ``child_run`` on the child's host, which streams the child's batches
back to the parent's host as fire-and-forget ``deliver`` calls and returns the child's result.
If the child's host dies, the parent waits for it to restart and calls again: the child session
recovers from its own log and the new call re-attaches (a snapshot first, then batches).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import TYPE_CHECKING

from actors.host import SessionMoved
from actors.options import ACTOR_ERRORS
from orchestrator.core.aistate import Receipt
from orchestrator.core.commands import Respond
from orchestrator.run.agent import Agent
from orchestrator.run.children import ChildRequest, ChildResult, Deliver

if TYPE_CHECKING:
    from actors.host import SessionHost

__all__ = ["RayChildren"]

_ACTOR_ERRORS = ACTOR_ERRORS


class RayChildren:
    """Runs a host's sub-agent sessions on session hosts (see the module docstring)."""

    def __init__(self, host: SessionHost, agent_key: str) -> None:
        self.host = host
        self.root_key = agent_key.split("#", 1)[0]

    async def run(self, request: ChildRequest, deliver: Deliver) -> ChildResult:
        """Start or re-attach to the child; its batches reach the parent through its host."""
        router = self.host.router
        # Ship the sub-agent's name, not the agent: the child's host loads it from the registry.
        light = replace(request, agent=_AgentName(request.agent.name))  # type: ignore[arg-type]
        for attempt in range(100):
            target = await router.place(request.child_id)
            if target == self.host.name:
                return await self.host.child_run(request, self.root_key, self.host.name)
            try:
                result: ChildResult = await router.host(target).child_run.remote(light, self.root_key, self.host.name)
                return result
            except SessionMoved:
                router.forget(request.child_id)
            except _ACTOR_ERRORS:
                # The child's host died: wait for it to restart, then re-attach.
                router.forget(request.child_id)
                await router.wait_ready(target)
                await asyncio.sleep(min(0.05 * attempt, 0.5))
        return ChildResult(None, f"sub-agent session {request.child_id} could not be reached")

    async def respond(self, child_id: str, agent: Agent, command: Respond) -> Receipt | None:
        """Answer the child's approval on the child's host."""
        router = self.host.router
        name = _AgentName(agent.name)
        for attempt in range(100):
            target = await router.place(child_id)
            if target == self.host.name:
                receipt: Receipt | None = await self.host.child_command(child_id, name, self.root_key, command)
                return receipt
            try:
                answer: Receipt | None = await router.host(target).child_command.remote(
                    child_id, name, self.root_key, command
                )
                return answer
            except SessionMoved:
                router.forget(child_id)
            except _ACTOR_ERRORS:
                router.forget(child_id)
                await router.wait_ready(target)
                await asyncio.sleep(min(0.05 * attempt, 0.5))
        return Receipt(command.id, "rejected", "unreachable")

    async def _control(self, child_id: str, action: str, when: str = "now") -> None:
        router = self.host.router
        target = await router.place(child_id)
        if target == self.host.name:
            await self.host.control(child_id, action, when)
            return
        try:
            await router.host(target).control.remote(child_id, action, when)
        except _ACTOR_ERRORS:
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
