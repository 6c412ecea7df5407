"""``wake``: the done callback with which a step or a tool asks its session for the next effect.

The step and tool-call collaborators reach their runner through a weak proxy (so a closed session
is freed at once, not left in a reference cycle). A task that finishes after its session was
closed and freed must then find nothing to wake, rather than raise ``ReferenceError`` from the
event loop's callback.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["Wakeable", "wake"]


class Wakeable(Protocol):
    """A session that can be asked for its next effect."""

    def _kick(self) -> None: ...


def wake(host: Wakeable) -> Callable[[asyncio.Future[Any]], None]:
    """A done callback for a task of ``host``'s: ask ``host`` for more work, unless it is gone."""

    def done(_: asyncio.Future[Any]) -> None:
        with contextlib.suppress(ReferenceError):  # the session was closed and freed: nothing to drive
            host._kick()

    return done
