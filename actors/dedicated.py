"""``DedicatedPool``: which actor a session gets in ``dedicated`` placement, bounded by the machine.

In ``dedicated`` placement every session, and every sub-agent run, gets a Ray actor of its own.
An actor is a process (here ~47 MB, 0.4-1 s and ~1 CPU-second to start), so the pool holds at
most ``limits.actors`` of them, live or starting, and starts at most ``limits.starts`` at once:
unbounded, 50 sessions with sub-agents asked Ray for 64 worker processes on 2 cores, the starts
stalled each other past Ray's timeouts, and the run fell over.

A session that finds no free actor waits its turn (first come, first served; logged as
``dedicated_wait`` and counted in ``stats``), while the pool asks the busy actors to let go of
their idle, unfollowed sessions: such a session deactivates to the store and releases its actor,
which goes, warm, to the first session waiting. A wait longer than ``limits.wait`` ends in one
``DedicatedFull`` error naming the limit and the ``pooled`` alternative.

A sub-agent never waits: it takes a free actor, or starts one under the limit, or else runs on
its parent's actor (a parent waiting on a child that waits for an actor the parent holds would
deadlock). A released actor stays warm for the next session, up to ``limits.keep`` free ones
(the runtime keeps them all: each sub-agent run is a new session, and restarting its actor on
every turn cost more than the idle actor does); beyond that it is stopped. A free actor beyond
``limits.warm`` that stays unused for ``limits.linger`` seconds stops too, so a pool that went
quiet shrinks back to its warm actors.

Plain asyncio, no Ray: the supervisor hands it the actor operations (``Actors``).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from actors.errors import DedicatedFull
from orchestrator.run.background import run_kept

__all__ = ["RECLAIM_EVERY", "Actors", "DedicatedLimits", "DedicatedPool", "default_max_actors"]

log = structlog.get_logger()

RECLAIM_EVERY = 0.5
"""Seconds between two requests to the busy actors to let idle sessions go, while sessions wait."""
ACTOR_BYTES = 128 * 2**20
"""Memory budgeted per dedicated actor: ~47 MB of its own, plus the sessions' state and headroom."""


def default_max_actors(cpus: float, memory_bytes: float) -> int:
    """The default ``max_dedicated``: 4 actors per CPU, within a quarter of the memory Ray offers.

    Measured here (2 cores, ``troupe bench shop --placement dedicated --max-dedicated M``): 50
    sessions ran at 6.0 sessions/s with 8 actors, 5.8 with 16 and 1.6 with 32; 200 at 6.5 with 8
    and 4.0 with 16. Past a few actors per core, more only add start-ups and memory.
    """
    by_cpu = int(4 * max(cpus, 1))
    by_memory = int(memory_bytes / 4 / ACTOR_BYTES)
    return max(2, min(by_cpu, by_memory) if by_memory > 0 else by_cpu)


@dataclass(frozen=True, slots=True)
class DedicatedLimits:
    """How many dedicated actors, how fast they start, how long a session waits for one."""

    actors: int
    """Live and starting actors, at most (``Runtime(max_dedicated=...)``)."""
    wait: float = 120.0
    """Seconds a session waits for an actor before ``DedicatedFull`` (``Runtime(dedicated_wait=...)``)."""
    starts: int = 2
    """Actors starting at once, at most (about one per core: a start costs ~1 CPU-second)."""
    warm: int = 2
    """Free actors started ahead of demand."""
    keep: int = 4
    """Free actors kept when released (the rest stop); the runtime's: ``actors``."""
    linger: float = 300.0
    """Seconds a free actor beyond ``warm`` is kept unused before it stops (a quiet pool shrinks
    back to its ``warm`` actors instead of holding a process per session it once served)."""


@dataclass(frozen=True, slots=True)
class Actors:
    """The Ray operations the pool needs (the supervisor's)."""

    start: Callable[[], Awaitable[str]]
    """Start an actor and wait until it answers; its name."""
    stop: Callable[[str], Awaitable[None]]
    """Stop an actor for good."""
    adopt: Callable[[str, str], Awaitable[None]]
    """Tell actor ``name`` that it hosts ``session_id`` (``adopt(name, session_id)``)."""
    reclaim: Callable[[list[str]], Awaitable[None]]
    """Ask these actors to deactivate their idle, unfollowed sessions (each then releases)."""


