"""Where a session lives: routing session ids to hosts.

In ``pooled`` placement a session's host is chosen by rendezvous hashing over the runtime's host
names (stable across processes, and a host that restarts keeps its name, so nothing moves). In
``dedicated`` placement the supervisor assigns each session a host of its own from a bounded pool
(``actors.dedicated``; the call waits while the pool is full), and the router caches what it said.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import ray

from actors.errors import DedicatedFull, SessionMoved
from actors.options import SUPERVISOR_NAME
from actors.retry import HOST_READY, RetriesExhausted, Schedule, retry
from orchestrator.core.ids import root_session_id

__all__ = ["HostNotFound", "Router", "rendezvous", "root_of"]

root_of = root_session_id
"""A sub-agent session's root session (``parent/call/call`` -> ``parent``): ``ids.root_session_id``."""

T = TypeVar("T")


def rendezvous(key: str, hosts: Sequence[str]) -> str:
    """The host with the highest hash score for ``key`` (highest-random-weight hashing)."""
    best, best_score = hosts[0], -1
    for host in hosts:
        score = int.from_bytes(hashlib.blake2b(f"{host}|{key}".encode(), digest_size=8).digest(), "big")
        if score > best_score:
            best, best_score = host, score
    return best


class HostNotFound(ValueError):
    """No actor is registered under a host's name now: it is being re-created (its node was lost).

    A ``ValueError`` (what ``ray.get_actor`` raises), so code that expects that one still works.
    """


class Router:
    """Host handles by name, and the placement of sessions on them."""

    def __init__(self, namespace: str, hosts: Sequence[str], placement: str, *, children: str = "spread") -> None:
        self.namespace = namespace
        self.hosts = list(hosts)
        self.placement = placement
        self.children = children
        self._handles: dict[str, Any] = {}
        self._placed: dict[str, str] = {}
        self._supervisor: Any = None

    def host(self, name: str) -> Any:
        """The actor handle of host ``name``.

        Raises:
            HostNotFound: no actor has that name now (it is being re-created on a live node).
        """
        handle = self._handles.get(name)
        if handle is None:
            try:
                handle = ray.get_actor(name, namespace=self.namespace)
            except ValueError as error:
                raise HostNotFound(str(error)) from None
            self._handles[name] = handle
        return handle

    def drop(self, name: str) -> None:
        """Forget host ``name``'s handle (it died): the next ``host(name)`` looks it up again."""
        self._handles.pop(name, None)

    def keep(self, name: str, handle: Any) -> None:
        """Use ``handle`` for host ``name`` (one just created)."""
        self._handles[name] = handle

    @property
    def supervisor(self) -> Any:
        """The supervisor's handle (the first time, a blocking lookup: from a loop, ``supervisor_handle``)."""
        if self._supervisor is None:
            self._supervisor = ray.get_actor(SUPERVISOR_NAME, namespace=self.namespace)
        return self._supervisor

    async def supervisor_handle(self) -> Any:
        """The supervisor's handle, looked up the first time on a thread.

        ``ray.get_actor`` is a blocking round trip to the GCS: on a host's event loop, the first
        report after a (re)start held every session of the host for it (23 samples of a host's
        8 s py-spy profile at 250 Hz, ~90 ms, during `bench shop`).
        """
        if self._supervisor is None:
            await asyncio.to_thread(lambda: self.supervisor)
        return self._supervisor

    def place_now(self, session_id: str) -> str | None:
        """The host of ``session_id`` if it is known without asking anyone."""
        placed = self._placed.get(session_id)
        if placed is not None:
            return placed
        if self.placement == "pooled" and self.hosts:
            key = root_of(session_id) if self.children == "local" else session_id
            return rendezvous(key, self.hosts)
        return None

    async def place(self, session_id: str, stale: str | None = None) -> str:
        """The host of ``session_id`` (dedicated placement asks the supervisor once).

        ``stale``: a host that said it does not have the session (dedicated placement): the
        supervisor assigns it afresh rather than naming that host again.

        Raises:
            DedicatedFull: dedicated placement, and no actor came free within the wait limit.
        """
        known = self.place_now(session_id) if stale is None else None
        if known is not None:
            return known
        try:
            assigned: tuple[str, Any] = await (await self.supervisor_handle()).assign.remote(session_id, stale)
            name, handle = assigned
        except DedicatedFull as error:  # Ray's wrapper carries the supervisor's traceback: the message is enough
            raise DedicatedFull(error.message) from None
        self._placed[session_id] = name
        self.keep(name, handle)  # no lookup by name (a blocking round trip to the GCS) on first use
        return name

    def forget(self, session_id: str) -> None:
        """Drop a cached placement (the session moved or its host is gone)."""
        self._placed.pop(session_id, None)

    async def report(self, host: str, entries: dict[str, str], version: tuple[float, int]) -> None:
        """Tell the supervisor which sessions a host has active (fire and forget).

        ``version`` (the host's start time, a counter) orders reports that arrive out of order.
        """
        (await self.supervisor_handle()).report.remote(host, entries, version)

    async def on_host(self, session_id: str, call: Callable[[str], Awaitable[T]], schedule: Schedule) -> T:
        """``call(host)`` on the host of ``session_id``, following it across restarts and moves.

        A host that says the session moved (dedicated placement) is forgotten and the next
        attempt asks where it is now, at once; a host that died is waited for (its restart),
        then called again after the schedule's delay. Only for idempotent calls.

        Raises:
            RetriesExhausted: the schedule's attempts all failed.
        """
        target = ""
        stale: str | None = None

        async def attempt() -> T:
            nonlocal target, stale
            target = await self.place(session_id, stale)
            stale = None
            return await call(target)

        async def recover(error: Exception) -> bool:
            nonlocal stale
            self.forget(session_id)
            if isinstance(error, SessionMoved):
                stale = target  # the supervisor must not name it again
                return False
            await self.wait_ready(target)
            return True

        # HostNotFound: the host is being moved off a lost node (looked up between its death and
        # its re-creation): waited for like a restart, never a failure of the caller's call.
        return await retry(attempt, schedule, recover=recover, also=(SessionMoved, HostNotFound))

    async def wait_ready(self, name: str) -> None:
        """Wait until host ``name`` answers (it may be restarting, or being moved to a live node)."""

        async def ready() -> None:
            await self.host(name).ready.remote()

        async def recover(error: Exception) -> bool:
            self.drop(name)  # or a ValueError: not registered (yet)
            return True

        try:
            await retry(ready, HOST_READY, recover=recover, also=(ValueError,))
        except RetriesExhausted:
            raise TimeoutError(f"host {name!r} did not come back") from None
