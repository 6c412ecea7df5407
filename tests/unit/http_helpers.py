"""Shared fixtures for the HTTP tests: a scenario model, tools, gates, a live server, SSE parsing.

Agents are pickled by the runtime's registry, so everything an agent holds lives at module level
here (pickled by reference: the gates a test opens are the ones its tools and models wait on).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel

from orchestrator.core.contract import Contract, Operation, Reducer
from orchestrator.core.errors import ModelError
from orchestrator.core.events import Event
from orchestrator.core.stream import (
    AgentStreamPart,
    DataUpdate,
    Reasoning,
    StepFinish,
    TextDelta,
    ToolCall,
    ToolInputDelta,
)
from orchestrator.models.base import CancelSignal, ModelRequest
from orchestrator.run.agent import Agent
from orchestrator.testing import Gate
from tools import tool

JS_DIR = Path(__file__).resolve().parents[1] / "js"

# -- gates: a test opens them; models wait on them -------------------------------------------------------

GATES: dict[str, Gate] = {}


def gate(name: str) -> Gate:
    """The gate called ``name`` (created closed on first use): a model waits at it, a test opens it."""
    return GATES.setdefault(name, Gate())


# -- tools ------------------------------------------------------------------------------------------------


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def boom() -> str:
    """Always fails."""
    raise RuntimeError("the warehouse is on fire")


@tool(needs_approval=True)
def buy(item: str) -> str:
    """Buy an item (asks first)."""
    return f"bought {item}"


# -- the scenario model: the user's first word picks a script ----------------------------------------------

Step = list[dict[str, Any]]

SCENARIOS: dict[str, list[Step]] = {
    "plain": [[{"reasoning": "Greet them."}, {"text": "Hello there, friend!", "chunk": 3}]],
    "tool": [
        [{"text": "Adding.", "chunk": 4}, {"tool": "add", "input": {"a": 1, "b": 2}, "stream": 5}],
        [{"text": "It is 3.", "chunk": 3}],
    ],
    "fail": [[{"tool": "boom", "input": {}}], [{"text": "That did not work.", "chunk": 5}]],
    "buy": [[{"text": "Buying.", "chunk": 3}, {"tool": "buy", "input": {"item": "mug"}}], [{"text": "Done."}]],
    "research": [
        [{"tool": "delegate_to_researcher", "input": {"task": "prices"}}],
        [{"text": "Mugs cost $5.", "chunk": 4}],
    ],
    "deep": [
        [{"tool": "delegate_to_researcher", "input": {"task": "deep"}}],
        [{"text": "Checked twice.", "chunk": 4}],
    ],
    "prices": [[{"reasoning": "Look it up."}, {"text": "A mug costs $5.", "chunk": 2}]],
    "check": [[{"text": "Yes, $5.", "chunk": 2}]],
    "error": [[{"text": "Let me", "chunk": 3}, {"error": "The model is over capacity", "code": "rate_limited"}]],
    "card": [[{"data": "card", "value": {"title": "Mug", "price": 5}}, {"text": "See the card."}]],
    "count": [[{"text": "One, two, three.", "chunk": 2}]],
}
# The researcher delegates a "deep" task one level further down.
RESEARCHER_SCENARIOS: dict[str, list[Step]] = {
    "prices": SCENARIOS["prices"],
    "deep": [[{"tool": "delegate_to_checker", "input": {"task": "check"}}], [{"text": "Deep: $5.", "chunk": 3}]],
}


def _gated(words: Sequence[str]) -> list[Step]:
    """``gate A B``: stream, wait at gate A mid-step, call a tool, then wait at gate B in the next step."""
    first, second = words[1], words[2]
    return [
        [
            {"text": "Part one, ", "chunk": 3},
            {"gate": first},
            {"text": "part two.", "chunk": 3},
            {"tool": "add", "input": {"a": 2, "b": 2}},
        ],
        [{"gate": second}, {"text": "All done: four.", "chunk": 3}],
    ]


class ScenarioModel:
    """Plays ``scenarios[<first word of the last user message>]``, step by step within a turn."""

    def __init__(self, scenarios: Mapping[str, list[Step]], name: str = "scenario") -> None:
        self.scenarios = dict(scenarios)
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def script(self, request: ModelRequest) -> list[Step]:
        users = [m for m in request.messages if m.role == "user"]
        words = (users[-1].text if users else "").split()
        if words and words[0] == "gate":
            return _gated(words)
        if words and words[0] == "relay":  # delegate a task that waits at a gate halfway
            return [
                [{"tool": "delegate_to_researcher", "input": {"task": f"slow {words[1]}"}}],
                [{"text": "Relayed.", "chunk": 3}],
            ]
        if words and words[0] == "slow":
            return [[{"text": "First, ", "chunk": 2}, {"gate": words[1]}, {"text": "then more.", "chunk": 3}]]
        key = words[0] if words else ""
        if key not in self.scenarios:
            raise ModelError(f"no scenario {key!r}")
        return self.scenarios[key]

    async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        steps = self.script(request)
        k = request.step_index
        if k >= len(steps):
            raise ModelError(f"the scenario has no step {k}")
        called = False
        for j, item in enumerate(steps[k]):
            if "text" in item:
                text, size = item["text"], int(item.get("chunk", len(item["text"])))
                for start in range(0, len(text), size):
                    yield TextDelta(text[start : start + size])
                    await asyncio.sleep(0)
            elif "reasoning" in item:
                yield Reasoning(item["reasoning"])
            elif "tool" in item:
                called = True
                call_id = f"{item['tool']}-{request.session_id.replace('/', '.')}-{request.turn_index}-{k}-{j}"
                arguments = json.dumps(item["input"])
                size = int(item.get("stream", 0))
                if size:
                    for start in range(0, len(arguments), size):
                        yield ToolInputDelta(call_id, arguments[start : start + size], item["tool"])
                        await asyncio.sleep(0)
                yield ToolCall(call_id, item["tool"], item["input"])
            elif "data" in item:
                yield DataUpdate(item["data"], item["value"])
            elif "gate" in item:
                await gate(item["gate"]).wait()
            elif "error" in item:
                raise ModelError(item["error"], item.get("code"))
        yield StepFinish({"inputTokens": 3, "outputTokens": 5}, "tool-calls" if called else "stop")


checker = Agent(
    name="checker", instructions="Check.", model=ScenarioModel(SCENARIOS, "checker"), description="Checks a fact."
)
researcher = Agent(
    name="researcher",
    instructions="Research.",
    model=ScenarioModel(RESEARCHER_SCENARIOS, "researcher"),
    agents=[checker],
    description="Looks things up.",
)


class NoteAdded(BaseModel):
    """An app event: a note was added."""

    text: str


class SecretSet(BaseModel):
    """An app event clients may never push (the authorize hook refuses it)."""

    value: str


def _fold_notes(state: Mapping[str, Any], event: Event) -> Mapping[str, Any]:
    if event.type == "note.added":
        return {**state, "notes": [*state.get("notes", []), event.payload["text"]]}
    return state


def _authorize(operation: Operation) -> bool:
    return all(e.type != "secret.set" for e in operation.events)


contract = Contract(
    name="notes",
    events={"note.added": NoteAdded, "secret.set": SecretSet},
    reducer=Reducer("notes.v1", {"notes": []}, _fold_notes),
    authorize=_authorize,
)

shopper = Agent(
    name="shopper",
    instructions="Help the user shop.",
    model=ScenarioModel(SCENARIOS),
    tools=[add, boom, buy],
    agents=[researcher],
    contract=contract,
)


# -- a live server on an ephemeral port --------------------------------------------------------------------


@dataclass
class LiveServer:
    """A uvicorn server in this event loop, on a socket bound before it starts (no wait to be ready)."""

    app: FastAPI
    url: str = ""
    _server: uvicorn.Server | None = None
    _task: asyncio.Task[None] | None = None
    _socket: socket.socket | None = field(default=None, repr=False)

    async def __aenter__(self) -> LiveServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)  # connections queue here until uvicorn accepts them
        self._socket = sock
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(
            self.app, log_level="warning", lifespan="off", http="h11", ws="none", timeout_graceful_shutdown=2
        )
        self._server = uvicorn.Server(config)
        self._task = asyncio.ensure_future(self._server.serve(sockets=[sock]))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None and self._task is not None and self._socket is not None
        self._server.should_exit = True
        await self._task
        self._socket.close()


# -- SSE ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SseEvent:
    """One server-sent event."""

    event: str | None
    id: str | None
    data: str

    def json(self) -> Any:
        return json.loads(self.data)


async def sse_events(response: httpx.Response) -> AsyncIterator[SseEvent | None]:
    """The events of a streaming response (``None`` for a comment, such as a heartbeat)."""
    event: str | None = None
    event_id: str | None = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield SseEvent(event, event_id, "\n".join(data))
            event, event_id, data = None, None, []
        elif line.startswith(":"):
            yield None
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                event = value
            elif name == "id":
                event_id = value
            elif name == "data":
                data.append(value)


def chunks_of(body: str) -> list[dict[str, Any]]:
    """The UI message chunks of a complete ``/api/chat`` response body (asserting the framing)."""
    events = [e for e in body.split("\n\n") if e.strip()]
    assert events[-1] == "data: [DONE]", events[-1]
    out = []
    for event in events[:-1]:
        if event.startswith(":"):
            continue
        assert event.startswith("data: "), event
        out.append(json.loads(event[len("data: ") :]))
    return out


# -- node and the ai package ---------------------------------------------------------------------------------


def ensure_node_modules() -> None:
    """Install ``tests/js`` (``npm ci``) when it is missing; fail loudly without node or npm."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("node and npm are required for the AI SDK tests (install Node 20+); they are not on PATH")
    if (JS_DIR / "node_modules" / "ai" / "package.json").exists():
        return
    done = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund"], cwd=JS_DIR, capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"npm ci failed in {JS_DIR}:\n{done.stdout}\n{done.stderr}")


