"""``Supervisor``: one named, detached actor per namespace, watching the hosts.

It keeps the directory of live sessions (id -> host, parent, node), reported by the hosts. It
learns a host died because the ``watch`` call it keeps open on every host fails (no polling);
it then waits for Ray to restart the host (same name, possibly another node) and tells it to
``recover``: the host re-activates its sessions, and each session recovers its own unfinished
work from its log. ``pause`` / ``resume`` reach one session or a whole tree (a session and its
running descendants, whose ids are ``<parent>/<call id>``). In ``dedicated`` placement it also
assigns each session a host of its own, from a pool bounded by the machine's capacity that
sessions wait for (``actors.dedicated``).

If the supervisor itself dies, Ray restarts it; ``__init__`` re-reads the layout it was given,
and ``rebuild`` asks every host which sessions it has (the hosts keep that list in the store).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import Sequence
from typing import Any, cast

import ray
import structlog

from actors.dedicated import Actors, DedicatedLimits, DedicatedPool
from actors.host import SessionHost
from actors.live_sessions import LiveSessions
from actors.logs import default_logging
from actors.options import ACTOR_ERRORS, host_actor
from actors.ray_cluster import RayCluster
from actors.router import Router
from actors.spare_workers import REFRESH, prestart
from orchestrator.run.background import run_kept

__all__ = ["Supervisor"]

log = structlog.get_logger()
_ACTOR_ERRORS = ACTOR_ERRORS
HOST_START_LIMIT = 120.0
"""Seconds a dedicated host may take to start and answer (minutes of margin over the ~1 s it takes)."""
CALL_LIMIT = 10.0
"""Seconds the supervisor waits on a host's answer to a short call (adopt, yield, shutdown)."""


def _live_nodes() -> list[str]:
    nodes: list[dict[str, Any]] = cast(Any, ray).nodes()
    return [n["NodeID"] for n in nodes if n.get("Alive")]


def _node_alive(node: str | None) -> bool:
    return node is None or node in _live_nodes()


def _first_node(name: str) -> str | None:
    """The node a pooled host was first placed on (its name carries the id's first characters)."""
    for node in cast(Any, ray).nodes():
        if name.startswith(f"troupe-host-{node['NodeID'][:12]}-"):
            return str(node["NodeID"])
    return None


