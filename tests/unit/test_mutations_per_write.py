"""A session's subscribers get one diff per write: the mutations of a write carry its last index.

A write often holds several events (a step's last text, its finish and the next tool's start;
a turn's start and its first step's). Diffed event by event, each changed the turn, and the
turn and the info went out once for each. Diffed once, from the state before the write to the
state after it, a client ends at the same state; what it no longer sees are the states inside
one write, which no snapshot or resume can start from either.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from actors.local import LocalRuntime
from actors.mutation import Mutation
from orchestrator.core.aistate import AIState
from orchestrator.run.agent import Agent
from orchestrator.run.log import Applied
from orchestrator.testing import ScriptedModel
from tools import tool

TIMEOUT = 10


@tool
async def look(slug: str) -> str:
    """Look something up."""
    return "found"


async def test_a_write_is_one_diff_stamped_with_its_last_index() -> None:
    step: list[dict[str, Any]] = [{"text": "Let me look."}, {"tool": "look", "input": {"slug": "mug"}}]
    script = ScriptedModel([step, [{"text": "Done."}]])
    async with LocalRuntime() as rt:
        session = rt.session("s-1", agent=Agent("a", "Look.", script, tools=[look]))
        await session.state()  # active: its runner is there to listen to
        assert rt.host is not None
        runner = rt.host.hosted["s-1"].runner
        writes: list[tuple[int, int]] = []  # (first index, last index) of each write

        async def listen(applied: Sequence[Applied], state: AIState, index: int) -> None:
            writes.append((applied[0].event.index, index))

        runner.listeners.append(listen)
        live = await session.live()
        mutations: list[Mutation] = []
        live.listeners.append(mutations.extend)  # each batch whole, as a poll reply brings it
        result = await asyncio.wait_for((await session.prompt("find a mug")).finished, TIMEOUT)
        await live.wait_for(lambda v: v.index >= result.index, TIMEOUT)
        ends = {last for _, last in writes}
        assert any(first < last for first, last in writes)  # some writes hold several events
        assert {m.index for m in mutations} <= ends  # every mutation carries its write's last index
        for end in ends:
            kinds = [m.type for m in mutations if m.index == end]
            assert kinds.count("turn") <= 1 and kinds.count("info") <= 1, kinds
        assert live.view.state == (await session.state()).state.session  # the same end state
        await live.close()
