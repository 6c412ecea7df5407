"""2,000 idle sessions in pooled placement: bounded memory, and every one re-activates intact."""

from __future__ import annotations

import asyncio
import gc

import psutil
import pytest

from actors.runtime import Runtime
from actors.subagents import FINISHED_CHILD_LINGER
from orchestrator.core.parts import ToolPart
from orchestrator.run.agent import Agent
from orchestrator.testing import ScriptedModel, eventually
from tests.fixtures.agents import delegating

SESSIONS = 2000
TIMEOUT = 60


async def host_rss(rt: Runtime) -> int:
    total = 0
    for host in await rt.hosts():
        info = await host.ready.remote()
        total += psutil.Process(info["pid"]).memory_info().rss
    return total


async def run_all(rt: Runtime, agent: Agent, prefix: str, text: str) -> list[str]:
    gate = asyncio.Semaphore(100)

    async def one(i: int) -> str:
        async with gate:
            result = await (await rt.session(f"{prefix}-{i}", agent=agent).prompt(text)).finished
            assert result.success, result
            return result.text

    return await asyncio.gather(*(one(i) for i in range(SESSIONS)))


@pytest.mark.slow
async def test_two_thousand_idle_sessions_use_bounded_memory_and_reactivate(runtime: Runtime) -> None:
    agent = Agent("a", "x", ScriptedModel([[{"text": "first reply"}], [{"text": "second reply"}]]))
    await run_all(runtime, agent, "warm", "hello")
    await runtime.deactivate_idle()
    gc.collect()
    base = await host_rss(runtime)

    await run_all(runtime, agent, "idle", "hello")
    active = await host_rss(runtime)
    assert await runtime.deactivate_idle() >= SESSIONS
    after_first = await host_rss(runtime)
    per_active = (active - base) / SESSIONS
    print(
        f"\nhost memory: {per_active / 1024:.1f} KB per idle session while active, "
        f"{(after_first - base) / SESSIONS / 1024:.1f} KB after deactivation"
    )

    # Every one comes back with its whole state on its next command...
    texts = await run_all(runtime, agent, "idle", "again")
    assert set(texts) == {"second reply"}
    sample = runtime.session("idle-1234", agent=agent)
    assert [m.text for m in await sample.messages()] == ["hello", "first reply", "again", "second reply"]
    # ...and another 2,000 cycled through do not grow memory without bound.
    await runtime.deactivate_idle()
    await run_all(runtime, agent, "more", "hello")
    await runtime.deactivate_idle()
    after_second = await host_rss(runtime)
    growth = (after_second - after_first) / SESSIONS
    print(f"growth after another {SESSIONS} sessions came and went: {growth / 1024:.1f} KB per session")
    assert growth < 20 * 1024, f"memory grew {growth / 1024:.1f} KB per deactivated session"
    assert per_active < 200 * 1024, f"{per_active / 1024:.1f} KB per idle active session"


async def test_a_finished_sub_agent_leaves_memory_soon_and_its_parent_stays(runtime: Runtime) -> None:
    session = runtime.session("linger-1", agent=delegating())
    result = await (await session.prompt("two mugs")).finished
    assert result.success, result

    async def hosted() -> set[str]:
        ids: set[str] = set()
        for host in await runtime.hosts():
            ids |= set(await host.sessions.remote())
        return ids

    async def children_gone() -> bool:
        return not any(sid.startswith("linger-1/") for sid in await hosted())

    what = "the finished sub-agents left their hosts"
    await eventually(children_gone, FINISHED_CHILD_LINGER + TIMEOUT, interval=0.1, what=what)
    assert "linger-1" in await hosted()  # the parent keeps its idle timeout
    # Its nested runs stay in the parent's state, and the next turn delegates again.
    second = await (await session.prompt("two more")).finished
    assert second.success, second
    nested = [p for m in await session.messages() for p in m.parts if isinstance(p, ToolPart) and p.agent is not None]
    assert len(nested) == 2 and all(p.state == "done" for p in nested)
