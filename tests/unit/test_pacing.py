"""The stream-write budget a process's sessions share: more steps streaming, fewer writes each."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from orchestrator.core import event_types as ai
from orchestrator.core.commands import SendInput, StopTurn
from orchestrator.core.stream import AgentStreamPart, StepFinish, TextDelta
from orchestrator.models.base import CancelSignal, ModelRequest
from orchestrator.run.agent import Agent
from orchestrator.run.pacing import StreamPacer
from orchestrator.run.runner import SessionRunner
from orchestrator.store import open_store

TIMEOUT = 10


class SlowModel:
    """20 chunks, 5 ms apart: a step that streams for about 100 ms."""

    @property
    def name(self) -> str:
        return "slow"

    async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        for i in range(20):
            yield TextDelta(f"c{i:02d} ")
            await asyncio.sleep(0.005)
        yield StepFinish(finish_reason="stop")


async def stream_writes(pacer: StreamPacer, sessions: int) -> list[int]:
    """Run one turn in each of ``sessions`` sessions sharing ``pacer``; the stream writes of each."""
    store = open_store("memory://")
    agent = Agent("a", "x", SlowModel())
    runners = [await SessionRunner.open(store, f"s-{i}", agent, pacer=pacer) for i in range(sessions)]
    try:
        for i, runner in enumerate(runners):
            await runner.submit(SendInput(f"u-{i}", "go"))  # input ids are unique across sessions
        outcomes = await asyncio.gather(*(r.wait_input(f"u-{i}", timeout=TIMEOUT) for i, r in enumerate(runners)))
        assert all(o.text == "".join(f"c{i:02d} " for i in range(20)) for o in outcomes)  # nothing lost
        assert pacer.streaming == 0
        return [sum(e.type == ai.STREAM for e in await store.read(r.session_id)) for r in runners]
    finally:
        for runner in runners:
            await runner.close()


async def test_a_step_alone_writes_at_its_own_pace_and_many_share_the_budget() -> None:
    alone = await stream_writes(StreamPacer(budget=1000), 1)
    assert alone[0] >= 4  # about every 20 ms over ~100 ms
    shared = await stream_writes(StreamPacer(budget=10), 2)  # 2 streaming / 10 per s: every 200 ms
    assert all(writes <= 2 for writes in shared), shared  # the first text, then the rest at the end


def test_the_interval_follows_the_streams_and_never_drops_below_the_floor() -> None:
    pacer = StreamPacer(budget=100)
    assert pacer.interval(0.02) == 0.02
    for _ in range(10):
        pacer.enter()
    assert pacer.interval(0.02) == pytest.approx(0.1)
    pacer.leave()
    assert pacer.interval(0.5) == 0.5
    with pytest.raises(ValueError, match="positive"):
        StreamPacer(budget=0)


class StoppableModel(SlowModel):
    """Streams until stopped, then ends its stream quietly, as an HTTP client closing it may."""

    async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        for i in range(400):
            yield TextDelta(f"c{i} ")
            try:
                await asyncio.sleep(0.005)
            except asyncio.CancelledError:
                return  # the stop's cancellation ends the stream instead of propagating


async def test_a_stopped_step_gives_its_share_of_the_budget_back() -> None:
    pacer = StreamPacer(budget=1000)
    store = open_store("memory://")
    runner = await SessionRunner.open(store, "stop", Agent("a", "x", StoppableModel()), pacer=pacer)
    try:
        await runner.submit(SendInput("u-stop", "go"))
        await runner.wait_for(lambda s: bool(s.messages) and bool(s.messages[-1].text), TIMEOUT)
        assert pacer.streaming == 1
        await runner.submit(StopTurn("stop-1", runner.state.active.id if runner.state.active else ""))
        outcome = await runner.wait_input("u-stop", timeout=TIMEOUT)
        assert outcome.outcome == "stopped"
        for _ in range(100):
            if pacer.streaming == 0:
                break
            await asyncio.sleep(0.01)
        assert pacer.streaming == 0
    finally:
        await runner.close()
