"""Turn-scoped commands on Ray: a late stop is stale, a repeated stop or steer returns its first receipt."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from actors.client import Session
from actors.runtime import Runtime
from orchestrator.core.aistate import AIState
from orchestrator.testing import eventually

from .helpers import approval_waiter

TIMEOUT = 60


async def awaiting(session: Session, turn_id: str) -> AIState:
    """Wait until ``turn_id`` is active and waits on its approval."""
    seen: list[AIState] = []

    async def check() -> bool:
        state: AIState = (await session.state()).state
        seen.append(state)
        active = state.active
        pending = any(i.status == "pending" for i in state.interactions.values())
        return active is not None and active.id == turn_id and pending

    typed: Callable[[], bool | Awaitable[bool]] = check  # (mypy infers eventually's T from this)
    await eventually(typed, TIMEOUT, what=f"{turn_id} awaiting approval")
    return seen[-1]


async def test_a_late_stop_is_stale_and_the_next_turn_runs_on(runtime: Runtime) -> None:
    session = runtime.session("s-late", agent=approval_waiter())
    first = await session.prompt("delete a")
    await awaiting(session, "t1")
    second = await session.prompt("delete b")
    assert (await first.stop()).receipt is not None
    await awaiting(session, "t2")

    late = await first.stop()
    assert late.receipt is not None and late.receipt.reason == "stale-turn"
    state = (await session.state()).state
    assert state.active is not None and state.active.id == "t2"
    assert (await second.stop()).receipt is not None
    assert (await asyncio.wait_for(second.finished, TIMEOUT)).outcome == "stopped"


async def test_a_repeated_stop_and_steer_return_their_first_receipts(runtime: Runtime) -> None:
    session = runtime.session("s-again", agent=approval_waiter())
    await session.prompt("delete a")
    await awaiting(session, "t1")
    steered = await session.steer("no, b", id="s-1")
    await awaiting(session, "t2")  # the steering's turn
    assert await session.steer("no, b", id="s-1") == steered

    await session.prompt("delete c")
    stopped = await session.stop(id="x-1")
    assert stopped.receipt is not None and stopped.receipt.outcome == "applied"
    await awaiting(session, "t3")
    assert await session.stop(id="x-1") == stopped
    state = (await session.state()).state
    assert state.active is not None and state.active.id == "t3"
