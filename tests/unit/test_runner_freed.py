"""A session closed and freed while its model step is still running leaves nothing to wake (no ReferenceError)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from typing import Any

from orchestrator.core.commands import SendInput
from orchestrator.core.stream import AgentStreamPart, TextDelta
from orchestrator.models.base import CancelSignal, ModelRequest
from orchestrator.run.agent import Agent
from orchestrator.run.runner import SessionRunner
from orchestrator.store import open_store
from orchestrator.testing import Gate

TIMEOUT = 10


class SlowModel:
    """Streams one delta, then waits at ``gate`` ignoring cancellation until it opens (a model slow to stop)."""

    def __init__(self, started: Gate, gate: asyncio.Event) -> None:
        self.started = started
        self.gate = gate

    @property
    def name(self) -> str:
        return "slow"

    async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        yield TextDelta("thinking")
        await self.started.wait()
        while not self.gate.is_set():
            try:
                await self.gate.wait()
            except asyncio.CancelledError:  # slow to stop: finishes only once the gate opens
                continue


async def test_a_step_that_ends_after_its_session_was_freed_wakes_nothing() -> None:
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: errors.append(context))
    try:
        started, gate = Gate(), asyncio.Event()
        store = open_store("memory://")
        runner = await SessionRunner.open(store, "s-1", Agent("slow", "Think.", SlowModel(started, gate)))
        await runner.submit(SendInput("u-1", "hello"))
        await started.reached(TIMEOUT)
        closing = asyncio.ensure_future(runner.close())
        await asyncio.sleep(0)
        del runner
        gc.collect()
        started.open()
        gate.set()
        await asyncio.wait_for(closing, TIMEOUT)
        for _ in range(5):
            await asyncio.sleep(0)
        gc.collect()
    finally:
        loop.set_exception_handler(previous)
    assert not [e for e in errors if isinstance(e.get("exception"), ReferenceError)], errors
