"""A host's agent registry: agents arrive as bytes through the store and are loaded once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from actors.ray_cluster import RAY_PICKLE
from actors.registry import AgentRegistry, agent_blob
from orchestrator.core.errors import UsageError
from orchestrator.run.agent import Agent
from orchestrator.store import open_store
from orchestrator.testing import ScriptedModel


class CountingCodec:
    """The Ray runtime's codec, counting the agents it unpickles."""

    def __init__(self) -> None:
        self.loaded = 0

    def dumps(self, agent: Agent) -> bytes:
        return RAY_PICKLE.dumps(agent)

    def loads(self, data: bytes) -> Agent:
        self.loaded += 1
        return RAY_PICKLE.loads(data)


async def test_sessions_activated_at_once_on_a_host_that_has_not_loaded_their_agent_share_one_load(
    tmp_path: Path,
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'agents.db'}")  # a read that waits, as a host's does
    key, data = agent_blob(Agent("a", "x", ScriptedModel([[{"text": "hi"}]])), RAY_PICKLE)
    await AgentRegistry(store, RAY_PICKLE).register(key, data)  # registered through another host
    codec = CountingCodec()
    registry = AgentRegistry(store, codec)
    agents = await asyncio.gather(*(registry.get(key) for _ in range(50)))
    assert codec.loaded == 1  # before: one unpickled Agent (model, tools, script) per session
    assert all(agent is agents[0] for agent in agents) and agents[0].name == "a"
    assert await registry.get(key) is agents[0]
    await store.close()


async def test_a_caller_that_gives_up_does_not_stop_the_others_load(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'agents.db'}")
    key, data = agent_blob(Agent("a", "x", ScriptedModel([[{"text": "hi"}]])), RAY_PICKLE)
    await AgentRegistry(store, RAY_PICKLE).register(key, data)
    registry = AgentRegistry(store, CountingCodec())
    first = asyncio.ensure_future(registry.get(key))
    second = asyncio.ensure_future(registry.get(key))
    await asyncio.sleep(0)
    first.cancel()
    assert (await asyncio.wait_for(second, 5)).name == "a"
    assert first.cancelled()
    await store.close()


async def test_an_unknown_agent_fails_every_waiter_and_is_asked_for_again_next_time() -> None:
    store = open_store("memory://")
    registry = AgentRegistry(store, CountingCodec())
    results = await asyncio.gather(*(registry.get("ghost@0") for _ in range(3)), return_exceptions=True)
    assert all(isinstance(r, UsageError) and "no agent is registered as 'ghost@0'" in str(r) for r in results)
    key, data = agent_blob(Agent("ghost", "x", ScriptedModel([[{"text": "hi"}]])), RAY_PICKLE)
    await AgentRegistry(store, RAY_PICKLE).register(key, data)
    assert (await registry.get(key)).name == "ghost"
    with pytest.raises(UsageError, match=r"rt\.session"):
        await registry.get("ghost@0")
