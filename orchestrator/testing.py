"""Fakes for tests and demos, shipped with the library (inject them; do not patch).

- ``ScriptedModel``: plays a script of steps (see ``orchestrator.models.scripted``).
- ``FunctionModel``: a model whose step is computed by a function of the request, in the
  scripted item format (or as stream parts), for tests that need to look at the prompt.
- ``MemoryStore``: the in-memory event store.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from orchestrator.models.base import CancelSignal, ModelRequest
from orchestrator.models.scripted import ScriptedModel
from orchestrator.store.memory import MemoryStore
from orchestrator.stream import AgentStreamPart, StepFinish

__all__ = ["FunctionModel", "MemoryStore", "ScriptedModel"]

StepFunction = Callable[[ModelRequest], Sequence[Mapping[str, Any] | AgentStreamPart]]


class FunctionModel:
    """A model that answers each request with ``fn(request)``.

    ``fn`` returns one step: scripted items (``{"text": ...}``, ``{"tool": ...}``, ...) or stream
    parts. Every request is recorded in ``requests``.
    """

    def __init__(self, fn: StepFunction, *, name: str = "function") -> None:
        self.fn = fn
        self._name = name
        self.requests: list[ModelRequest] = []

    @property
    def name(self) -> str:
        """The model's name."""
        return self._name

    async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        """The step ``fn`` computes for ``request``."""
        self.requests.append(request)
        step = list(self.fn(request))
        if step and all(isinstance(item, Mapping) for item in step):
            # Reuse the scripted model's item semantics for a one-step script.
            scripted = ScriptedModel([step], per_turn=True, name=self._name)  # type: ignore[list-item]
            single = ModelRequest(
                request.messages,
                request.tools,
                request.instructions,
                request.settings,
                request.session_id,
                request.turn_index,
                0,
                0,
                request.purpose,
            )
            async for part in scripted.stream(single, signal):
                yield part
            return
        finished = False
        for item in step:
            if signal.is_cancelled():
                return
            assert not isinstance(item, Mapping)
            finished = finished or isinstance(item, StepFinish)
            yield item
            await asyncio.sleep(0)
        if not finished:
            yield StepFinish(None, "stop")
