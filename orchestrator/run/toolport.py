"""The tool port: what the run loop needs of a tool (``tools.Tool`` is the implementation).

The core never imports ``tools`` (the dependency runs the other way), so it speaks to tools
through this protocol and passes the call's context as keyword arguments.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from orchestrator.core._json import JsonValue
from orchestrator.models.base import CancelSignal, ToolSpec

__all__ = ["Emit", "ToolLike", "ToolSourceLike"]

Emit = Callable[[JsonValue], Awaitable[None]]
"""Shows preliminary output on a running call."""


@runtime_checkable
class ToolLike(Protocol):
    """A tool the run loop can describe, validate, gate and run."""

    @property
    def name(self) -> str:
        """The name the model calls it by."""
        ...

    @property
    def recovery(self) -> str:
        """``rerun`` or ``report``: what recovery does with a call a crash cut short."""
        ...

    @property
    def spec(self) -> ToolSpec:
        """What the model is told."""
        ...

    def approval_prompt(self, arguments: JsonValue) -> str | None:
        """The prompt to ask before running, or ``None`` when no approval is needed."""
        ...

    def validate(self, arguments: JsonValue) -> object:
        """Raise ``ToolError`` (a message for the model) when the arguments are invalid."""
        ...

    async def invoke(
        self,
        arguments: JsonValue,
        *,
        session_id: str,
        call_id: str,
        turn_id: str,
        attempt: int,
        signal: CancelSignal,
        app: Mapping[str, Any],
        emit: Emit,
    ) -> JsonValue:
        """Run the call; raise ``ToolError`` with the message the model should see."""
        ...


@runtime_checkable
class ToolSourceLike(Protocol):
    """A source of tools, listed again before every step and after every tool call."""

    async def list_tools(self, app: Mapping[str, Any]) -> Sequence[ToolLike]:
        """The tools available now."""
        ...
