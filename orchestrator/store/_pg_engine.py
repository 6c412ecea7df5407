"""Where a PostgreSQL store does its I/O: one thread with its own event loop, a pool, a retry rule.

Why a thread of its own: a store object is shared by every coroutine of a process, and callers
run on more than one event loop (a session host's loop, the CLI's ``asyncio.run``, a test's
other thread), while a psycopg async connection and its pool belong to the loop that made them.
So the pool, the group-commit writer and the ``LISTEN`` connection all live on the store's own
loop, and every public call hops there and back (``Engine.call``): about as cheap as SQLite's
writer-thread hop, and far cheaper than the round trip to the server it wraps.

Reconnecting: a connection can break at any time (the server restarted, a network blip). Work
that is known not to have committed is simply run again on a fresh connection, waiting between
attempts on ``RETRY_SCHEDULE``, until ``reconnect_timeout`` has passed; then it fails with one
``StoreError`` that names the store and what failed. The pool reconnects on its own with its
own backoff; this rule covers the call that was in flight.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from orchestrator.core.errors import StoreError
from orchestrator.store._pg_schema import connect, failure, migrate

__all__ = ["RETRY_SCHEDULE", "Connection", "Engine", "Retry", "is_lost"]

T = TypeVar("T")
Connection = psycopg.AsyncConnection[Any]

RETRY_SCHEDULE: Final = (0.05, 2.0, 1.0)
"""Waits between attempts after a lost connection: the first, the growth factor, the longest."""


def is_lost(error: BaseException, conn: Connection | None) -> bool:
    """Whether ``error`` means the connection (or the whole server) went away, not a refusal."""
    if isinstance(error, PoolTimeout):  # no connection could be had: the server is down
        return True
    return isinstance(error, psycopg.OperationalError) and (conn is None or conn.broken or conn.closed)


class Retry:
    """The waits of one call across lost connections, bounded by a deadline."""

    def __init__(self, where: str, doing: str, timeout: float) -> None:
        """Start the clock for one call."""
        self._where = where
        self._doing = doing
        self._timeout = timeout
        self._deadline = time.monotonic() + timeout
        self._delay = RETRY_SCHEDULE[0]

    def remaining(self) -> float:
        """Seconds left before the call gives up (at least a little, for one last attempt)."""
        return max(self._deadline - time.monotonic(), 0.1)

    async def wait(self, error: BaseException) -> None:
        """Wait before the next attempt, or raise the call's failure once time is up."""
        if time.monotonic() + self._delay > self._deadline:
            raise StoreError(
                f"{failure(self._where, self._doing, error).message}; the connection was lost and not "
                f"regained within {self._timeout:g} s (is the server up?)"
            ) from None
        await asyncio.sleep(self._delay)
        self._delay = min(self._delay * RETRY_SCHEDULE[1], RETRY_SCHEDULE[2])


class Engine:
    """The store's loop thread, its pool, and the schema check done once on first use."""

    def __init__(
        self, url: str, where: str, *, pool_size: int, connect_timeout: float, reconnect_timeout: float
    ) -> None:
        """Start the loop thread; nothing connects until the first call."""
        self.url = url
        self.where = where
        self.pool_size = pool_size
        self.connect_timeout = connect_timeout
        self.reconnect_timeout = reconnect_timeout
        self.loop = asyncio.new_event_loop()
        self._pool: AsyncConnectionPool[Connection] | None = None
        self._opening: asyncio.Lock | None = None
        self._closing = False
        self._inflight: set[concurrent.futures.Future[Any]] = set()
        self._inflight_lock = threading.Lock()
        # A daemon thread: a store never closed must not keep the interpreter alive.
        self._thread = threading.Thread(target=self._run, name=f"troupe-pg {where}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    async def call(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` on the store's loop and return its result on the caller's loop.

        Cancelling the caller cancels ``work``; code that must outlive its caller (a queued
        write) shields itself.
        """
        if asyncio.get_running_loop() is self.loop:
            return await work
        with self._inflight_lock:
            if self._closing:
                work.close()
                raise self.closed_error()
            future = asyncio.run_coroutine_threadsafe(work, self.loop)
            self._inflight.add(future)
        future.add_done_callback(self._settled)
        return await asyncio.wrap_future(future)

    def _settled(self, future: concurrent.futures.Future[Any]) -> None:
        with self._inflight_lock:
            self._inflight.discard(future)

    def closed_error(self) -> StoreError:
        """The error for every call after ``close``."""
        return StoreError(f"the store {self.where} is closed: open it again with open_store(url)")

    async def shut(self, *steps: Callable[[], Awaitable[None]]) -> None:
        """Close: refuse new calls, run ``steps`` (store loop), let calls in flight end, close the pool.

        The loop must not stop under a call still running (a follower's read woken by the close),
        or that call would be torn apart mid-``await`` instead of finishing.
        """
        with self._inflight_lock:
            self._closing = True
        for step in steps:
            await step()
        with self._inflight_lock:
            running = list(self._inflight)
        await asyncio.gather(*(asyncio.wrap_future(f) for f in running), return_exceptions=True)
        await self.close_pool()

    async def pool(self) -> AsyncConnectionPool[Connection]:
        """The pool, after the schema is checked and migrated (store loop; first call connects).

        A failure is not remembered: the next call tries again (the server may come up).

        Raises:
            StoreError: the server is unreachable, or the schema is newer than this code.
        """
        if self._pool is not None:
            return self._pool
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._pool is None:
                await self.migrate()
                pool: AsyncConnectionPool[Connection] = AsyncConnectionPool(
                    self.url,
                    min_size=1,
                    max_size=self.pool_size,
                    kwargs={"autocommit": True},
                    open=False,
                    name="troupe",
                    reconnect_timeout=self.reconnect_timeout,
                )
                try:
                    await pool.open(wait=True, timeout=self.connect_timeout)
                except PoolTimeout as error:
                    await pool.close()
                    raise failure(self.where, "opening the connection pool", error) from None
                self._pool = pool
        return self._pool

    async def migrate(self) -> tuple[int, int]:
        """Check and migrate the schema on a connection of its own; (version before, after).

        Raises:
            StoreError: the server is unreachable, or the schema is newer than this code.
        """
        conn = await connect(self.url, self.where, timeout=self.connect_timeout)
        try:
            return await migrate(conn, self.where)
        except psycopg.Error as error:
            raise failure(self.where, "checking the schema", error) from None
        finally:
            await conn.close()

    async def run(self, doing: str, work: Callable[[Connection], Awaitable[T]]) -> T:
        """Run ``work`` on a pooled connection, again on a fresh one if the connection is lost.

        Only for work that is safe to repeat (reads, upserts): it may have run once already.
        """
        retry = Retry(self.where, doing, self.reconnect_timeout)
        while True:
            pool = await self.pool()
            conn: Connection | None = None
            try:
                async with pool.connection(timeout=retry.remaining()) as conn:
                    return await work(conn)
            except (psycopg.Error, PoolTimeout) as error:
                if not is_lost(error, conn):
                    raise failure(self.where, doing, error) from None
                await retry.wait(error)

    async def close_pool(self) -> None:
        """Close the pool (store loop)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    def stop(self) -> None:
        """Stop the loop thread (after ``close_pool``); does not wait for it."""
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:  # already closed
            pass

    def join(self) -> None:
        """Wait for the loop thread to end (blocking: call it from a worker thread)."""
        self._thread.join()
