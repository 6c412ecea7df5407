"""``wake``: the done callback with which a step or a tool asks its session for the next effect.

Only when the session has not seen the work end: the write that ends a step or a call (its finish,
its result) plans what follows it, and the session then forgets the work (``reconcile``). A task
that ends without such a write (a step cut off, a crash, a write that failed) is still the
session's when it ends, and asks for a planning pass; so does a step the session let go because
the write that started it failed (``Steps.abandon``). (Asking every time cost a pass that found
nothing, ~6 a shop turn.)

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


def wake(host: Wakeable, pending: Callable[[], bool]) -> Callable[[asyncio.Future[Any]], None]:
    """A done callback for a task of ``host``'s: ask ``host`` for more work while the work is its own.

    ``pending()`` says whether the session still holds the work (see the module docstring); a
    session that was closed and freed is asked nothing.
    """

    def done(_: asyncio.Future[Any]) -> None:
        with contextlib.suppress(ReferenceError):  # the session was closed and freed: nothing to drive
            if pending():
                host._kick()

    return done
