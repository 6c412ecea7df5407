"""``RayCluster``: what a session host on Ray reaches outside its process (the ``actors.cluster`` port).

``SessionHost`` is a plain class that imports no Ray (the in-process runtime runs it as is);
whatever it needs of the cluster comes through its ``Cluster``. On Ray that is this: the router
to the other hosts and the supervisor, sub-agents routed across hosts (``RayChildren``), agents
unpickled with Ray's own cloudpickle, and the node the host runs on. The Ray runtime and the
supervisor create every host with ``SessionHost(name, options, RayCluster)``: Ray re-runs that
constructor after a crash, in the host's own process, so the cluster is built there.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any

import ray
from ray import cloudpickle

from actors.children import RayChildren
from actors.host_options import HostOptions
from actors.registry import AgentCodec
from actors.router import Router
from actors.subagents import SubAgents
from orchestrator.run.agent import Agent
from orchestrator.run.background import run_kept
from orchestrator.run.children import ChildBatch, Children

__all__ = ["RAY_PICKLE", "RayCluster"]


class _RayPickle:
    """Agents as Ray's cloudpickle bytes (``register_pickle_by_value`` applies to them too)."""

    def dumps(self, agent: Agent) -> bytes:
        """The agent's bytes."""
        data: bytes = cloudpickle.dumps(agent)  # type: ignore[no-untyped-call]
        return data

    def loads(self, data: bytes) -> Agent:
        """The agent back."""
        agent: Agent = cloudpickle.loads(data)
        return agent


RAY_PICKLE: AgentCodec = _RayPickle()
"""How the Ray runtime's agents travel to its hosts."""

_INTRODUCED_KEPT = 4096
"""Hosts a host remembers having sent its handle to (``RayCluster.introduce``)."""


async def _answer_dropped(call: Awaitable[Any]) -> None:
    """Wait for ``call``, whatever it answers (awaited, a failed call is not reported as unhandled)."""
    with contextlib.suppress(Exception):
        await call


class RayCluster:
    """A Ray host's links to the rest of the cluster (see the module docstring)."""

    codec: AgentCodec = RAY_PICKLE

    def __init__(self, name: str, options: HostOptions) -> None:
        self.name = name
        self.router = Router(
            options.namespace,
            options.extra.get("hosts", [name]),
            options.placement,
            children=options.extra.get("children", "spread"),
        )
        self._own: Any = None
        self._introduced: set[str] = set()
        """The hosts this one sent its handle to (``introduce``)."""
        self._greetings: set[asyncio.Future[Any]] = set()
        """First calls to hosts just met, still on their way (``meet``)."""

    def node(self) -> str | None:
        """The id of the node this host runs on."""
        node: str | None = ray.get_runtime_context().get_node_id()
        return node

    def children(self, sub: SubAgents, agent_key: str) -> Children:
        """A session's sub-agent port: its children run on the hosts the router places them on."""
        return RayChildren(sub, self.router, agent_key, self.introduce)

    def introduce(self, host: str) -> Any:
        """This host's own handle, for its first child run on ``host`` (``None`` after: ``host`` keeps it).

        Only the first time: a handle in a call is serialized, and registered again on the other
        side. Sent with every child run, the first nested part (pooled, probe, two alternating
        pairs of 25 trials) came 1.2-1.4 ms later in both pairs, within the machine's swing. A host
        that restarts has forgotten it, and looks this one up by name once.
        """
        introduced = self._introduced
        if host in introduced:
            return None
        if len(introduced) >= _INTRODUCED_KEPT:
            introduced.clear()  # dedicated hosts come and go: forget them all now and then
        introduced.add(host)
        if self._own is None:
            self._own = ray.get_runtime_context().current_actor
        return self._own

    def meet(self, name: str, handle: Any) -> None:
        """Host ``name`` sent its own handle: calls to it need no lookup by name, and one goes at once.

        Ray connects to another actor on the first call to it. Met with a child's first run, the
        parent's host gets that first call now (``ready``, its answer dropped), while the child
        starts, rather than with the child's first batch. Dedicated hosts (`bench actors`, five
        alternating pairs of 15 trials), the first batch's way back to the parent, p50: 3.8-4.4 ms
        with the call, 4.8-6.5 without.
        """
        self.router.keep(name, handle)
        run_kept(self._greetings, _answer_dropped(handle.ready.remote()))

    def deliver(self, parent_host: str, parent_id: str, batch: ChildBatch) -> Awaitable[Any]:
        """Send a child's batch to its parent on another host: the call's result (``actors.batch_sender``)."""
        ref: Awaitable[Any] = self.router.host(parent_host).deliver.remote(parent_id, batch)
        return ref

    async def report(self, entries: dict[str, str], version: tuple[float, int]) -> None:
        """Tell the supervisor this host's active sessions (fire and forget)."""
        await self.router.report(self.name, entries, version)

    def release(self, session_id: str) -> None:
        """Dedicated placement: this host's session left memory, the host is free for another."""
        with contextlib.suppress(Exception):
            self.router.supervisor.release.remote(self.name, session_id)
