"""Models, tools and a cross-process gate for tests that kill actors (pickled by value to the hosts).

A crash must come after what the test means to recover is durable (the partial text of a step,
the start of a tool call), never "a little while" after it: so the crashing model and tool read
the session's log from the store and crash only once it holds that.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import ray

from orchestrator.core import event_types as ai
from orchestrator.core.events import Event
from orchestrator.core.fold import fold_events
from orchestrator.core.stream import AgentStreamPart, StepFinish, TextDelta
from orchestrator.models.base import CancelSignal, ModelRequest
from orchestrator.store import open_store
from orchestrator.testing import eventually
from tools import Recovery, Tool, ToolContext, tool

TIMEOUT = 60
"""Seconds a crashing model or tool waits for the store to hold what it must before it crashes."""


class _Gate:
    """A barrier across processes: code arrives and waits; the test sees it arrive, then opens it.

    (``orchestrator.testing.Gate`` is the same within one event loop; this one is a Ray actor,
    for code that runs in a host process.)
    """

    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self.opened = asyncio.Event()
        self.arrivals = 0

    async def arrive(self) -> int:
        self.arrivals += 1
        self.reached.set()
        await self.opened.wait()
        return self.arrivals

    async def wait_reached(self) -> int:
        await self.reached.wait()
        return self.arrivals

    async def open(self) -> None:
        self.opened.set()

    async def count(self) -> int:
        return self.arrivals


Gate: Any = ray.remote(num_cpus=0)(_Gate)


def count_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


async def until_stored(store_url: str, session_id: str, holds: Callable[[list[Event]], bool], what: str) -> None:
    """Wait until ``holds(log)`` for the session's log in the store (read with a connection of our own)."""
    store = open_store(store_url)
    try:

        async def check() -> bool:
            return holds(await store.read(session_id))

        await eventually(check, TIMEOUT, interval=0.01, what=what)
    finally:
        await store.close()


class CrashingModel:
    """Streams ``before``; on its first attempt, once the store holds it, crashes its process or waits at a gate."""

    def __init__(self, before: str, after: str, marker: str, *, mode: str, store_url: str, gate: Any = None) -> None:
        self.before, self.after = before, after
        self.marker = marker  # a file that records attempts (it survives the process)
        self.mode = mode  # "exit": os._exit in the step; "gate": wait for the test to kill the host
        self.store_url = store_url
        self.gate = gate

    @property
    def name(self) -> str:
        return "crashing"

    async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        with open(self.marker, "a") as f:  # noqa: ASYNC230 - must be on disk before the crash
            f.write(f"{request.session_step_index}\n")
        first = count_lines(Path(self.marker)) == 1
        yield TextDelta(self.before)
        if first:
            # The crash must cut a step whose partial text is in the log (what recovery rolls back).
            def partial(log: list[Event]) -> bool:
                messages = fold_events(log).messages
                return bool(messages) and messages[-1].role == "assistant" and self.before in messages[-1].text

            await until_stored(self.store_url, request.session_id, partial, f"the partial text {self.before!r}")
            if self.mode == "exit":
                os._exit(1)
            await self.gate.arrive.remote()
        yield TextDelta(self.after)
        yield StepFinish({"inputTokens": 1, "outputTokens": 1}, "stop")


def crashing_tool(name: str, marker: str, *, recovery: str, mode: str, store_url: str, gate: Any = None) -> Tool:
    """A tool that records every run in ``marker``; the first, once its start is stored, crashes (or blocks)."""

    async def run(context: ToolContext) -> str:
        with open(marker, "a") as f:  # noqa: ASYNC230 - must be on disk before the crash
            f.write(f"{context.call_id} {context.attempt}\n")
        if count_lines(Path(marker)) == 1:
            # Recovery tells a started call from a scheduled one by its ai.tool.started event.
            def started(log: list[Event]) -> bool:
                return any(e.type == ai.TOOL_STARTED and e.payload.get("callId") == context.call_id for e in log)

            await until_stored(store_url, context.session_id, started, f"the start of {name}")
            if mode == "exit":
                os._exit(1)
            await gate.arrive.remote()
        return f"{name} done"

    run.__name__ = name
    run.__doc__ = f"The {name} tool."
    policy: Recovery = "report" if recovery == "report" else "rerun"
    return tool(name=name, recovery=policy)(run)


def gated_model(gate: Any, text: str = "done") -> Any:
    """A model whose first step streams "waiting ", then waits at ``gate`` (for pause tests)."""

    class GatedModel:
        name = "gated"

        async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
            if request.session_step_index == 0 and request.step_index == 0:
                yield TextDelta("waiting ")
                await gate.arrive.remote()
            yield TextDelta(text)
            yield StepFinish(None, "stop")

    return GatedModel()
