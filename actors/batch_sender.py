"""``BatchSender``: a child run's batches to its parent on another host, one Ray call in flight.

A child streaming flat out commits every few hundred parts, ~700 times a second, and each commit
was one fire-and-forget ``deliver`` call to the parent's host: ~0.3 ms of the child host's CPU per
call on a 2-vCPU VM, a third of all it did (py-spy, ``troupe bench actors``' nested stream), and a
task for the parent to run per batch. The sender keeps one call in flight: a batch made while
one is on its way waits, joined to the batches after it (``ChildBatch.then``), and goes when the
call returns. A quiet child's batch goes at once, as before; a busy one's go as often as the
parent takes them; the batch with the run's first visible part goes at once whatever is in
flight (joined to those before it), since a client following the parent waits for it. The
batches before it (the child's input, its turn and step starting: nothing a client shows) wait
for it, at most ``HOLD``, so that a run's start and its first text usually go in one call. A call
that fails (the parent's host died) loses its batch, as a lost fire-and-forget did: the
parent's copy is healed by the snapshot a re-attach sends, and by the final one that comes with
the child's result.

When a long child run ends, ``settled`` waits for the calls still on their way (a short one's
does not wait). Once every batch is with the parent, the child's result goes without that final
snapshot (the whole run, sent and written again for nothing); if one was lost, or the parent
does not answer within the limit, the snapshot goes along as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import structlog

from orchestrator.run.children import ChildBatch

__all__ = ["HOLD", "BatchSender"]

log = structlog.get_logger()

HOLD = 0.01
"""Seconds a run's batches before its first visible part wait for it (then they go alone).

Sent at once, the child's first batch (its input, turn and step starting) cost a Ray call, and the
child's host spent ~0.5 ms submitting it between the write of its input and that of its first text.
Held, it goes with the first text: one call fewer per child run on another host. The first nested
part, pooled (``troupe bench actors``' trial, 20 on a fresh runtime), four alternating pairs
against sending it at once: p50 6.3, 6.3, 7.3, 7.4 ms against 7.6, 9.6, 8.2, 8.1. The parent would
hold such a batch itself anyway (``NESTED_DELAY``) before writing it."""


class BatchSender:
    """One child run's batches to one parent: one call in flight (see the module docstring)."""

    __slots__ = ("_flights", "_held", "_hold", "_idle", "_lost", "_pending", "_send", "_shown")

    _flying: ClassVar[set[asyncio.Future[Any]]] = set()
    """Every sender's calls in flight, held until they land (the loop holds tasks weakly)."""

    def __init__(self, send: Callable[[ChildBatch], Awaitable[Any]], *, hold: float = HOLD) -> None:
        self._send = send
        """Starts the call that delivers a batch; awaiting its result waits for the parent's host."""
        self._pending: list[ChildBatch] = []
        """Batches made while a call was in flight, joined where they follow each other."""
        self._flights = 0
        self._shown = False
        """Whether the run's first visible part has been sent."""
        self._lost = False
        """Whether a batch may not have reached the parent (a call failed, or the parent did not take it)."""
        self._idle: asyncio.Future[None] | None = None
        """What ``settled`` waits on: done once nothing is in flight or pending."""
        self._hold = hold
        self._held: asyncio.TimerHandle | None = None
        """Sends the batches held for the run's first visible part, if it has not come by then."""

    async def __call__(self, batch: ChildBatch) -> None:
        """Send ``batch`` now, or after the call in flight (a ``Deliver``: never waits for the parent)."""
        pending = self._pending
        if pending:
            joined = pending[-1].then(batch)
            if joined is not None:
                pending[-1] = batch = joined
            else:
                pending.append(batch)
        else:
            pending.append(batch)
        if self._shown:
            if not self._flights:
                self._flush()
        elif batch.visible():
            # What a client following the parent waits for: it goes now, with what came before it
            # (Ray delivers one caller's calls to an actor in order), beside the call in flight.
            self._shown = True
            self._flush()
        elif self._held is None:
            self._held = asyncio.get_running_loop().call_later(self._hold, self._release)

    def _release(self) -> None:
        """The run showed nothing within ``HOLD``: what was held goes (unless a call is in flight)."""
        self._held = None
        if self._pending and not self._flights:
            self._flush()

    @property
    def busy(self) -> bool:
        """Whether a call is in flight."""
        return self._flights > 0

    def _flush(self) -> None:
        """Send the pending batches (one call each; joined, they are usually one)."""
        if self._held is not None:
            self._held.cancel()
            self._held = None
        pending, self._pending = self._pending, []
        for batch in pending:
            try:
                flight = asyncio.ensure_future(self._send(batch))
            except Exception as error:  # no handle for the parent's host: lost, as above
                log.warning("child_batch_lost", call_id=batch.call_id, seq=batch.seq, error=type(error).__name__)
                self._lost = True
                continue
            self._flights += 1
            self._flying.add(flight)  # a call outlives its child run
            flight.add_done_callback(self._landed)

    def _landed(self, flight: asyncio.Future[Any]) -> None:
        self._flying.discard(flight)
        self._flights -= 1
        if flight.cancelled():
            self._lost = True
        elif flight.exception() is not None:
            self._lost = True
            log.info("child_batch_lost", error=type(flight.exception()).__name__)
        elif flight.result() is False:  # the parent's host does not hold the parent session now
            self._lost = True
        if self._pending and not self._flights:
            self._flush()
        idle = self._idle
        if idle is not None and not self._flights and not self._pending and not idle.done():
            idle.set_result(None)

    async def settled(self, limit: float) -> bool:
        """Wait (up to ``limit`` seconds) for the calls on their way; whether every batch reached the parent."""
        if self._flights or self._pending:
            if limit <= 0:
                return False  # on their way, and no time to wait for them
            idle = self._idle
            if idle is None or idle.done():
                idle = self._idle = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(asyncio.shield(idle), limit)
            except TimeoutError:
                return False
        return not self._lost
