"""The turns that clients wait on through their pollers (``Turn.finished`` over the long poll).

A client sends the turns it waits on with its polls (``SessionHost.poll``'s ``waits``). The host
watches each one and settles its outcome into the poller once the turn ends; the poller's next
reply carries it. A watch is a callback on the session's turn ledger
(``SessionRunner.watch_input``): no task, no timer of its own (one timer ends the watches that run
past the limit), and nothing runs on the writes before the turn ends. (Each was a task awaiting
``wait_input``, five coroutines deep and woken after every write of its session: about 500 per
host at ``troupe bench shop --sizes 1000``.)

Only a session that is not active here, or an input this process has not seen, takes a task: it
activates the session or reads the log (``SessionRunner.turn_of``), then watches as above.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from actors.hub import WaitFailed
from orchestrator.core.turn import TurnOutcome
from orchestrator.run.runner import SessionRunner

__all__ = ["TurnWatches"]


class Watched(Protocol):
    """A session as its host holds it: the runner, and the count of those that keep it active."""

    runner: SessionRunner
    busy: int


class _Watch:
    __slots__ = ("hosted", "setup", "since", "unwatch")

    def __init__(self, since: float) -> None:
        self.since = since
        """When the watch began (the loop's clock)."""
        self.hosted: Watched | None = None
        self.setup: asyncio.Future[None] | None = None
        self.unwatch: Callable[[], None] | None = None

    def release(self) -> None:
        """Drop everything the watch holds: its setup, its callback, its hold on the session."""
        if self.setup is not None and not self.setup.done():
            self.setup.cancel()
        if self.unwatch is not None:
            self.unwatch()
        if self.hosted is not None:
            self.hosted.busy -= 1  # a waited turn keeps its session active; no longer
        self.hosted = self.setup = self.unwatch = None


class TurnWatches:
    """``(poller, input id)`` -> the watch on that input's turn, settled into the poller once (see the module)."""

    def __init__(
        self,
        find: Callable[[str], Watched | None],
        activate: Callable[[str, str], Awaitable[Watched]],
        settle: Callable[[str, str, Any], None],
        limit: float,
    ) -> None:
        """Watch turns for a host's pollers.

        Args:
            find: the session if it is active here (else ``None``).
            activate: the session, activated here if it is not yet (``SessionHost.activate``).
            settle: hands an outcome to a poller (``MutationHub.settle``).
            limit: seconds a watch waits before it settles ``WaitFailed`` (the client then asks
                the host directly).
        """
        self._find = find
        self._activate = activate
        self._settle = settle
        self._limit = limit
        self._watches: dict[tuple[str, str], _Watch] = {}
        self._expiry: asyncio.TimerHandle | None = None
        """One timer for every watch: it ends those past ``limit`` (a timer each costs ~0.5 KB)."""

    def __len__(self) -> int:
        return len(self._watches)

    def add(self, poller: str, input_id: str, session_id: str, agent_key: str) -> None:
        """Settle how ``input_id``'s turn ends into ``poller`` (once per poller and input)."""
        key = (poller, input_id)
        if key in self._watches:
            return
        loop = asyncio.get_running_loop()
        watch = self._watches[key] = _Watch(loop.time())
        if self._expiry is None:
            self._expiry = loop.call_later(self._limit, self._expire)
        hosted = self._find(session_id)
        if hosted is not None and hosted.runner.knows_input(input_id):
            self._start(key, watch, hosted)
        else:
            watch.setup = asyncio.ensure_future(self._set_up(key, watch, session_id, agent_key))

    async def _set_up(self, key: tuple[str, str], watch: _Watch, session_id: str, agent_key: str) -> None:
        input_id = key[1]
        try:
            hosted = await self._activate(session_id, agent_key)
            await hosted.runner.turn_of(input_id)  # reads the log for an input this process has not seen
        except Exception as error:  # e.g. the session moved: the client asks its host directly
            watch.setup = None  # this task: it ends here, it is not cancelled
            self._end(key, watch, WaitFailed(f"{type(error).__name__}: {error}"))
            return
        watch.setup = None
        if self._watches.get(key) is not watch:
            return  # ended meanwhile (closed, or past the limit)
        if not hosted.runner.knows_input(input_id):
            # Neither this process nor the log has it: nothing here will end it (the client asks again).
            self._end(key, watch, WaitFailed(f"input {input_id!r} is not in session {session_id!r}'s log"))
            return
        self._start(key, watch, hosted)

    def _start(self, key: tuple[str, str], watch: _Watch, hosted: Watched) -> None:
        def done(outcome: TurnOutcome | None) -> None:
            watch.unwatch = None  # the ledger has dropped it already
            self._end(key, watch, outcome if outcome is not None else WaitFailed("the session closed on this host"))

        watch.unwatch = hosted.runner.watch_input(key[1], done)  # calls ``done`` later, never from here
        hosted.busy += 1
        watch.hosted = hosted

    def _end(self, key: tuple[str, str], watch: _Watch, outcome: Any) -> None:
        if self._watches.get(key) is not watch:
            return  # ended already (closed, or a repeat)
        del self._watches[key]
        watch.release()
        self._settle(key[0], key[1], outcome)

    def _expire(self) -> None:
        """End the watches past the limit (``WaitFailed``: the client asks again), and wait for the next."""
        self._expiry = None
        now = asyncio.get_running_loop().time()
        for key, watch in list(self._watches.items()):
            if now - watch.since >= self._limit:
                self._end(key, watch, WaitFailed(f"TimeoutError: the turn ran past {self._limit:g} s"))
        if self._watches:
            first = min(watch.since for watch in self._watches.values())
            self._expiry = asyncio.get_running_loop().call_at(first + self._limit, self._expire)

    def close(self) -> None:
        """Drop every watch, settling nothing (the host is shutting down, or forgot its pollers)."""
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        watches, self._watches = self._watches, {}
        for watch in watches.values():
            watch.release()
