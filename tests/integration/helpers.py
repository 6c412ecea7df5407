"""Models, tools and a cross-process gate for tests that kill actors (pickled by value to the hosts)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import ray

from orchestrator.core.stream import AgentStreamPart, StepFinish, TextDelta, ToolCall
from orchestrator.models.base import CancelSignal, ModelRequest
from orchestrator.run.agent import Agent
from orchestrator.testing import ScriptedModel
from tools import Recovery, Tool, ToolContext, tool


class _Gate:
    """A barrier across processes: code arrives and waits; the test sees it arrive, then opens it."""

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


class CrashingModel:
    """Streams ``before``; on its first attempt it then crashes its process or waits at a gate."""

    def __init__(self, before: str, after: str, marker: str, *, mode: str, gate: Any = None) -> None:
        self.before, self.after = before, after
        self.marker = marker  # a file that records attempts (it survives the process)
        self.mode = mode  # "exit": os._exit in the step; "gate": wait for the test to kill the host
        self.gate = gate

    @property
    def name(self) -> str:
        return "crashing"

    async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        with open(self.marker, "a") as f:  # noqa: ASYNC230 - must be on disk before the crash
            f.write(f"{request.session_step_index}\n")
        first = count_lines(Path(self.marker)) == 1
        yield TextDelta(self.before)
        await asyncio.sleep(0.05)  # let the partial text be flushed and stored
        if first:
            if self.mode == "exit":
                os._exit(1)
            await self.gate.arrive.remote()
        yield TextDelta(self.after)
        yield StepFinish({"inputTokens": 1, "outputTokens": 1}, "stop")


def crashing_tool(name: str, marker: str, *, recovery: str, mode: str, gate: Any = None) -> Tool:
    """A tool that records every execution in ``marker`` and crashes (or blocks) on the first."""

    async def run(context: ToolContext) -> str:
        with open(marker, "a") as f:  # noqa: ASYNC230 - must be on disk before the crash
            f.write(f"{context.call_id} {context.attempt}\n")
        if count_lines(Path(marker)) == 1:
            if mode == "exit":
                await asyncio.sleep(0.05)
                os._exit(1)
            await gate.arrive.remote()
        return f"{name} done"

    run.__name__ = name
    run.__doc__ = f"The {name} tool."
    policy: Recovery = "report" if recovery == "report" else "rerun"
    return tool(name=name, recovery=policy)(run)


def delegating(pricer_model: Any = None) -> Agent:
    """shop -> researcher -> pricer: two levels of delegation."""

    @tool
    async def lookup_price(slug: str) -> str:
        """Look up a price."""
        return "4.99"

    pricer = Agent(
        "pricer",
        "Price things.",
        pricer_model
        or ScriptedModel(
            [[{"tool": "lookup_price", "input": {"slug": "mug"}}], [{"text": "Mugs cost 4.99.", "chunk": 4}]],
            per_turn=True,
        ),
        tools=[lookup_price],
    )
    researcher = Agent(
        "researcher",
        "Research.",
        ScriptedModel(
            [
                [
                    {"text": "Asking the pricer.", "chunk": 3},
                    {"tool": "delegate_to_pricer", "input": {"task": "price a mug"}},
                ],
                [{"text": "The mug is 4.99.", "chunk": 4}],
            ],
            per_turn=True,
        ),
        agents=[pricer],
    )
    return Agent(
        "shop",
        "Shop.",
        ScriptedModel(
            [
                [
                    {"text": "Let me check.", "chunk": 4},
                    {"tool": "delegate_to_researcher", "input": {"task": "compare mug prices"}},
                ],
                [{"text": "It is 4.99.", "chunk": 4}],
            ],
            per_turn=True,
        ),
        agents=[researcher],
    )


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


_ = ToolCall


def approving_tree() -> Agent:
    """shop -> researcher -> buyer, whose ``add_to_cart`` needs approval."""

    @tool(needs_approval=True)
    async def add_to_cart(slug: str) -> str:
        """Add an item to the cart."""
        return f"Added {slug}."

    buyer = Agent(
        "buyer",
        "Buy.",
        ScriptedModel([[{"tool": "add_to_cart", "input": {"slug": "mug"}}], [{"text": "Bought."}]], per_turn=True),
        tools=[add_to_cart],
    )
    researcher = Agent(
        "researcher",
        "Research.",
        ScriptedModel(
            [[{"tool": "delegate_to_buyer", "input": {"task": "buy a mug"}}], [{"text": "Done."}]], per_turn=True
        ),
        agents=[buyer],
    )
    return Agent(
        "shop",
        "Shop.",
        ScriptedModel(
            [[{"tool": "delegate_to_researcher", "input": {"task": "get a mug"}}], [{"text": "Ok."}]], per_turn=True
        ),
        agents=[researcher],
    )


def approval_waiter() -> Agent:
    """Every turn asks to delete a file and waits on its approval, then answers "done"."""

    @tool(needs_approval=True)
    async def delete_file(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    steps: list[list[dict[str, Any]]] = [[{"tool": "delete_file", "input": {"path": "a"}}], [{"text": "done"}]]
    return Agent("waiter", "Wait.", ScriptedModel(steps, per_turn=True), tools=[delete_file])
