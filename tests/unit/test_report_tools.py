"""A ``report`` tool cut short, for any reason, runs once and tells the model it may have partly run.

Seed (conversations.md, Delivery): "When a crash, a timeout, Stop, or Pause now may have cut a
call short, A2 does not run it again, even on resume; the model gets an error result saying the
call was interrupted and may have partly run." Each test holds the call mid-run, cuts it short,
and checks that it ran once and that the next model request carries the interrupted result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from actors.local import LocalRuntime
from orchestrator.core.aistate import AIState
from orchestrator.core.fold import INTERRUPTED
from orchestrator.core.parts import AgentMessage, ToolPart
from orchestrator.models.base import ModelRequest
from orchestrator.run.agent import Agent
from orchestrator.testing import FunctionModel, Gate, eventually
from tools import Tool, tool

TIMEOUT = 10


def charges(messages: Sequence[AgentMessage]) -> Iterator[ToolPart]:
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolPart) and part.name == "charge":
                yield part


def answer(request: ModelRequest) -> list[dict[str, Any]]:
    """Charge once; once the prompt shows the call's result, say what happened."""
    if any(True for _ in charges(request.messages)):
        return [{"text": "It may have been charged."}]
    return [{"tool": "charge", "input": {}}]


def charge_tool(gate: Gate, calls: list[str], *, timeout: float | None = None) -> Tool:
    @tool(recovery="report", timeout=timeout)
    async def charge() -> str:
        """Charge the card (no idempotency key: it must not run twice)."""
        calls.append("charge")
        await gate.wait()
        return "charged"

    return charge


def agent(model: FunctionModel, gate: Gate, calls: list[str], **options: Any) -> Agent:
    return Agent("a", "x", model, tools=[charge_tool(gate, calls, **options)])


def assert_interrupted_once(model: FunctionModel, calls: list[str]) -> None:
    assert calls == ["charge"]
    (part,) = charges(model.requests[-1].messages)
    assert part.state == "error" and part.error is not None and INTERRUPTED in part.error


async def settled(session: Any, turns: int) -> AIState:
    async def done() -> AIState | None:
        state = (await session.state()).state
        return state if state.turns == turns and state.active is None else None

    found: AIState | None = await eventually(done, TIMEOUT, what=f"turn {turns} ended")
    assert found is not None
    return found


async def test_stop_then_retry_keeps_the_interrupted_result(rt: LocalRuntime) -> None:
    gate, calls, model = Gate(), list[str](), FunctionModel(answer)
    session = rt.session("s-1", agent=agent(model, gate, calls))
    turn = await session.prompt("pay")
    await gate.reached()
    await session.stop()
    assert (await asyncio.wait_for(turn.finished, TIMEOUT)).outcome == "stopped"
    (part,) = charges((await session.state()).state.messages)
    assert (part.state, part.error) == ("error", INTERRUPTED)  # not "Cancelled by the user."
    gate.open()
    assert (await session.retry()).outcome == "applied"
    state = await settled(session, 2)
    assert state.messages[-1].text == "It may have been charged."
    assert len(model.requests) == 2
    assert_interrupted_once(model, calls)


async def test_pause_now_then_resume_keeps_the_interrupted_result(rt: LocalRuntime) -> None:
    gate, calls, model = Gate(), list[str](), FunctionModel(answer)
    session = rt.session("s-1", agent=agent(model, gate, calls))
    turn = await session.prompt("pay")
    await gate.reached()
    await session.pause("now")

    async def paused() -> bool:
        active = (await session.state()).state.active
        return active is not None and active.phase == "paused"

    held: bool = await eventually(paused, TIMEOUT, what="the turn paused")
    assert held
    gate.open()
    await session.resume()
    assert (await asyncio.wait_for(turn.finished, TIMEOUT)).outcome == "completed"
    assert_interrupted_once(model, calls)
    await session.retry()
    await settled(session, 2)
    assert_interrupted_once(model, calls)


async def test_a_crash_then_retry_keeps_the_interrupted_result(tmp_path: Path) -> None:
    gate, calls, model = Gate(), list[str](), FunctionModel(answer)
    url = f"sqlite:///{tmp_path / 'troupe.db'}"
    first = LocalRuntime(url)
    await first.start()
    await first.session("s-1", agent=agent(model, gate, calls)).prompt("pay")
    await gate.reached()
    await first.close()  # the process dies mid-call: nothing more is written
    gate.open()
    second = LocalRuntime(url)
    await second.start()
    try:
        session = second.session("s-1", agent=agent(model, gate, calls))
        await settled(session, 1)
        assert_interrupted_once(model, calls)
        await session.retry()
        await settled(session, 2)
        assert_interrupted_once(model, calls)
    finally:
        await second.close()


async def test_a_timeout_then_retry_keeps_the_interrupted_result(rt: LocalRuntime) -> None:
    gate, calls, model = Gate(), list[str](), FunctionModel(answer)
    session = rt.session("s-1", agent=agent(model, gate, calls, timeout=0.05))
    turn = await session.prompt("pay")  # the gate never opens: the call times out
    assert (await asyncio.wait_for(turn.finished, TIMEOUT)).outcome == "completed"
    assert_interrupted_once(model, calls)
    (part,) = charges(model.requests[-1].messages)
    assert part.error is not None and part.error.startswith("charge timed out after 0.05 s.")
    await session.retry()
    await settled(session, 2)
    assert_interrupted_once(model, calls)