class Supervisor:
    """The directory, host watching and recovery, tree pause/resume (see the module docstring)."""

    def __init__(
        self,
        namespace: str,
        hosts: Sequence[str],
        placement: str,
        host_options: Any,
        warm: int = 2,
        limits: DedicatedLimits | None = None,
        spares: int = 1,
    ) -> None:
        default_logging()  # a process of its own: stderr, warnings, unless configured (actors.logs)
        self.namespace = namespace
        self.hosts = list(hosts)
        self.placement = placement
        self.host_options = host_options
        self.warm = warm
        self.router = Router(namespace, hosts, placement)
        self.directory = LiveSessions()
        self._versions: dict[str, tuple[float, int]] = {}
        self.recoveries: list[dict[str, Any]] = []
        self._watching: dict[str, asyncio.Task[None]] = {}
        self.pool = DedicatedPool(
            limits or DedicatedLimits(actors=8, warm=warm, keep=2 * warm),
            Actors(start=self._start_host, stop=self._stop_host, adopt=self._adopt, reclaim=self._reclaim),
        )
        self.started = time.time()
        self._starting: asyncio.Task[dict[str, Any]] | None = None
        self._nodes: dict[str, str | None] = {}
        self.spares = spares
        """Idle Ray workers kept started ahead on each hosts' node, for restarts (``actors.spare_workers``)."""
        self._spares: dict[str, int] = {"asked": 0, "refused": 0}
        self._spare_rounds: asyncio.Task[None] | None = None
        self._asking: set[asyncio.Future[None]] = set()
        with contextlib.suppress(RuntimeError):  # no running loop: a plain (test) instance
            # A restarted supervisor rebuilds its directory and watches the hosts again by itself.
            self._starting = asyncio.get_running_loop().create_task(self.start())

    # -- watching -----------------------------------------------------------------------------------

    async def start(self) -> dict[str, Any]:
        """Start watching every host and rebuild the directory (idempotent)."""
        await asyncio.gather(*(self._located(name) for name in self.hosts))
        for name in self.hosts:
            self._watch(name)
        if self.spares and self._spare_rounds is None:
            self._spare_rounds = asyncio.ensure_future(self._keep_spares())
        await self.rebuild()
        if self.placement == "dedicated":
            await self.pool.fill()
        return {"hosts": len(self.hosts), "sessions": len(self.directory)}

    def _watch(self, name: str) -> None:
        task = self._watching.get(name)
        if task is None or task.done():
            self._watching[name] = asyncio.ensure_future(self._watch_host(name))

    async def _located(self, name: str) -> None:
        # Bounded: a host whose node is gone may not answer at all (its watch then moves it).
        with contextlib.suppress(*_ACTOR_ERRORS, ValueError, TimeoutError):
            info = await asyncio.wait_for(self.router.host(name).ready.remote(), 5.0)
            self._nodes[name] = info.get("node")

    async def _watch_host(self, name: str) -> None:
        while True:
            try:
                await self.router.host(name).watch.remote()
            except _ACTOR_ERRORS as error:
                died = time.monotonic()
                log.warning("host_died", host=name, error=type(error).__name__)
                self.router.drop(name)
                try:
                    await self._revive(name)
                    # A restarted dedicated host has forgotten what it was given: give it again.
                    for session_id in self.pool.sessions_on(name):
                        await self._adopt(name, session_id)
                    recovered = await self.router.host(name).recover.remote()
                except Exception as failure:  # keep watching: the next restart gets another try
                    log.error("host_recovery_failed", host=name, error=str(failure))
                    await asyncio.sleep(0.5)
                    continue
                self.recoveries.append(
                    {"host": name, "sessions": len(recovered), "seconds": round(time.monotonic() - died, 3)}
                )
                node = self._nodes.get(name)
                if self.spares and node is not None:  # the restart took this node's spare: ask for the next
                    run_kept(self._asking, self._ask_spares([node]))
                log.info("host_recovered", host=name, sessions=len(recovered))
            except ValueError:  # the host does not exist (yet)
                await asyncio.sleep(0.2)

    async def _keep_spares(self) -> None:
        """Ask every hosts' node for its spare workers now, and again every ``REFRESH`` seconds."""
        while True:
            nodes = sorted({node for node in self._nodes.values() if node is not None}) or _live_nodes()
            await self._ask_spares(nodes)
            await asyncio.sleep(REFRESH)

    async def _ask_spares(self, nodes: Sequence[str]) -> None:
        for node in nodes:
            done = await asyncio.to_thread(prestart, node, self.spares)
            self._spares["asked" if done else "refused"] += self.spares

    async def _revive(self, name: str) -> None:
        """Wait for Ray to restart host ``name``, or move it if its node is gone."""
        deadline = time.monotonic() + 120
        # A restarted supervisor may not know where a host was: the node in its name is the guess.
        self._nodes.setdefault(name, _first_node(name))
        while time.monotonic() < deadline:
            if not _node_alive(self._nodes.get(name)):
                await self._move(name)  # its node is gone: re-create it on a live one
            try:
                await asyncio.wait_for(self.router.host(name).ready.remote(), 5.0)
                return
            except ray.exceptions.ActorUnschedulableError:
                await self._move(name)  # pinned to a node that is gone (Ray may not say so yet)
            except (*_ACTOR_ERRORS, ValueError, TimeoutError):  # type: ignore[misc]
                self.router.drop(name)
                await asyncio.sleep(0.1)
        raise TimeoutError(f"host {name!r} did not come back")

    async def _move(self, name: str) -> None:
        """Re-create host ``name`` on a live node (same name and options), the least loaded first."""
        with contextlib.suppress(Exception):
            ray.kill(ray.get_actor(name, namespace=self.namespace), no_restart=True)
        lost = self._nodes.get(name)
        counts: dict[str, int] = {}
        for node in _live_nodes():
            # A pooled host's name carries its first node's id: never move it back there.
            if node != lost and not name.startswith(f"troupe-host-{node[:12]}-"):
                counts[node] = sum(1 for h, n in self._nodes.items() if n == node and h != name)
        for target in sorted(counts, key=lambda n: counts[n]):
            for _ in range(100):  # the old name is free once Ray has cleaned up the dead actor
                try:
                    # Detached: a host the supervisor created must not die with the supervisor.
                    actor = host_actor(
                        SessionHost,
                        name=name,
                        namespace=self.namespace,
                        node_id=target,
                        detached=True,
                        get_if_exists=False,
                    )
                    handle = actor.remote(name, self.host_options, RayCluster)
                    break
                except ValueError:  # the dead one still holds the name
                    with contextlib.suppress(Exception):
                        ray.kill(ray.get_actor(name, namespace=self.namespace), no_restart=True)
                    await asyncio.sleep(0.1)
            else:
                continue
            try:
                await asyncio.wait_for(handle.ready.remote(), 30.0)
            except (*_ACTOR_ERRORS, TimeoutError):  # type: ignore[misc]
                with contextlib.suppress(Exception):
                    ray.kill(handle, no_restart=True)
                continue
            self._nodes[name] = target
            self.router.keep(name, handle)
            log.info("host_moved", host=name, node=target)
            return
        raise TimeoutError(f"no live node could take host {name!r}")

    async def rebuild(self) -> int:
        """Rebuild the directory from what every host says it has active."""
        for name in self.hosts:
            with contextlib.suppress(*_ACTOR_ERRORS, ValueError, TimeoutError):
                entries = await asyncio.wait_for(self.router.host(name).sessions.remote(), 5.0)
                self.directory.replace(name, entries)
        return len(self.directory)

    # -- the directory ---------------------------------------------------------------------------------

    @ray.method(max_task_retries=0)
    async def report(self, host: str, entries: dict[str, str], version: tuple[float, int] = (0.0, 0)) -> None:
        """A host's current active sessions (replaces what it reported before, unless older).

        Never retried, unlike the supervisor's other calls: the host's next report supersedes
        this one, and a restarted supervisor asks every host (``rebuild``). A retry would only
        bring an old report to a new supervisor, and when the supervisor is stopped with a
        report on its way Ray prints the retry on the user's terminal.
        """
        if tuple(version) <= self._versions.get(host, (-1.0, -1)):
            return  # a late report: a newer one already arrived
        self._versions[host] = tuple(version)  # type: ignore[assignment]
        self.directory.replace(host, entries)

    async def where(self, session_id: str) -> dict[str, Any] | None:
        """The directory entry of a live session: ``host``, ``agent`` and ``parent``."""
        return self.directory.where(session_id)

    async def tree(self, session_id: str) -> list[str]:
        """A session and its live descendants."""
        return self.directory.tree(session_id)

    async def info(self) -> dict[str, Any]:
        """What the supervisor knows."""
        return {
            "hosts": self.hosts,
            "placement": self.placement,
            "sessions": len(self.directory),
            "recoveries": list(self.recoveries),
            "pool": len(self.pool.free),
            "dedicated": self.pool.stats() if self.placement == "dedicated" else None,
            "started": self.started,  # a restart re-runs __init__: a new time
            "pid": os.getpid(),
            "spares": {"per_node": self.spares, **self._spares},
        }

    # -- dedicated placement ----------------------------------------------------------------------------

    async def assign(self, session_id: str, stale: str | None = None) -> tuple[str, Any]:
        """The host of ``session_id`` and its handle (dedicated placement: its own, ``DedicatedPool.assign``).

        ``stale``: the host the caller was sent to, which said it does not have the session.

        The handle goes along because the caller does not know a host it was just given: looking
        it up by name (``ray.get_actor``) is a blocking round trip to the GCS on the caller's loop
        (1.0 ms on an idle 2-vCPU VM; 8.6 ms of a delegate call's start, with the first submit, in
        a probe taken while another benchmark loaded the machine). The supervisor holds the
        handle of every host it started.

        Raises:
            DedicatedFull: no dedicated actor came free within the wait limit.
        """
        if self.placement != "dedicated":
            placed = self.router.place_now(session_id)
            assert placed is not None
            return placed, self.router.host(placed)
        name = await self.pool.assign(session_id, stale)
        return name, self.router.host(name)

    async def release(self, host: str, session_id: str) -> None:
        """A dedicated host's session deactivated: the host goes to the next waiter, the pool, or away."""
        self.pool.release(host, session_id)

    async def _adopt(self, name: str, session_id: str) -> None:
        await asyncio.wait_for(self.router.host(name).adopt.remote(session_id), CALL_LIMIT)

    async def _reclaim(self, names: list[str]) -> None:
        """Ask these hosts to deactivate their idle sessions that nobody follows (each releases its host)."""

        async def one(name: str) -> None:
            with contextlib.suppress(*_ACTOR_ERRORS, ValueError, TimeoutError):
                await asyncio.wait_for(self.router.host(name).yield_idle.remote(), CALL_LIMIT)

        await asyncio.gather(*(one(name) for name in names))

    async def _start_host(self) -> str:
        name = f"troupe-dedicated-{uuid.uuid4().hex[:12]}"
        actor = host_actor(SessionHost, name=name, namespace=self.namespace, node_id=None, detached=False)
        handle = actor.remote(name, self.host_options, RayCluster)
        try:
            # A warm host has imported everything before it is needed.
            await asyncio.wait_for(handle.ready.remote(), HOST_START_LIMIT)
        except BaseException:
            with contextlib.suppress(Exception):
                ray.kill(handle, no_restart=True)
            raise
        self.router.keep(name, handle)
        self.hosts.append(name)
        self._watch(name)
        return name

    async def _stop_host(self, name: str) -> None:
        """Stop a dedicated host for good: not watched, not listed, its handle forgotten."""
        task = self._watching.pop(name, None)
        if task is not None:
            task.cancel()
        if name in self.hosts:
            self.hosts.remove(name)
        with contextlib.suppress(Exception):
            handle = self.router.host(name)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(handle.shutdown.remote(), CALL_LIMIT)
            ray.kill(handle, no_restart=True)
        self.router.drop(name)

    # -- pause and resume -------------------------------------------------------------------------------

    async def control_tree(self, session_id: str, action: str, when: str = "now") -> list[str]:
        """Pause, resume or stop ``session_id``'s live descendants (the session itself is the caller's)."""
        touched = []
        for child in self.directory.tree(session_id)[1:]:
            entry = self.directory.get(child)
            if entry is None:
                continue
            with contextlib.suppress(*_ACTOR_ERRORS):
                await self.router.host(entry.host).control.remote(child, action, when)
                touched.append(child)
        return touched

    async def shutdown(self) -> None:
        """Stop watching (the runtime that created the hosts is exiting)."""
        for task in self._watching.values():
            task.cancel()
        await self.pool.close()