@dataclass
class _Waiter:
    session_id: str
    since: float
    future: asyncio.Future[str] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class DedicatedPool:
    """The dedicated actors, and the sessions waiting for one (see the module docstring)."""

    def __init__(self, limits: DedicatedLimits, actors: Actors) -> None:
        self.limits = limits
        self.ops = actors
        self.actors: set[str] = set()
        """Every live actor of the pool (free or assigned)."""
        self.free: list[str] = []
        self.assigned: dict[str, str] = {}
        """Session id -> its actor (a sub-agent may share its parent's)."""
        self.starting = 0
        self.peak = 0
        """The most actors live or starting at once."""
        self._waiters: deque[_Waiter] = deque()
        self._assigning: dict[str, asyncio.Future[str]] = {}
        self._starts = asyncio.Semaphore(max(1, limits.starts))
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Future[Any]] = set()
        self._reclaiming: asyncio.Task[None] | None = None
        self._waits: deque[float] = deque(maxlen=1000)
        self._freed: dict[str, float] = {}
        """Free actor -> when it came free (``linger``)."""
        self._lingering: asyncio.Task[None] | None = None
        self.counts = {"admitted": 0, "waited": 0, "refused": 0, "shared": 0, "started": 0, "stopped": 0}

    @property
    def live(self) -> int:
        """Actors live or starting."""
        return len(self.actors) + self.starting

    # -- assignment -------------------------------------------------------------------------------

    async def assign(self, session_id: str, stale: str | None = None) -> str:
        """The actor of ``session_id``, waiting for one if none is free (one assignment at a time per session).

        ``stale``: the actor the caller was sent to, which said it does not host the session (it
        deactivated it, or restarted): the session is assigned afresh.

        Raises:
            DedicatedFull: no actor came free within ``limits.wait``.
        """
        if stale is not None and self.assigned.get(session_id) == stale:
            self._unassign(session_id)
        known = self.assigned.get(session_id)
        if known is not None:
            return known
        pending = self._assigning.get(session_id)
        if pending is None:
            pending = self._assigning[session_id] = asyncio.ensure_future(self._assign(session_id))
            pending.add_done_callback(lambda _: self._assigning.pop(session_id, None))
        return await asyncio.shield(pending)

    async def _assign(self, session_id: str) -> str:
        while True:
            name = await self._acquire(session_id)
            self.assigned[session_id] = name
            try:
                await self.ops.adopt(name, session_id)
            except Exception as error:  # the actor died under us: drop it, take another
                log.warning("dedicated_adopt_failed", actor=name, session_id=session_id, error=type(error).__name__)
                self.assigned.pop(session_id, None)
                self.lost(name)
                continue
            self.counts["admitted"] += 1
            self._keep_warm()
            return name

    async def _acquire(self, session_id: str) -> str:
        if self.free and not self._waiters:
            return self._take_free()
        if not self._waiters and self.live < self.limits.actors:
            return await self._start()
        parent = session_id.rsplit("/", 1)[0] if "/" in session_id else None
        if parent is not None and parent in self.assigned:
            self.counts["shared"] += 1
            log.info("dedicated_child_shares_parent", session_id=session_id, actor=self.assigned[parent])
            return self.assigned[parent]
        return await self._wait(session_id)

    async def _wait(self, session_id: str) -> str:
        waiter = _Waiter(session_id, time.monotonic())
        self._waiters.append(waiter)
        self.counts["waited"] += 1
        log.info(
            "dedicated_wait", session_id=session_id, position=len(self._waiters), live=self.live, max=self.limits.actors
        )
        self._reclaim_soon()
        try:
            name = await asyncio.wait_for(asyncio.shield(waiter.future), self.limits.wait)
        except TimeoutError:
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)
            if waiter.future.done():  # handed an actor just as the wait ran out: take it
                return waiter.future.result()
            waiter.future.cancel()
            self.counts["refused"] += 1
            log.warning("dedicated_refused", session_id=session_id, max=self.limits.actors, wait=self.limits.wait)
            raise DedicatedFull(self._full_message(session_id)) from None
        waited = time.monotonic() - waiter.since
        self._waits.append(waited)
        log.info("dedicated_admitted", session_id=session_id, actor=name, waited_s=round(waited, 3))
        return name

    def _full_message(self, session_id: str) -> str:
        return (
            f"session {session_id!r} waited {self.limits.wait:g} s (dedicated_wait) for a dedicated actor, "
            f"and all {self.limits.actors} the pool may hold (max_dedicated) stayed busy with "
            f"{len(self._waiters)} other session(s) still waiting: raise max_dedicated (each actor is a "
            "process of ~50 MB), allow a longer dedicated_wait, or use placement='pooled', which hosts "
            "many sessions in each actor"
        )

    # -- release ------------------------------------------------------------------------------------

    def release(self, name: str, session_id: str) -> None:
        """``session_id`` left actor ``name`` (it deactivated): the actor goes to the next waiter, or is kept."""
        if self.assigned.get(session_id) == name:
            self._unassign(session_id)

    def _unassign(self, session_id: str) -> None:
        name = self.assigned.pop(session_id)
        if name in self.assigned.values() or name not in self.actors or name in self.free:
            return  # still hosts another session (a sub-agent's parent), or already gone or free
        self._give(name)

    def _give(self, name: str) -> None:
        """A free actor: to the first session waiting, else kept warm, else stopped."""
        self._changed.set()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.future.done():
                waiter.future.set_result(name)
                return
        if len(self.free) < max(self.limits.keep, self.limits.warm):
            self.free.append(name)
            self._freed[name] = time.monotonic()
            self._linger_soon()
            return
        self._retire(name)
        self._pump()

    def lost(self, name: str) -> None:
        """Actor ``name`` is gone (it failed, or was stopped): forget it, start another for a waiter."""
        self.actors.discard(name)
        with contextlib.suppress(ValueError):
            self.free.remove(name)
        self._freed.pop(name, None)
        self._spawn(self.ops.stop(name))
        self._pump()

    def _take_free(self) -> str:
        """The free actor freed last (the warmest; those freed long ago linger out and stop)."""
        name = self.free.pop()
        self._freed.pop(name, None)
        return name

    def _linger_soon(self) -> None:
        if len(self.free) > self.limits.warm and (self._lingering is None or self._lingering.done()):
            self._lingering = asyncio.ensure_future(self._linger())

    async def _linger(self) -> None:
        """While more than ``warm`` actors are free: stop each once it has been free ``linger`` seconds."""
        while len(self.free) > self.limits.warm:
            oldest = self.free[0]
            due = self._freed.get(oldest, time.monotonic()) + self.limits.linger
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            if self.free and self.free[0] == oldest and len(self.free) > self.limits.warm:
                self.free.pop(0)
                self._freed.pop(oldest, None)
                log.info("dedicated_linger_stop", actor=oldest, free=len(self.free), linger_s=self.limits.linger)
                self._retire(oldest)

    def _retire(self, name: str) -> None:
        """Stop a free actor the pool no longer keeps."""
        self.actors.discard(name)
        self.counts["stopped"] += 1
        self._spawn(self.ops.stop(name))

    def sessions_on(self, name: str) -> list[str]:
        """The sessions assigned to actor ``name``."""
        return [s for s, a in self.assigned.items() if a == name]

    # -- starting -----------------------------------------------------------------------------------

    async def _start(self) -> str:
        self.starting += 1
        self.peak = max(self.peak, self.live)
        try:
            async with self._starts:
                name = await self.ops.start()
        finally:
            self.starting -= 1
        self.actors.add(name)
        self.counts["started"] += 1
        return name

    async def fill(self) -> None:
        """Start the warm actors (at start-up)."""
        while len(self.free) < self.limits.warm and self.live < self.limits.actors:
            self._give(await self._start())

    def _keep_warm(self) -> None:
        """Start a free actor ahead of demand when there is room and no one waits."""
        if not self._waiters and len(self.free) + self.starting < self.limits.warm and self.live < self.limits.actors:
            self._spawn(self._start_free())

    def _pump(self) -> None:
        """Room under the limit and sessions waiting: start actors for them."""
        room = self.limits.actors - self.live
        for _ in range(min(room, len(self._waiters))):
            self._spawn(self._start_free())

    async def _start_free(self) -> None:
        try:
            name = await self._start()
        except Exception as error:
            log.error("dedicated_start_failed", error=str(error))
            return
        self._give(name)

    def _spawn(self, work: Awaitable[Any]) -> None:
        run_kept(self._tasks, work)

    # -- reclaiming idle sessions -----------------------------------------------------------------

    def _reclaim_soon(self) -> None:
        if self._reclaiming is None or self._reclaiming.done():
            self._reclaiming = asyncio.ensure_future(self._reclaim())

    async def _reclaim(self) -> None:
        """While sessions wait: ask the busy actors to let their idle sessions go, then again."""
        while self._waiters:
            self._changed.clear()
            busy = sorted(set(self.assigned.values()))
            try:
                await self.ops.reclaim(busy)
            except Exception as error:
                log.warning("dedicated_reclaim_failed", error=str(error))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), RECLAIM_EVERY)

    # -- stats --------------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """The pool now: its limit, live/free/assigned actors, waiting sessions and how long waits took."""
        waits = list(self._waits)
        return {
            "max": self.limits.actors,
            "wait_limit_s": self.limits.wait,
            "live": self.live,
            "peak": self.peak,
            "starting": self.starting,
            "free": len(self.free),
            "assigned": len(set(self.assigned.values())),
            "sessions": len(self.assigned),
            "waiting": len(self._waiters),
            "wait_s_p50": round(statistics.median(waits), 3) if waits else 0.0,
            "wait_s_max": round(max(waits), 3) if waits else 0.0,
            **self.counts,
        }

    async def close(self) -> None:
        """Stop waiting and starting (the supervisor is shutting down)."""
        for task in [self._reclaiming, self._lingering, *self._tasks]:
            if task is not None and not task.done():
                task.cancel()
        for waiter in self._waiters:
            waiter.future.cancel()
        self._waiters.clear()
