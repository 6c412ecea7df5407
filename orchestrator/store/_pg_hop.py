"""The appends one turn of a caller's event loop makes cross to the store's loop together.

Every PostgreSQL call runs on the store's own loop thread (``_pg_engine``). Sent one by one, each
append of a busy session host paid its own trip there and back: a coroutine and a task on the
store's loop, a ``concurrent.futures.Future`` chained to an asyncio one, and a wake-up of each
thread (in ``bench shop --store postgres``, ~7 % of a host's interpreter time went to that
plumbing alone). The group writer commits a list of independent batches in one transaction anyway
(``GroupWriter.submit``), so the appends a loop makes in one turn go there as one list, at the
start of the loop's next turn, as the SQLite inline writer does with its commits. Each caller
still gets its own batch's outcome, and a cancelled caller does not withdraw its batch.
"""

from __future__ import annotations

import asyncio
import threading

from orchestrator.store._pg_engine import Engine
from orchestrator.store._pg_write import GroupWriter, Outcome
from orchestrator.store._validate import PreparedBatch

__all__ = ["AppendHops"]

_Pending = list[tuple[PreparedBatch, "asyncio.Future[Outcome]"]]


class AppendHops:
    """Appends gathered per caller loop and sent to the group writer once per turn of that loop."""

    def __init__(self, engine: Engine, writer: GroupWriter) -> None:
        self._engine = engine
        self._writer = writer
        self._pending: dict[asyncio.AbstractEventLoop, _Pending] = {}
        self._sending: set[asyncio.Task[None]] = set()
        self._lock = threading.Lock()  # callers on several loops (threads) share one store

    def append(self, batch: PreparedBatch) -> asyncio.Future[Outcome]:
        """Queue ``batch`` for this loop's next trip; the future resolves with its outcome."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Outcome] = loop.create_future()
        with self._lock:
            pending = self._pending.get(loop)
            if pending is None:
                pending = self._pending[loop] = []
                loop.call_soon(self._send, loop)
            pending.append((batch, future))
        return future

    async def flush(self) -> None:
        """Send what this loop has queued now, and wait for every trip of this loop in flight."""
        loop = asyncio.get_running_loop()
        self._send(loop)
        with self._lock:
            mine = [task for task in self._sending if task.get_loop() is loop]
        if mine:
            await asyncio.gather(*mine, return_exceptions=True)

    def _send(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            items = self._pending.pop(loop, None)
        if not items:
            return
        task = loop.create_task(self._trip(items))
        with self._lock:
            self._sending.add(task)
        task.add_done_callback(self._sent)

    def _sent(self, task: asyncio.Task[None]) -> None:
        with self._lock:
            self._sending.discard(task)

    async def _trip(self, items: _Pending) -> None:
        try:
            outcomes = await self._engine.call(self._writer.submit([batch for batch, _ in items]))
        except Exception as error:  # the store closed, or the group failed as a whole
            for _, future in items:
                if not future.done():
                    future.set_exception(error)
            return
        for (_, future), outcome in zip(items, outcomes, strict=True):
            if not future.done():  # a caller cancelled meanwhile: its batch stands all the same
                future.set_result(outcome)
