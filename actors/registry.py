"""Agent definitions, shared by every host through the store.

An ``Agent`` holds code (tools, models, resolvers), so it travels as a cloudpickle blob. A
client registers it once under ``<name>@<content hash>``; hosts load it by that key and cache
it. A restarted host finds every agent it needs in the store, with no client around.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ray import cloudpickle

from orchestrator.core.errors import UsageError
from orchestrator.run.agent import Agent
from orchestrator.store.base import EventStore

__all__ = ["AgentRegistry", "agent_blob"]

_SESSION = "troupe:agents"
_dumps: Any = cloudpickle.dumps  # untyped in Ray


def agent_blob(agent: Agent) -> tuple[str, bytes]:
    """The registry key of ``agent`` and its bytes."""
    try:
        data: bytes = _dumps(agent)
    except Exception as error:
        raise UsageError(
            f"agent {agent.name!r} cannot be sent to Ray actors ({error}); define its tools, models and "
            "resolvers as importable functions or picklable objects"
        ) from None
    return f"{agent.name}@{hashlib.sha256(data).hexdigest()[:16]}", data


class AgentRegistry:
    """Agents by key, loaded from the store on first use and cached."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self._cache: dict[str, Agent] = {}

    async def register(self, key: str, data: bytes) -> None:
        """Store an agent's bytes under ``key`` (idempotent)."""
        if key in self._cache:
            return
        await self.store.save_snapshot(_SESSION, key, 0, data)
        self._cache[key] = cloudpickle.loads(data)

    def put(self, key: str, agent: Agent) -> None:
        """Cache an agent this process already has."""
        self._cache[key] = agent

    async def get(self, key: str) -> Agent:
        """The agent registered under ``key``."""
        agent = self._cache.get(key)
        if agent is not None:
            return agent
        snapshot = await self.store.load_snapshot(_SESSION, key)
        if snapshot is None:
            raise UsageError(f"no agent is registered as {key!r}; open the session with rt.session(id, agent=...)")
        loaded: Agent = cloudpickle.loads(snapshot.data)
        self._cache[key] = loaded
        return loaded
