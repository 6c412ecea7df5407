"""``BatchSender``: a child run's batches to its parent on another host, one Ray call in flight.

A child streaming flat out commits every few hundred parts, ~700 times a second, and each commit
was one fire-and-forget ``deliver`` call to the parent's host: ~0.3 ms of the child host's CPU per
call on a 2-vCPU VM, a third of all it did (py-spy, ``troupe bench actors``' nested stream), and a
task for the parent to run per batch. The sender keeps one call in flight: a batch made while
one is on its way waits, joined to the batches after it (``ChildBatch.then``), and goes when the
call returns. A quiet child's batch goes at once, as before; a busy one's go as often as the
parent takes them. A call that fails (the parent's host died) loses its batch, as a lost
fire-and-forget did: the parent's copy is healed by the snapshot a re-attach sends, and by the
final one that comes with the child's result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from orchestrator.run.children import ChildBatch

__all__ = ["BatchSender"]

log = structlog.get_logger()


class BatchSender:
    """One child run's batches to one parent: at most one call in flight (see the module docstring)."""

    __slots__ = ("_flight", "_pending", "_send")

    _flying: set[asyncio.Future[Any]] = set()  # noqa: RUF012 - the calls in flight, held until they land

    def __init__(self, send: Callable[[ChildBatch], Awaitable[Any]]) -> None:
        self._send = send
        """Starts the call that delivers a batch; awaiting its result waits for the parent's host."""
        self._pending: list[ChildBatch] = []
        """Batches made while a call was in flight, joined where they follow each other."""
        self._flight: asyncio.Future[Any] | None = None

    async def __call__(self, batch: ChildBatch) -> None:
        """Send ``batch`` now, or after the call in flight (a ``Deliver``: never waits for the parent)."""
        if self._flight is None:
            self._start(batch)
            return
        pending = self._pending
        joined = pending[-1].then(batch) if pending else None
        if joined is not None:
            pending[-1] = joined
        else:
            pending.append(batch)

    @property
    def busy(self) -> bool:
        """Whether a call is in flight."""
        return self._flight is not None

    def _start(self, batch: ChildBatch) -> None:
        try:
            flight = asyncio.ensure_future(self._send(batch))
        except Exception as error:  # no handle for the parent's host: lost, as above
            log.warning("child_batch_lost", call_id=batch.call_id, seq=batch.seq, error=type(error).__name__)
            self._flight = None
            return
        self._flight = flight
        self._flying.add(flight)  # the loop holds tasks weakly: a call outlives its child run
        flight.add_done_callback(self._landed)

    def _landed(self, flight: asyncio.Future[Any]) -> None:
        self._flying.discard(flight)
        self._flight = None
        if not flight.cancelled() and flight.exception() is not None:
            log.info("child_batch_lost", error=type(flight.exception()).__name__)
        if self._pending:
            self._start(self._pending.pop(0))
