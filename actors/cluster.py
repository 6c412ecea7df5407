"""``Cluster``: what a session host reaches outside its own process, as a port.

``SessionHost`` imports no Ray: the other hosts, the supervisor, the node it runs on and the way
agents arrive as bytes all come through its ``Cluster``. On Ray that is ``RayCluster``
(``actors.ray_cluster``); the in-process host's is ``InProcessCluster`` (``actors.local``), with
nothing outside it: its sub-agents run on it, and its agents are the client's own objects.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol

from actors.registry import AgentCodec
from actors.subagents import SubAgents
from orchestrator.run.children import ChildBatch, Children

__all__ = ["Cluster"]


class Cluster(Protocol):
    """What a host reaches outside its process (see the module docstring)."""

    @property
    def codec(self) -> AgentCodec | None:
        """How agents that arrive as bytes are loaded (``None``: they never do, agents are in process)."""
        ...

    def node(self) -> str | None:
        """The node this host runs on (``None``: not on a cluster)."""
        ...

    def children(self, sub: SubAgents, agent_key: str) -> Children:
        """The sub-agent port of a session running ``agent_key``."""
        ...

    def meet(self, name: str, handle: Any) -> None:
        """Host ``name`` sent its own handle (a parent's, with a child run): keep it for calls back."""
        ...

    def deliver(self, parent_host: str, parent_id: str, batch: ChildBatch) -> Awaitable[Any]:
        """Send a child's batch to its parent on another host; awaiting the result waits for that host."""
        ...

    async def report(self, entries: dict[str, str], version: tuple[float, int]) -> None:
        """Tell the supervisor this host's active sessions (``version`` orders the reports)."""
        ...

    def release(self, session_id: str) -> None:
        """Dedicated placement: this host's one session left memory (the host is free again)."""
        ...
