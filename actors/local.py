"""``LocalRuntime``: the session API on one host in this process, with no Ray at all.

The same ``SessionHost`` and ``Session`` client as the Ray runtime, over an in-process transport:
every session and sub-agent runs here. For tests, scripts, and embedding a few sessions in a
program that is not a Ray application. Any store works, ``memory://`` included.

Agents are not pickled: the host runs the very ``Agent`` objects its sessions were opened with
(there is no other process to send them to), so a test's model or tool objects are the ones that
run, and an agent need not be picklable here (on Ray it must be).
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable
from typing import Any

from actors.base import BaseRuntime
from actors.host import SessionHost
from actors.host_options import HostOptions
from actors.subagents import HostChildren, SubAgents
from actors.transport import LocalTransport
from orchestrator.run.agent import Agent
from orchestrator.run.children import ChildBatch, Children
from orchestrator.run.pacing import FIRST_FLUSH, NESTED_DELAY
from orchestrator.store import open_store

__all__ = ["InProcessCluster", "LocalRuntime"]


class InProcessCluster:
    """The cluster of the one in-process host: nothing outside it (every sub-agent runs on it too)."""

    codec = None
    """Agents never arrive as bytes: the runtime hands the host its objects."""

    def __init__(self, name: str, options: HostOptions) -> None:
        self.name = name

    def node(self) -> str | None:
        """Not on a cluster."""
        return None

    def children(self, sub: SubAgents, agent_key: str) -> Children:
        """Sub-agents run on this same host."""
        return HostChildren(sub, agent_key)

    def meet(self, name: str, handle: Any) -> None:
        """Never called: no other host sends this one anything."""

    def deliver(self, parent_host: str, parent_id: str, batch: ChildBatch) -> Awaitable[Any]:
        """Never called: every parent is on this host, and gets its batches directly."""
        raise AssertionError(f"an in-process host has no other host ({parent_host!r}) to deliver to")

    async def report(self, entries: dict[str, str], version: tuple[float, int]) -> None:
        """No supervisor to tell."""

    def release(self, session_id: str) -> None:
        """No dedicated placement in process."""


class LocalRuntime(BaseRuntime):
    """Sessions in this process (see the module docstring)."""

    def __init__(
        self,
        store: str = "memory://",
        *,
        idle_timeout: float = 300.0,
        flush_interval: float = FIRST_FLUSH,
        flush_parts: int = 256,
        nested_delay: float = NESTED_DELAY,
    ) -> None:
        super().__init__()
        options = HostOptions(
            store=store,
            namespace="local",
            idle_timeout=idle_timeout,
            flush_interval=flush_interval,
            flush_parts=flush_parts,
            nested_delay=nested_delay,
            poll_linger=0.0,
            extra={"hosts": ["local"], "local": True},
        )
        self.options = options
        self.host: SessionHost | None = None
        self.store = open_store(store)
        self._serial = itertools.count(1)

    def _agent_key(self, agent: Agent) -> str:
        return f"{agent.name}@local-{next(self._serial)}"

    async def _register_agent(self, key: str, agent: Agent) -> None:
        assert self.host is not None, "start the runtime first (async with LocalRuntime() as rt)"
        self.host.registry.put(key, agent)

    async def start(self) -> None:
        """Create the in-process host."""
        if self.host is None:
            self.host = SessionHost("local", self.options, InProcessCluster, store=self.store)
            self._registered.clear()  # a new host knows no agent yet
            self.transport = LocalTransport(self.host)

    async def close(self) -> None:
        """Close every session and the store."""
        await self._close_pollers()
        if self.host is not None:
            await self.host.shutdown()
            self.host = None
