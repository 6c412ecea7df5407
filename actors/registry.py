"""Agent definitions, shared by every host through the store.

On Ray an ``Agent`` holds code (tools, models, resolvers), so it travels as a pickled blob: a
client registers it once under ``<name>@<content hash>``; hosts load it by that key and cache
it, and a restarted host finds every agent it needs in the store, with no client around. The
pickler is the runtime's (``AgentCodec``): the Ray runtime's is Ray's own cloudpickle, so what
``ray.cloudpickle.register_pickle_by_value`` says holds for agents too. The in-process runtime
has none: its host runs the very agents its client was given (``put``), nothing is pickled.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Protocol

from orchestrator.core.errors import UsageError
from orchestrator.run.agent import Agent
from orchestrator.store.base import EventStore

__all__ = ["AgentCodec", "AgentRegistry", "agent_blob"]

_SESSION = "troupe:agents"


class AgentCodec(Protocol):
    """How agents become bytes and back (the Ray runtime's: cloudpickle)."""

    def dumps(self, agent: Agent) -> bytes:
        """The agent's bytes."""
        ...

    def loads(self, data: bytes) -> Agent:
        """The agent ``dumps`` gave these bytes for."""
        ...


def agent_blob(agent: Agent, codec: AgentCodec) -> tuple[str, bytes]:
    """The registry key of ``agent`` and its bytes."""
    try:
        data = codec.dumps(agent)
    except Exception as error:
        raise UsageError(
            f"agent {agent.name!r} cannot be sent to Ray actors ({error}); define its tools, models and "
            "resolvers as importable functions or picklable objects"
        ) from None
    return f"{agent.name}@{hashlib.sha256(data).hexdigest()[:16]}", data


class AgentRegistry:
    """Agents by key, loaded from the store on first use and cached (``codec`` ``None``: in process only)."""

    def __init__(self, store: EventStore, codec: AgentCodec | None) -> None:
        self.store = store
        self.codec = codec
        self._cache: dict[str, Agent] = {}
        self._loading: dict[str, asyncio.Task[Agent]] = {}
        """Loads from the store in flight: the activations that ask meanwhile share one (and one ``Agent``)."""

    async def register(self, key: str, data: bytes) -> None:
        """Store an agent's bytes under ``key`` (idempotent)."""
        if key in self._cache:
            return
        codec = self._need_codec(key)
        await self.store.save_snapshot(_SESSION, key, 0, data)
        self._cache[key] = codec.loads(data)

    def put(self, key: str, agent: Agent) -> None:
        """Cache an agent this process already has."""
        self._cache[key] = agent

    def has(self, key: str) -> bool:
        """Whether ``key`` is cached here (no store read)."""
        return key in self._cache

    async def get(self, key: str) -> Agent:
        """The agent registered under ``key``.

        A host that has not loaded it yet often gets many sessions of it at once (a new version
        rolled out, a restart): they share one load, and so one ``Agent`` and its model and tools,
        not one unpickled copy per session.
        """
        agent = self._cache.get(key)
        if agent is not None:
            return agent
        loading = self._loading.get(key)
        if loading is None:
            loading = self._loading[key] = asyncio.ensure_future(self._load(key))
            loading.add_done_callback(lambda _: self._loading.pop(key, None))
        return await asyncio.shield(loading)  # a caller that gives up does not stop the others' load

    async def _load(self, key: str) -> Agent:
        snapshot = None if self.codec is None else await self.store.load_snapshot(_SESSION, key)
        if snapshot is None:
            raise UsageError(f"no agent is registered as {key!r}; open the session with rt.session(id, agent=...)")
        return self._cache.setdefault(key, self._need_codec(key).loads(snapshot.data))

    def _need_codec(self, key: str) -> AgentCodec:
        if self.codec is None:
            raise UsageError(f"agent {key!r} arrived as bytes, but this host keeps agents in process only")
        return self.codec