async def run_node(*args: str, stdin: bytes | None = None, timeout: float = 20.0) -> Any:
    """Run ``node tests/js/read-stream.mjs *args`` and return the JSON it prints."""
    process = await asyncio.create_subprocess_exec(
        "node",
        str(JS_DIR / "read-stream.mjs"),
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=JS_DIR,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(stdin), timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise
    if process.returncode != 0:
        raise AssertionError(f"node failed ({process.returncode}):\n{err.decode()}\n{out.decode()}")
    return json.loads(out)


def user_message(message_id: str, text: str) -> dict[str, Any]:
    """A UIMessage from the user, as ``useChat`` sends it."""
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


def strip_ui(message: Mapping[str, Any]) -> dict[str, Any]:
    """A UIMessage as assembled by the client, without what only the client adds (step markers, providerMetadata)."""
    parts = []
    for part in message["parts"]:
        if part.get("type") == "step-start":
            continue
        clean = {k: v for k, v in part.items() if v is not None and k not in ("providerMetadata", "rawInput")}
        if "approval" in clean:
            clean["approval"] = {k: v for k, v in clean["approval"].items() if k in ("id", "approved", "reason")}
        parts.append(clean)
    out = {"id": message["id"], "role": message["role"], "parts": parts}
    if message.get("metadata") is not None:
        out["metadata"] = message["metadata"]
    return out
