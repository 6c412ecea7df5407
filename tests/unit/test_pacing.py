"""The stream-write budget a process's sessions share: more steps streaming, fewer writes each.

The steps' flush timers run on a fake clock that moves only when the test moves it, and the
models stream only the chunks the test feeds them, so every count here is exact: it follows from
the pacing rules, never from how fast the machine happens to be.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

import pytest

from actors.host_options import HostOptions
from orchestrator.core import event_types as ai
from orchestrator.core.aistate import AIState
from orchestrator.core.commands import SendInput, StopTurn
from orchestrator.core.payloads import Stream
from orchestrator.core.stream import AgentStreamPart, Reasoning, StepFinish, TextDelta, ToolCall
from orchestrator.models.base import CancelSignal, ModelRequest
from orchestrator.run.agent import Agent
from orchestrator.run.pacing import DEFAULT_BUDGET, FIRST_FLUSH, StreamPacer
from orchestrator.run.runner import SessionRunner
from orchestrator.run.step_stream import JOIN_TEXT, StepStream
from orchestrator.store import open_store
from orchestrator.testing import eventually
from tools import tool

TIMEOUT = 10
CHUNKS = [f"c{i:02d} " for i in range(20)]
GAP = 0.006
"""Fake seconds between two chunks: 20 chunks stream for about 120 ms. (Not a divisor of the
20 ms pace, so no timer is ever due at the very instant a chunk arrives.)"""


class FakeTimer:
    """A timer of ``FakeClock``."""

    def __init__(self, when: float, fn: Callable[[], None]) -> None:
        self.when = when
        self.fn = fn
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A ``Clock`` whose time moves only in ``advance``, which fires the timers due, in due order."""

    def __init__(self) -> None:
        self.time = 0.0
        self.timers: list[FakeTimer] = []

    def now(self) -> float:
        return self.time

    def call_later(self, delay: float, fn: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer(self.time + delay, fn)
        self.timers.append(timer)
        return timer

    def advance(self, seconds: float) -> int:
        """Move time on by ``seconds``, firing every timer due by then; how many fired."""
        end = self.time + seconds
        fired = 0
        while due := [t for t in self.timers if not t.cancelled and t.when <= end]:
            timer = min(due, key=lambda t: t.when)  # the first of equals: the first scheduled
            self.timers.remove(timer)
            self.time = timer.when
            timer.fn()
            fired += 1
        self.time = end
        self.timers = [t for t in self.timers if not t.cancelled]
        return fired


class FedModel:
    """Streams the chunks the test feeds it, one per ``feed``; ends the step after the last."""

    def __init__(self, chunks: list[str]) -> None:
        self.chunks = chunks
        self.started = False
        self.taken = 0
        """Chunks the runner has taken into its step's buffer."""
        self._fed = asyncio.Semaphore(0)

    @property
    def name(self) -> str:
        return "fed"

    def feed(self) -> None:
        self._fed.release()

    async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        self.started = True  # the step's stream exists (it entered the pacer) before this runs
        for chunk in self.chunks:
            await self._fed.acquire()
            yield TextDelta(chunk)
            self.taken += 1  # runs when the runner asks for the next part: it has put this one
        yield StepFinish(finish_reason="stop")


def text(state: AIState) -> str:
    return state.messages[-1].text if state.messages and state.messages[-1].role == "assistant" else ""


def taken(models: list[FedModel], count: int) -> bool:
    return all(m.taken == count for m in models)


def durable(runners: list[SessionRunner], so_far: str) -> bool:
    return all(text(r.state) == so_far for r in runners)


async def stream_writes(pacer: StreamPacer, clock: FakeClock, sessions: int) -> list[int]:
    """Run one turn in each of ``sessions`` sessions sharing ``pacer``; the stream writes of each.

    The sessions go in lockstep: each takes chunk ``i`` at fake time ``i * GAP``. When the clock
    fires the flush timers, the test waits until the flushes are durable (every session's text so
    far is in its state) before time moves on, as a real step would keep streaming meanwhile.
    """
    store = open_store("memory://")
    models = [FedModel(CHUNKS) for _ in range(sessions)]
    runners = [
        await SessionRunner.open(store, f"s-{i}", Agent("a", "x", model), pacer=pacer) for i, model in enumerate(models)
    ]
    try:
        for i, runner in enumerate(runners):
            await runner.submit(SendInput(f"u-{i}", "go"))  # input ids are unique across sessions
        await eventually(lambda: all(m.started for m in models), TIMEOUT, what="every step streams")
        assert pacer.streaming == sessions
        for i in range(len(CHUNKS)):
            for model in models:
                model.feed()
            await eventually(partial(taken, models, i + 1), TIMEOUT, what=f"chunk {i} taken")
            if i + 1 < len(CHUNKS) and clock.advance(GAP):
                await eventually(partial(durable, runners, "".join(CHUNKS[: i + 1])), TIMEOUT, what="flushed")
        outcomes = await asyncio.gather(*(r.wait_input(f"u-{i}", timeout=TIMEOUT) for i, r in enumerate(runners)))
        assert all(o.text == "".join(CHUNKS) for o in outcomes)  # nothing lost
        assert pacer.streaming == 0
        return [sum(e.type == ai.STREAM for e in await store.read(r.session_id)) for r in runners]
    finally:
        for runner in runners:
            await runner.close()


async def test_a_step_alone_writes_at_its_own_pace() -> None:
    clock = FakeClock()
    # The first text at once (the clock's first move); then every 20 ms (at 26, 50, 74 and 98 ms);
    # the rest at the end.
    assert await stream_writes(StreamPacer(budget=1000, clock=clock), clock, 1) == [6]


async def test_steps_streaming_together_share_the_budget() -> None:
    clock = FakeClock()
    # 2 streaming / 10 writes per s: every 200 ms, longer than the steps stream. So each writes
    # its first text (at once), then the rest at the end.
    assert await stream_writes(StreamPacer(budget=10, clock=clock), clock, 2) == [2, 2]


async def test_a_steps_first_text_is_written_at_once_and_the_next_at_the_pace() -> None:
    clock = FakeClock()
    store = open_store("memory://")
    model = FedModel(CHUNKS[:3])
    runner = await SessionRunner.open(store, "first", Agent("a", "x", model), pacer=StreamPacer(clock=clock))
    assert runner.flush_interval == FIRST_FLUSH == 0
    try:
        await runner.submit(SendInput("u-first", "go"))
        model.feed()
        await eventually(lambda: model.taken == 1, TIMEOUT, what="the first chunk taken")
        # No timer: the first text was queued with the chunk, and is written with no time passing.
        await runner.wait_for(lambda s: text(s) == CHUNKS[0], TIMEOUT)
        assert clock.advance(0) == 0
        model.feed()
        await eventually(lambda: model.taken == 2, TIMEOUT, what="the second chunk taken")
        assert clock.advance(0.019) == 0  # the next batch waits for the pace (flush_every, 20 ms)
        assert clock.advance(0.002) == 1
        await runner.wait_for(lambda s: text(s) == "".join(CHUNKS[:2]), TIMEOUT)
        model.feed()
        outcome = await runner.wait_input("u-first", timeout=TIMEOUT)
        assert outcome.text == "".join(CHUNKS[:3])
        assert sum(e.type == ai.STREAM for e in await store.read("first")) == 3
    finally:
        await runner.close()


class AfterATool(FedModel):
    """Calls ``noop`` in its first step; its second streams the chunks fed, as ``FedModel``."""

    def __init__(self, chunks: list[str]) -> None:
        super().__init__(chunks)
        self.steps = 0

    async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        self.steps += 1
        if self.steps == 1:
            yield ToolCall("call-noop", "noop", {})
            yield StepFinish(finish_reason="tool-calls")
            return
        async for part in super().stream(request, signal):
            yield part


async def test_a_later_steps_first_text_waits_for_the_pace() -> None:
    @tool
    async def noop() -> str:
        """Do nothing."""
        return "done"

    clock = FakeClock()
    store = open_store("memory://")
    model = AfterATool(CHUNKS[:2])
    runner = await SessionRunner.open(
        store, "later", Agent("a", "x", model, tools=[noop]), pacer=StreamPacer(clock=clock)
    )
    try:
        await runner.submit(SendInput("u-later", "go"))
        await eventually(lambda: model.started, TIMEOUT, what="the second step streams")
        model.feed()
        await eventually(lambda: model.taken == 1, TIMEOUT, what="the first chunk taken")
        # The user already sees the turn's tool call: this step's text keeps the pace from its
        # first batch (flush_every, 20 ms), where the turn's first step writes its first at once.
        assert clock.advance(0.019) == 0
        assert clock.advance(0.002) == 1
        await runner.wait_for(lambda s: text(s) == CHUNKS[0], TIMEOUT)
        model.feed()
        outcome = await runner.wait_input("u-later", timeout=TIMEOUT)
        assert outcome.text == "".join(CHUNKS[:2])
        assert sum(e.type == ai.STREAM for e in await store.read("later")) == 3  # the call, then two batches
    finally:
        await runner.close()


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


def test_by_default_ten_steps_stream_at_their_own_pace_and_fifty_every_tenth_of_a_second() -> None:
    pacer = StreamPacer()
    assert pacer.budget == DEFAULT_BUDGET
    for _ in range(10):
        pacer.enter()
    assert pacer.interval(0.02) == pytest.approx(0.02)
    for _ in range(40):
        pacer.enter()
    assert pacer.interval(0.02) == pytest.approx(0.1)
    assert HostOptions(store="sqlite://", namespace="n").flush_budget == DEFAULT_BUDGET


class StoppableModel:
    """Streams one chunk, then waits until stopped and ends its stream quietly, as an HTTP client
    closing it may."""

    def __init__(self) -> None:
        self.taken = False

    @property
    def name(self) -> str:
        return "stoppable"

    async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        yield TextDelta("c0 ")
        self.taken = True
        try:
            await asyncio.Event().wait()  # streams on (nothing more) until stopped
        except asyncio.CancelledError:
            return  # the stop's cancellation ends the stream instead of propagating


async def test_a_stopped_step_gives_its_share_of_the_budget_back() -> None:
    clock = FakeClock()
    pacer = StreamPacer(budget=1000, clock=clock)
    store = open_store("memory://")
    model = StoppableModel()
    runner = await SessionRunner.open(store, "stop", Agent("a", "x", model), pacer=pacer)
    try:
        await runner.submit(SendInput("u-stop", "go"))
        await eventually(lambda: model.taken, TIMEOUT, what="the first chunk taken")
        await runner.wait_for(lambda s: text(s) == "c0 ", TIMEOUT)  # the first text: queued with its chunk
        assert pacer.streaming == 1
        await runner.submit(StopTurn("stop-1", runner.state.active.id if runner.state.active else ""))
        outcome = await runner.wait_input("u-stop", timeout=TIMEOUT)
        assert outcome.outcome == "stopped"
        await eventually(lambda: pacer.streaming == 0, TIMEOUT, what="the budget given back")
        assert not [t for t in clock.timers if not t.cancelled]  # and no flush timer left behind
    finally:
        await runner.close()


class PartsModel:
    """Streams the parts it was given, all at once (the fake clock holds every flush until the end)."""

    def __init__(self, parts: list[AgentStreamPart]) -> None:
        self.parts = parts
        self.streamed = asyncio.Event()

    @property
    def name(self) -> str:
        return "parts"

    async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        for part in self.parts:
            yield part
        self.streamed.set()
        await asyncio.sleep(3600)  # the step stays open: its buffer can be looked at
        yield StepFinish(finish_reason="stop")


def step_buffer(runner: SessionRunner) -> Any:
    """The running step's buffer (a local of its task's coroutine)."""
    step = runner._steps.current
    assert step is not None
    coro: Any = step.task.get_coro()
    while coro is not None:
        stream = coro.cr_frame.f_locals.get("stream") if coro.cr_frame is not None else None
        if isinstance(stream, StepStream):
            return stream
        coro = coro.cr_await
    raise AssertionError("the running step has no buffer")


async def test_a_step_keeps_the_text_it_buffers_as_a_few_joined_strings_and_writes_it_as_one_part() -> None:
    clock = FakeClock()  # never advanced: nothing is written before the step is stopped
    chunks = [f"t{i:03d}" for i in range(100)]
    parts: list[AgentStreamPart] = [TextDelta(c) for c in chunks[:90]]
    parts += [Reasoning("hm"), *(TextDelta(c) for c in chunks[90:])]
    store = open_store("memory://")
    model = PartsModel(parts)
    # A first flush on a timer too (the default, none, would write the first delta at once).
    pacer = StreamPacer(budget=1000, clock=clock)
    runner = await SessionRunner.open(store, "s", Agent("a", "x", model), pacer=pacer, flush_interval=0.001)
    try:
        await runner.submit(SendInput("u", "go"))
        await asyncio.wait_for(model.streamed.wait(), TIMEOUT)
        buffer = step_buffer(runner)
        assert buffer.count == 101  # each delta counts towards flush_parts
        # Not 90 parts of 4 characters (over 100 bytes each): the first run is one part already,
        # and the run still open is at most JOIN_TEXT strings.
        assert [type(p) for p in buffer.parts] == [TextDelta, Reasoning]
        assert buffer.parts[0].delta == "".join(chunks[:90])
        assert buffer.text is not None and len(buffer.text) <= JOIN_TEXT
        assert "".join(buffer.text) == "".join(chunks[90:])
        clock.advance(1.0)  # the flush timer fires: the buffer is written
        await eventually(lambda: text(runner.state) == "".join(chunks), TIMEOUT, what="the buffer written")
        written = [e.data.parts for e in await store.read("s") if isinstance(e.data, Stream)]
        assert written == [(TextDelta("".join(chunks[:90])), Reasoning("hm"), TextDelta("".join(chunks[90:])))]
        await runner.submit(StopTurn("stop-1"))
    finally:
        await runner.close()
