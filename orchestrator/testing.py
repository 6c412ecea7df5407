"""Fakes for tests and demos, shipped with the library (inject them; do not patch).

- ``ScriptedModel``: plays a script of steps (see ``orchestrator.models.scripted``).
- ``FunctionModel``: a model whose step is computed by a function of the request, in the
  scripted item format (or as stream parts), for tests that need to look at the prompt.
- ``MemoryStore``: the in-memory event store.
- ``eventually``: wait until a condition on observable state holds (never ``sleep`` to synchronise).
- ``Gate``: a point a test holds work at, and opens when it has seen what it needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, overload

from orchestrator.core.stream import AgentStreamPart, StepFinish
from orchestrator.models.base import CancelSignal, ModelRequest
from orchestrator.models.catalog import ModelLimits
from orchestrator.models.scripted import ScriptedModel
from orchestrator.store.memory import MemoryStore

__all__ = ["FunctionModel", "Gate", "MemoryStore", "ScriptedModel", "Wake", "eventually"]

T = TypeVar("T")

StepFunction = Callable[[ModelRequest], Sequence[Mapping[str, Any] | AgentStreamPart]]


class FunctionModel:
    """A model that answers each request with ``fn(request)``.

    ``fn`` returns one step: scripted items (``{"text": ...}``, ``{"tool": ...}``, ...) or stream
    parts. Every request is recorded in ``requests`` (summary requests too: ``purpose="compact"``).
    Like the scripted model it has no context window unless given one (``context_window=``).
    """

    def __init__(
        self,
        fn: StepFunction,
        *,
        name: str = "function",
        context_window: int | None = None,
        max_output_tokens: int | None = None,
    ) -> None:
        self.fn = fn
        self._name = name
        self._limits = None if context_window is None else ModelLimits(context_window, max_output_tokens)
        self.requests: list[ModelRequest] = []

    @property
    def name(self) -> str:
        """The model's name."""
        return self._name

    @property
    def catalog_name(self) -> str | None:
        """Never looked up in the catalog."""
        return None

    @property
    def limits(self) -> ModelLimits | None:
        """The window it was given (``None``: no automatic compaction)."""
        return self._limits

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
                "generate",  # fn answers a summary request too: play its items, not the scripted summary
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


class Wake(Protocol):
    """What ``eventually`` waits on between checks: an ``asyncio.Event`` or a ``Flag`` (a live view's ``changed``)."""

    def clear(self) -> None:
        """Unset it before a check."""
        ...

    def wait(self) -> Awaitable[object]:
        """Wait until it is set."""
        ...


@overload
async def eventually(
    predicate: Callable[[], Awaitable[T | None]],
    timeout: float = 10.0,
    *,
    interval: float = 0.005,
    what: str | None = None,
    wake: Wake | None = None,
) -> T: ...


@overload
async def eventually(
    predicate: Callable[[], T | None],
    timeout: float = 10.0,
    *,
    interval: float = 0.005,
    what: str | None = None,
    wake: Wake | None = None,
) -> T: ...


async def eventually(
    predicate: Callable[[], Any],
    timeout: float = 10.0,
    *,
    interval: float = 0.005,
    what: str | None = None,
    wake: Wake | None = None,
) -> Any:
    """The first truthy value of ``predicate()`` (sync or async), checked until ``timeout``.

    For waiting on state another task or process changes, where no event says it changed. The
    interval only sets how soon a change is seen: the test's result never depends on it.

    With ``wake`` (an event the code under test sets on a change, such as a live view's
    ``changed``), the predicate is checked again as soon as it is set, and at least every
    ``interval``: so a change that does not set it is still seen. It is cleared before each
    check, so a change during a check is never missed.

    Raises:
        TimeoutError: naming ``what`` (or the predicate) and the timeout.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        if wake is not None:
            wake.clear()
        value = predicate()
        if inspect.isawaitable(value):
            try:  # a check that hangs (a call to a dead process) must not outlive the timeout
                value = await asyncio.wait_for(_awaited(value), max(deadline - loop.time(), 0.0))
            except TimeoutError:
                if inspect.iscoroutine(value):
                    value.close()  # out of time before it ran: no "never awaited" warning on a later test
                raise TimeoutError(f"{_name(predicate, what)} did not hold within {timeout} s") from None
        if value:
            return value
        left = deadline - loop.time()
        if left <= 0:
            raise TimeoutError(f"{_name(predicate, what)} did not hold within {timeout} s")
        if wake is None:
            await asyncio.sleep(min(interval, left))
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), min(interval, left))


async def _awaited(value: Awaitable[T]) -> T:
    return await value


def _name(predicate: Callable[..., object], what: str | None) -> str:
    return what or str(getattr(predicate, "__name__", repr(predicate)))


class Gate:
    """A point where work waits until the test opens it, and that tells the test work arrived.

    ``await gate.wait()`` in the code under test (a tool, a model) marks it reached and blocks
    until ``gate.open()``; the test awaits ``gate.reached`` to know the work is there. A gate
    opened before it is reached lets the work straight through.
    """

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._reached = asyncio.Event()
        self.count = 0
        """How many times work has reached the gate."""

    async def wait(self) -> None:
        """Reach the gate, and wait until it is open."""
        self.count += 1
        self._reached.set()
        await self._open.wait()

    async def reached(self, timeout: float = 10.0) -> None:
        """Wait until work has reached the gate.

        Raises:
            TimeoutError: nothing reached it within ``timeout``.
        """
        try:
            await asyncio.wait_for(self._reached.wait(), timeout)
        except TimeoutError:
            raise TimeoutError(f"nothing reached the gate within {timeout} s") from None

    def open(self) -> None:
        """Let every waiting (and later) arrival through."""
        self._open.set()

    def close(self) -> None:
        """Hold later arrivals again (and forget that work arrived)."""
        self._open.clear()
        self._reached.clear()

    @property
    def is_open(self) -> bool:
        """Whether arrivals pass."""
        return self._open.is_set()
