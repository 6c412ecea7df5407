"""Following sessions without polling: one ``LISTEN`` connection per store, woken by ``NOTIFY``.

Every commit notifies ``troupe_events`` once per session it advanced, with ``"<last index>
<session id>"`` (never the events: a notification is at most 8000 bytes, and the log is the
one source of truth). The listener wakes the followers of that session; each then reads its
log from the last index it has seen. So a notification only ever says "read now": a follower
that reads too often sees nothing new, and one that was never told would miss events, which is
why every (re)connection of the listener wakes *every* follower for one read: notifications
sent while it was away are lost, the events are not.

The listener runs on the store's loop; a follower waits on its own loop, woken through
``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Final

import psycopg
import structlog

from orchestrator.store._pg_engine import RETRY_SCHEDULE, Engine
from orchestrator.store._pg_schema import CHANNEL, connect

__all__ = ["LISTENER_NAME", "Listener", "Waiter"]

LISTENER_NAME: Final = "troupe-listen"
"""The ``application_name`` of the listening connection (what ``pg_stat_activity`` shows)."""

log = structlog.get_logger()


class Waiter:
    """One follower's doorbell: set from the store's loop, awaited on the follower's own."""

    def __init__(self, session_id: str) -> None:
        """Create it on the follower's loop."""
        self.session_id = session_id
        self.loop = asyncio.get_running_loop()
        self.event = asyncio.Event()

    def ring(self) -> None:
        """Wake the follower (from any thread)."""
        try:
            self.loop.call_soon_threadsafe(self.event.set)
        except RuntimeError:  # the follower's loop is closed: nobody is waiting
            pass


class Listener:
    """The store's ``LISTEN`` connection, reconnected whenever it drops, and its followers."""

    def __init__(self, engine: Engine) -> None:
        """Nothing connects until ``start``."""
        self._engine = engine
        self._lock = threading.Lock()
        self._waiters: dict[str, set[Waiter]] = {}
        self._task: asyncio.Task[None] | None = None
        self.connections = 0
        """How many times the listener has connected (a diagnostic for the reconnect tests)."""

    def subscribe(self, session_id: str) -> Waiter:
        """Register a follower (its loop); it is rung at every notification for its session."""
        waiter = Waiter(session_id)
        with self._lock:
            self._waiters.setdefault(session_id, set()).add(waiter)
        return waiter

    def unsubscribe(self, waiter: Waiter) -> None:
        """Forget a follower (from any thread)."""
        with self._lock:
            followers = self._waiters.get(waiter.session_id)
            if followers is not None:
                followers.discard(waiter)
                if not followers:
                    del self._waiters[waiter.session_id]

    def start(self) -> None:
        """Start listening (store loop); a no-op when already started."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._listen())

    async def stop(self) -> None:
        """Stop listening and wake every follower, so that each sees the store is closed."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        self._ring_all()

    def _ring(self, session_id: str) -> None:
        with self._lock:
            followers = list(self._waiters.get(session_id, ()))
        for waiter in followers:
            waiter.ring()

    def _ring_all(self) -> None:
        with self._lock:
            followers = [w for group in self._waiters.values() for w in group]
        for waiter in followers:
            waiter.ring()

    async def _listen(self) -> None:
        engine = self._engine
        delay = RETRY_SCHEDULE[0]
        while True:
            try:
                await engine.pool()  # the schema exists before anyone listens
                conn = await connect(
                    engine.url, engine.where, timeout=engine.connect_timeout, application_name=LISTENER_NAME
                )
            except Exception as error:  # unreachable for now: try again, followers keep waiting
                log.warning("store_listen_failed", store=engine.where, error=str(error))
                await asyncio.sleep(delay)
                delay = min(delay * RETRY_SCHEDULE[1], RETRY_SCHEDULE[2])
                continue
            try:
                await conn.execute(f"LISTEN {CHANNEL}")
                self.connections += 1
                delay = RETRY_SCHEDULE[0]
                # Whatever was notified while no one listened is lost: every follower reads once.
                self._ring_all()
                async for note in conn.notifies():
                    self._ring(note.payload.partition(" ")[2])
            except psycopg.Error as error:
                log.info("store_listen_lost", store=engine.where, error=str(error))
            finally:
                await conn.close()
            await asyncio.sleep(delay)
