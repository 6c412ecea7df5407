"""A model step starts while the write of its start is in flight; its parts are durable only after it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from orchestrator.core import event_types as ai
from orchestrator.core.commands import SendInput
from orchestrator.core.errors import StoreError
from orchestrator.core.events import Event
from orchestrator.core.stream import AgentStreamPart, StepFinish, TextDelta
from orchestrator.models.base import CancelSignal, ModelRequest
from orchestrator.run.agent import Agent
from orchestrator.run.runner import SessionRunner
from orchestrator.store import open_store
from orchestrator.store.base import AppendResult, EventStore
from orchestrator.testing import Gate, eventually

TIMEOUT = 10


class GatedStore:
    """A real in-memory store whose writes of a step's start wait at a gate for the test (or fail)."""

    def __init__(self) -> None:
        self.inner: EventStore = open_store("memory://")
        self.gate = Gate()
        self.fail = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def append(self, session_id: str, events: Sequence[Event], *args: Any, **kwargs: Any) -> AppendResult:
        if any(e.type == ai.STEP_STARTED for e in events):
            await self.gate.wait()
            if self.fail:
                raise StoreError("the disk is full")
        return await self.inner.append(session_id, events, *args, **kwargs)


class WatchedModel:
    """Streams two chunks; records when it started and whether it was cancelled."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = False
        self.requests: list[ModelRequest] = []

    @property
    def name(self) -> str:
        return "watched"

    async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        self.requests.append(request)
        self.started.set()
        try:
            yield TextDelta("Hel")
            yield TextDelta("lo.")
            yield StepFinish(finish_reason="stop")
        except asyncio.CancelledError:
            self.cancelled = True
            raise


async def open_runner(store: GatedStore, model: WatchedModel) -> SessionRunner:
    agent = Agent("a", "x", model)
    return await SessionRunner.open(store, "s", agent)


async def test_the_model_streams_while_its_start_is_written_and_its_parts_follow_it() -> None:
    store, model = GatedStore(), WatchedModel()
    runner = await open_runner(store, model)
    submitted = asyncio.ensure_future(runner.submit(SendInput("u-1", "hi")))
    await store.gate.reached(TIMEOUT)
    await asyncio.wait_for(model.started.wait(), TIMEOUT)  # before the write finished
    assert not submitted.done()
    assert model.requests[0].messages[0].text == "hi"  # it saw the input being written
    store.gate.open()
    await asyncio.wait_for(submitted, TIMEOUT)
    outcome = await runner.wait_input("u-1", timeout=TIMEOUT)
    assert (outcome.outcome, outcome.text) == ("completed", "Hello.")
    types = [e.type for e in await store.inner.read("s")]
    assert types.index(ai.STEP_STARTED) < types.index(ai.STREAM) < types.index(ai.STEP_FINISHED)
    await runner.close()


async def test_a_step_whose_start_could_not_be_written_is_cancelled_and_leaves_nothing() -> None:
    store, model = GatedStore(), WatchedModel()
    store.fail = True
    runner = await open_runner(store, model)
    submitted = asyncio.ensure_future(runner.submit(SendInput("u-1", "hi")))
    await asyncio.wait_for(model.started.wait(), TIMEOUT)
    store.gate.open()
    try:
        await asyncio.wait_for(submitted, TIMEOUT)
    except StoreError as error:
        assert "disk is full" in error.message
    else:
        raise AssertionError("the failed write was acknowledged")
    # A write queued now is processed after anything the abandoned step still had queued (its
    # parts, its end): once it is done, nothing more of that step can reach the log.
    await runner.push([])
    assert runner._steps.current is None
    assert await store.inner.read("s") == []  # neither the input nor any part of the step
    await runner.close()


async def test_an_abandoned_step_asks_its_session_to_plan_again_when_it_ends() -> None:
    # The failed write planned the step; with nothing of that plan in the log, the session plans
    # anew (a planning pass whose write failed is retried this way).
    store, model = GatedStore(), WatchedModel()
    store.fail = True
    runner = await open_runner(store, model)
    kicks: list[bool] = []
    kick = runner._kick

    def counted() -> None:
        kicks.append(True)
        kick()

    runner._kick = counted  # type: ignore[method-assign]
    submitted = asyncio.ensure_future(runner.submit(SendInput("u-1", "hi")))
    await asyncio.wait_for(model.started.wait(), TIMEOUT)
    assert not kicks
    store.gate.open()
    try:
        await asyncio.wait_for(submitted, TIMEOUT)
    except StoreError:
        pass
    await eventually(lambda: kicks, TIMEOUT)
    await runner.close()
