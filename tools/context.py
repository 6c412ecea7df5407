"""``ToolContext``: what a running tool may know and do besides its arguments."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.core._json import JsonValue
from orchestrator.core.ids import tool_call_key
from orchestrator.models.base import CancelSignal

__all__ = ["ToolContext"]


async def _discard(output: JsonValue) -> None:
    return None


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Declared as a parameter (any name, annotated ``ToolContext``) to receive it.

    ``idempotency_key`` is stable across retries and recoveries of the same call and unique
    across the store: use it as the idempotency key of any external side effect (``call_id``
    alone repeats across sessions).
    """

    session_id: str
    """The session running the tool."""
    call_id: str
    """The tool call id (the model's: unique within the session only; see ``idempotency_key``)."""
    turn_id: str
    """The turn that asked for the call."""
    attempt: int = 1
    """1 on the first run; higher when a ``rerun`` tool runs again after a crash or pause."""
    signal: CancelSignal = field(default_factory=CancelSignal)
    """Set when the call should stop (a stop, a pause now, a timeout)."""
    app: Mapping[str, Any] = field(default_factory=dict)
    """The contract's app state as of the step that asked for the call."""
    _emit: Callable[[JsonValue], Awaitable[None]] = _discard

    async def emit(self, output: JsonValue) -> None:
        """Show preliminary output on the call while it runs (replaced by the final output)."""
        await self._emit(output)

    @property
    def idempotency_key(self) -> str:
        """The key for this call's external side effects: session id + call id, unique store-wide.

        The same through every retry, restart and ``rerun`` of the call; different for another
        session's call with the same call id (``orchestrator.core.ids.tool_call_key``).
        """
        return tool_call_key(self.session_id, self.call_id)

    @property
    def cancelled(self) -> bool:
        """Whether the call should stop."""
        return self.signal.cancelled
