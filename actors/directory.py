"""The directory a host keeps in the store, for its own restart, and its reports to the supervisor.

A host lists its active top-level sessions in the store (``troupe:host:<name>``/``directory``)
before it accepts work for one: after a crash, ``recover`` re-activates every session listed,
and each recovers its own unfinished turn, with no client around. It takes the newest first,
``RECOVER_AT_ONCE`` at a time: a session with a turn running was likely activated last, and it
no longer waits behind every idle session the host held. In ``bench actors``' recoveries (the
streaming session and 2-10 idle ones on the host) it was active again ~40 ms after the restart's
``__init__`` one after another, 23 ms with all at once, and 14-16 ms four at a time, newest first.

Saves are coalesced (changes made while one is in flight go out together in the next), and a
caller that needs its change durable waits for the save that includes it (``durable``).
Sub-agent sessions are not listed: a parent's recovery re-attaches them (its delegate call runs
again).

Every change is also reported to the supervisor, at most every ``REPORT_EVERY`` seconds (a
burst is one report), versioned so that reports arriving out of order are told apart.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog

from orchestrator.core.wire import pack, unpack
from orchestrator.store.base import EventStore

__all__ = ["RECOVER_AT_ONCE", "REPORT_EVERY", "HostDirectory"]

RECOVER_AT_ONCE = 4
"""Sessions a restarted host re-activates at once (each reads its log, folds it, and may write):
enough to overlap one's read with another's fold, few enough that the newest finish first."""

REPORT_EVERY = 0.1
"""Seconds between two reports of a host's active sessions to the supervisor (a burst is one report)."""

Entries = Callable[[], dict[str, str]]
"""The host's active sessions now: session id -> agent key."""
Report = Callable[[dict[str, str], tuple[float, int]], Awaitable[None]]
"""Tell the supervisor a host's active sessions, with the report's version."""


class HostDirectory:
    """A host's directory in the store and its reports (see the module docstring)."""

    def __init__(
        self, store: EventStore, host: str, started: float, *, active: Entries, report: Report, kept: bool
    ) -> None:
        self.store = store
        self.host = host
        self.started = started
        self.active = active
        self.report = report
        self.kept = kept
        """Whether the directory is kept at all (an in-process host never restarts: it needs none)."""
        self.closing = False
        """The host is shutting down: no more reports."""
        self._marked = 0  # directory changes made / saved (generations)
        self._saved = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None
        self._report_task: asyncio.Task[None] | None = None
        self.reports = 0
        """Reports sent to the supervisor so far (each report's version counts them)."""
        self._unreported = False
        """A change the supervisor has not been sent yet."""
        self.log = structlog.get_logger().bind(host=host)

    def mark(self, session_id: str) -> int:
        """Note that ``session_id`` was activated or deactivated; returns the change's generation.

        Only top-level sessions are kept in the store's directory: a sub-agent session is
        re-attached by its parent's recovery (its delegate call runs again), never on its own.
        Every change is reported to the supervisor (at most every ``REPORT_EVERY`` seconds).
        """
        if not self.kept:
            return 0
        self._report_soon()
        if "/" in session_id:
            return self._saved
        self._marked += 1
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._save())
        return self._marked

    async def durable(self, generation: int) -> None:
        """Wait until the directory in the store includes change ``generation``."""
        if generation <= self._saved:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((generation, waiter))
        await waiter

    async def _save(self) -> None:
        # Changes made while a save is in flight go out together in the next one.
        while self._saved < self._marked:
            generation = self._marked
            entries = {sid: key for sid, key in self.active().items() if "/" not in sid}
            failure: BaseException | None = None
            try:
                await self.store.save_snapshot(f"troupe:host:{self.host}", "directory", 0, pack(entries))
                self._saved = generation
            except Exception as error:
                failure = error
            waiting, self._waiters = self._waiters, []
            for wanted, waiter in waiting:
                if waiter.done():
                    continue
                if failure is not None:
                    waiter.set_exception(failure)
                elif wanted <= generation:
                    waiter.set_result(None)
                else:
                    self._waiters.append((wanted, waiter))
            if failure is not None:
                self.log.error("directory_save_failed", error=str(failure))
                return

    def _report_soon(self) -> None:
        self._unreported = True
        if self._report_task is None or self._report_task.done():
            self._report_task = asyncio.ensure_future(self._report())

    async def _report(self) -> None:
        """Tell the supervisor which sessions are active here (one report per burst of changes).

        A change made while a report is on its way (its call may wait: the supervisor's handle is
        looked up on a thread the first time) is sent in another report after it, never dropped.
        """
        while self._unreported:
            await asyncio.sleep(REPORT_EVERY)
            if self.closing:
                return
            self._unreported = False
            self.reports += 1
            with contextlib.suppress(Exception):
                await self.report(self.active(), (self.started, self.reports))

    async def recover(self, activate: Callable[[str, str], Awaitable[object]]) -> list[str]:
        """``activate`` every session the directory lists (a restart); returns their ids."""
        if not self.kept:
            return []
        snapshot = await self.store.load_snapshot(f"troupe:host:{self.host}", "directory")
        if snapshot is None:
            return []
        entries: dict[str, str] = unpack(snapshot.data)
        at_once = asyncio.Semaphore(RECOVER_AT_ONCE)

        async def one(session_id: str, agent_key: str) -> None:
            async with at_once:
                try:
                    await activate(session_id, agent_key)
                except Exception as error:
                    self.log.warning("recover_failed", session_id=session_id, error=str(error))

        # The newest first (the directory lists them in the order they were activated).
        await asyncio.gather(*(one(sid, key) for sid, key in reversed(entries.items())))
        return list(entries)

    async def close(self) -> None:
        """Let a save in flight finish (the host is shutting down)."""
        self.closing = True
        if self._task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._task
