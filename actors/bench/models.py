"""The models ``troupe bench actors`` runs, apart from the bench: what a restarted host imports to load them.

A host loads an agent by unpickling it, which imports the modules its models and tools live in
(by reference). In ``actors.bench.nested`` with the bench, these drew the client side along (the
runtime, the live views: ~35 ms on a 2-vCPU VM), on every recovery's path; here, only what a
model needs. An application's agents pay the same: keep the modules that define tools and models
free of what only the driver needs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from orchestrator.core.stream import AgentStreamPart, StepFinish, TextDelta
from orchestrator.models.base import CancelSignal, ModelRequest

__all__ = ["Burst", "Drip"]


class Burst:
    """Streams ``parts`` text parts as fast as possible (yielding to the loop now and then)."""

    name = "burst"

    def __init__(self, parts: int) -> None:
        self.parts = parts

    async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        """``parts`` deltas of 4 characters, then the step's end."""
        delta = TextDelta("A000")
        for i in range(self.parts):
            yield delta
            if i % 256 == 255:
                await asyncio.sleep(0)
        yield StepFinish(None, "stop")


class Drip:
    """Streams a part every ``every`` seconds for ``seconds`` (a long generation to interrupt)."""

    name = "drip"

    def __init__(self, every: float = 0.005, seconds: float = 20.0) -> None:
        self.every = every
        self.seconds = seconds

    async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        """A delta every ``every`` seconds for ``seconds``, then the step's end."""
        for _ in range(int(self.seconds / self.every)):
            yield TextDelta("tick ")
            await asyncio.sleep(self.every)
        yield StepFinish(None, "stop")
