"""The model port: a request in, an async stream of stream parts out.

A ``ModelAdapter`` runs exactly one model step. It yields content parts (``TextDelta``,
``Reasoning``, ``ToolInputDelta``, ``ToolCall``) without message ids (the loop addresses them to
the turn's assistant message) and ends with one ``StepFinish`` carrying the usage and the finish
reason. It reports failure by raising ``ModelError`` (with a ``SessionError`` code when one
applies) and stops promptly when its ``CancelSignal`` fires.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from orchestrator.core._fast import fast_init
from orchestrator.core._json import JsonObject, JsonValue
from orchestrator.core.parts import AgentMessage
from orchestrator.core.stream import AgentStreamPart

__all__ = ["GUIDANCE_ID", "CancelSignal", "ModelAdapter", "ModelRequest", "ToolSpec"]

GUIDANCE_ID = "troupe:compact"
"""The id of a summary request's last message: the guidance (what to summarize, how)."""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What the model is told about a tool."""

    name: str
    """The tool's name (``delegate_to_<agent>`` for a sub-agent)."""
    description: str
    """What it does, for the model."""
    parameters: JsonObject = field(default_factory=lambda: {"type": "object", "properties": {}})
    """The JSON schema of its input."""


@fast_init
@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One model step's request.

    The position fields come from the log, so a step replayed after a crash carries the same
    values as the original (the scripted model relies on that).
    """

    messages: Sequence[AgentMessage]
    """The prompt: the conversation (compacted: a summary message replaces what it covers)."""
    tools: Sequence[ToolSpec] = ()
    """The tools the model may call in this step."""
    instructions: str | None = None
    """The system instructions."""
    settings: Mapping[str, JsonValue] = field(default_factory=dict)
    """Provider settings (``temperature``, ``max_tokens``, ...)."""
    session_id: str = ""
    """The session this step belongs to."""
    turn_index: int = 0
    """How many turns the session started before this one."""
    step_index: int = 0
    """How many model steps this turn has completed."""
    session_step_index: int = 0
    """How many model steps the whole session has completed."""
    purpose: str = "generate"
    """``generate`` for a turn's step, ``compact`` for a summary request: the step's own
    instructions, tools and settings over the messages to summarize, then one user message
    (id ``GUIDANCE_ID``) asking for the summary. Answer it with text; never call a tool."""


class CancelSignal:
    """A one-way flag that says the work should stop (an ``AbortSignal``).

    Every step and tool call has one, and almost none is ever waited on: the future ``wait``
    needs is made on the first wait (an ``asyncio.Event`` made a 760-byte deque up front).
    """

    __slots__ = ("_cancelled", "_waiter", "reason")

    def __init__(self) -> None:
        self._cancelled = False
        self._waiter: asyncio.Future[None] | None = None
        self.reason: str | None = None

    @property
    def cancelled(self) -> bool:
        """Whether cancellation was requested."""
        return self._cancelled

    def is_cancelled(self) -> bool:
        """``cancelled`` as a call (type checkers do not assume it stays unchanged)."""
        return self._cancelled

    def cancel(self, reason: str = "cancelled") -> None:
        """Request cancellation (idempotent; the first reason is kept)."""
        if not self._cancelled:
            self._cancelled = True
            self.reason = reason
            waiter = self._waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    async def wait(self) -> None:
        """Return once cancellation is requested."""
        if self._cancelled:
            return
        waiter = self._waiter
        if waiter is None:
            waiter = self._waiter = asyncio.get_running_loop().create_future()
        await asyncio.shield(waiter)  # one waiter cancelled leaves the others waiting


@runtime_checkable
class ModelAdapter(Protocol):
    """A model: streams one step's parts for a request."""

    @property
    def name(self) -> str:
        """A stable name for the model (usage calibration is kept per name)."""
        ...

    def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        """The parts of one model step; raises ``ModelError`` on failure."""
        ...
