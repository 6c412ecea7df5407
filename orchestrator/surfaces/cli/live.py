"""Drawing a session while it runs: the tail of its conversation in a ``rich.live.Live``.

A ``LiveView`` (``session.live()``) keeps a local copy of the conversation current; ``LiveTurn``
adds a listener to it and redraws on each batch of mutations, at most ``refresh_per_second``
times a second (a trailing redraw catches the last batch of a burst). Drawing happens on the
event loop's thread: no refresh thread, and the conversation is read where it is written.
On a terminal the region is redrawn in place; elsewhere (a pipe, a test) only the final state
is printed, once, when the turn's ``with`` block ends (no ``Live`` at all, so no cursor codes).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live

from orchestrator.core.mutations import ClientView
from orchestrator.core.parts import AgentMessage, ToolPart
from orchestrator.surfaces.cli.render import render_conversation

if TYPE_CHECKING:
    from actors.client import LiveView

__all__ = ["ConversationTail", "LiveTurn", "awaiting_approval", "caught_up", "last_user_index"]


class _HasView(Protocol):
    @property
    def view(self) -> ClientView: ...


def last_user_index(view: ClientView) -> int:
    """Where the current (or last) turn's drawing starts: the last top-level user message."""
    messages = view.state.messages
    for i in range(len(messages) - 1, -1, -1):
        if messages.at(i).role == "user":
            return i
    return len(messages)


def awaiting_approval(
    messages: Iterable[AgentMessage], path: tuple[str, ...] = ()
) -> tuple[tuple[str, ...], ToolPart] | None:
    """The first tool call that waits for approval, here or in a sub-agent's run at any depth.

    Returns the delegate call ids leading to it (``()`` at the top level) and the call.
    """
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolPart):
                if part.state == "awaiting-confirmation":
                    return path, part
                if part.agent is not None:
                    found = awaiting_approval(part.agent.messages, (*path, part.id))
                    if found is not None:
                        return found
    return None


async def caught_up(live: LiveView, index: int, timeout: float = 30.0) -> None:
    """Wait until the live view holds the log through ``index`` (a turn's result can arrive first)."""

    def holds(view: ClientView) -> bool:
        return view.index >= index

    with contextlib.suppress(TimeoutError):
        await live.wait_for(holds, timeout)


class ConversationTail:
    """A renderable: the live view's messages from ``start`` on, read when it is drawn."""

    def __init__(self, live: _HasView, start: int, *, assistant: str = "assistant") -> None:
        self.live = live
        self.start = start
        self.assistant = assistant

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        state = self.live.view.state
        error = state.error if state.status == "error" else None
        yield render_conversation(state.messages[self.start :], error=error, assistant=self.assistant)


class LiveTurn:
    """``with LiveTurn(console, live_view, start):`` draws the conversation from ``start`` as it changes."""

    def __init__(
        self,
        console: Console,
        live: LiveView,
        start: int,
        *,
        assistant: str = "assistant",
        refresh_per_second: float = 12.0,
    ) -> None:
        self.console = console
        self.view = live
        self.tail = ConversationTail(live, start, assistant=assistant)
        self.interval = 1.0 / refresh_per_second
        self.live = Live(self.tail, console=console, auto_refresh=False, vertical_overflow="visible")
        self.animated = console.is_terminal and not console.is_dumb_terminal
        """Drawn in place as it changes; otherwise (a pipe, a file, a test) printed once at the end."""
        self._last = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __enter__(self) -> LiveTurn:
        self._loop = asyncio.get_running_loop()
        if self.animated:
            self.live.start(refresh=True)
            self.view.listeners.append(self._on_batch)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._on_batch in self.view.listeners:
            self.view.listeners.remove(self._on_batch)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.animated:
            self.live.stop()  # draws the final state
        else:
            self.console.print(self.tail)

    def _on_batch(self, _: Any) -> None:
        """A listener of the live view: redraw now, or once the refresh interval has passed."""
        loop = self._loop
        assert loop is not None
        wait = self._last + self.interval - loop.time()
        if wait <= 0:
            self.redraw()
        elif self._timer is None:
            self._timer = loop.call_later(wait, self.redraw)

    def redraw(self) -> None:
        """Draw the current state now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        assert self._loop is not None
        self._last = self._loop.time()
        self.live.refresh()
