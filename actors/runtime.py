"""``Runtime``: start (or join) Ray, run the session hosts and the supervisor, hand out sessions.

::

    async with Runtime(store="sqlite:///troupe.db") as rt:   # local Ray; address="auto" joins a cluster
        session = rt.session("s-1", agent=shopper)
        turn = await session.prompt("Add two mugs to the cart")
        result = await turn.finished

A runtime shuts down only what it started: the Ray it started itself (``ray.shutdown``), and the
actors it created in its namespace. Joining a cluster (``address=...``) creates hosts that are
detached, so sessions outlive the driver; a second driver in the same namespace reuses them.
For scripts and notebooks, ``Runtime.sync(...)`` gives the same API without ``await``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import ray
import structlog

from actors.base import BaseRuntime
from actors.client import Session
from actors.host import HostOptions, SessionHost
from actors.options import (
    DEFAULT_NAMESPACE,
    SUPERVISOR_NAME,
    head_node,
    host_actor,
    host_name,
    own_ray_options,
    supervisor_actor,
)
from actors.ray_cluster import RAY_PICKLE, RayCluster
from actors.ray_transport import RayTransport
from actors.registry import agent_blob
from actors.router import Router
from actors.supervisor import Supervisor
from orchestrator.core.errors import UsageError
from orchestrator.run.agent import Agent
from orchestrator.store import open_store
from orchestrator.store.base import EventStore

__all__ = ["Runtime", "SyncRuntime"]

log = structlog.get_logger()
T = TypeVar("T")


def _absolute_store(url: str) -> str:
    """Every host process must open the same file: make a relative SQLite path absolute."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/") and ":memory:" not in url:
        return prefix + str(Path(url[len(prefix) :]).resolve())
    if url.startswith("memory://"):
        raise UsageError(
            "store='memory://' cannot be shared by Ray actors (each process would have its own); "
            "use store='sqlite:///troupe.db' (the default) or a PostgreSQL URL"
        )
    return url


def _session_name() -> str | None:
    """This Ray's session name (``session_<date>_<pid>``): every process of that Ray has it in its command line."""
    try:
        return str(ray.get_runtime_context().get_session_name())
    except Exception:  # not a driver, or another Ray version: only a log field is lost
        return None


class Runtime(BaseRuntime):
    """The Ray runtime (see the module docstring)."""

    def __init__(
        self,
        store: str = "sqlite:///troupe.db",
        *,
        address: str | None = None,
        placement: Literal["pooled", "dedicated"] = "pooled",
        namespace: str | None = None,
        hosts_per_node: int | None = None,
        idle_timeout: float = 300.0,
        flush_interval: float = 0.004,
        flush_every: float = 0.02,
        flush_parts: int = 256,
        flush_budget: float = 1000.0,
        nested_delay: float = 0.01,
        children: Literal["spread", "local"] = "local",
        warm: int = 2,
        sqlite_writer: Literal["thread", "inline"] = "inline",
        ray_options: dict[str, Any] | None = None,
    ) -> None:
        if placement not in ("pooled", "dedicated"):
            raise UsageError(f"placement must be 'pooled' or 'dedicated', not {placement!r}")
        self.store_url = _absolute_store(store)
        self.address = address
        self.placement = placement
        self.namespace = namespace or DEFAULT_NAMESPACE
        self.hosts_per_node = hosts_per_node
        self.idle_timeout = idle_timeout
        self.flush_interval = flush_interval
        self.flush_every = flush_every
        self.flush_parts = flush_parts
        self.flush_budget = flush_budget
        self.nested_delay = nested_delay
        if children not in ("spread", "local"):
            raise UsageError(f"children must be 'local' or 'spread', not {children!r}")
        self.children = children
        self.warm = warm
        if sqlite_writer not in ("thread", "inline"):
            raise UsageError(f"sqlite_writer must be 'thread' or 'inline', not {sqlite_writer!r}")
        self.sqlite_writer = sqlite_writer
        super().__init__()
        self.ray_options = dict(ray_options or {})
        self.host_names: list[str] = []
        self.router: Router = Router(self.namespace, [], placement)
        self.supervisor: Any = None
        self.store: EventStore = open_store(self.store_url)
        self._started_ray = False
        self._created: list[str] = []  # the names of the actors this runtime created
        self._held: list[Any] = []  # handles kept alive: a non-detached actor dies with its last handle
        self._options: HostOptions | None = None
        self._blobs: dict[str, bytes] = {}
        self.transport: RayTransport = RayTransport(self.router, None)

    def _agent_key(self, agent: Agent) -> str:
        key, data = agent_blob(agent, RAY_PICKLE)  # pickled once per agent object, checked at once
        self._blobs[key] = data
        return key

    async def _register_agent(self, key: str, agent: Agent) -> None:
        await self.transport.register_agent(key, self._blobs[key])

    async def __aenter__(self) -> Runtime:
        await self.start()
        return self

    async def start(self) -> None:
        """Start or join Ray, then create (or find) the hosts and the supervisor."""
        if not ray.is_initialized():
            options = own_ray_options(self.address, self.ray_options)
            ray.init(address=self.address, namespace=self.namespace, **options)
            self._started_ray = True
            # Where to find (and, after a killed driver, clean up) this Ray's processes: README.
            log.info("ray_started", session=_session_name())
        detached = self.address is not None
        nodes = [n for n in _nodes() if n.get("Alive")]
        per_node = self.hosts_per_node or max(2, int(min(n["Resources"].get("CPU", 1) for n in nodes)))
        names: list[tuple[str, str]] = []
        if self.placement == "pooled":
            for node in nodes:
                for i in range(per_node):
                    names.append((host_name(node["NodeID"], i), node["NodeID"]))
        self.host_names = [n for n, _ in names]
        self._options = HostOptions(
            store=self.store_url,
            namespace=self.namespace,
            placement=self.placement,
            idle_timeout=self.idle_timeout,
            flush_interval=self.flush_interval,
            flush_every=self.flush_every,
            flush_parts=self.flush_parts,
            flush_budget=self.flush_budget,
            nested_delay=self.nested_delay,
            sqlite_writer=self.sqlite_writer,
            extra={"hosts": self.host_names, "children": self.children},
        )
        self.router = Router(self.namespace, self.host_names, self.placement, children=self.children)
        handles = []
        for name, node_id in names:
            existed = _exists(name, self.namespace)
            actor = host_actor(SessionHost, name=name, namespace=self.namespace, node_id=node_id, detached=detached)
            handle = actor.remote(name, self._options, RayCluster)
            if not existed:
                self._created.append(name)
            handles.append(handle)
        self._held = handles
        await asyncio.gather(*(h.ready.remote() for h in handles))
        existed = _exists(SUPERVISOR_NAME, self.namespace)
        supervisor = supervisor_actor(Supervisor, namespace=self.namespace, detached=detached, node_id=head_node())
        self.supervisor = supervisor.remote(self.namespace, self.host_names, self.placement, self._options, self.warm)
        if not existed:
            self._created.append(SUPERVISOR_NAME)
        await self.supervisor.start.remote()
        self.transport = RayTransport(self.router, self.supervisor)
        log.info("runtime_started", namespace=self.namespace, hosts=len(self.host_names), placement=self.placement)

    async def close(self) -> None:
        """Stop what this runtime started (and nothing else)."""
        await self._close_pollers()
        if self._created and ray.is_initialized():
            with contextlib.suppress(Exception):
                await self.supervisor.shutdown.remote()
            names = [n for n in self._created if n != SUPERVISOR_NAME]
            with contextlib.suppress(Exception):
                info = await asyncio.wait_for(self.supervisor.info.remote(), 10)
                names += [n for n in info["hosts"] if n not in self.host_names]  # dedicated hosts
            # By name: a host the supervisor moved to another node is a new actor under the old name.
            hosts = [h for h in (_actor(n, self.namespace) for n in names) if h is not None]
            stopping = [asyncio.ensure_future(h.shutdown.remote()) for h in hosts]
            if stopping:
                await asyncio.wait(stopping, timeout=30)
            for handle in [*hosts, self.supervisor]:
                with contextlib.suppress(Exception):
                    ray.kill(handle, no_restart=True)
        self._created.clear()
        self._held.clear()
        await self.store.close()
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    # -- operations --------------------------------------------------------------------------------

    async def hosts(self) -> list[Any]:
        """The handles of every pooled host (for inspection and tests)."""
        return [self.router.host(n) for n in self.host_names]

    async def deactivate_idle(self) -> int:
        """Deactivate every session with nothing to do (memory checks, tests)."""
        counts = await asyncio.gather(*(h.deactivate_idle.remote() for h in await self.hosts()))
        return sum(counts)

    @classmethod
    def sync(cls, store: str = "sqlite:///troupe.db", **options: Any) -> SyncRuntime:
        """The same runtime for code without an event loop (scripts, notebooks)."""
        return SyncRuntime(cls(store, **options))


def _nodes() -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = cast(Any, ray).nodes()
    return listed


def _actor(name: str, namespace: str) -> Any:
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError:
        return None


def _exists(name: str, namespace: str) -> bool:
    return _actor(name, namespace) is not None


class SyncRuntime:
    """``Runtime`` without ``await``: it runs its own event loop on a background thread."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="troupe-runtime", daemon=True)
        self._thread.start()
        self.run(runtime.start())

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the runtime's loop and wait for it."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def session(self, session_id: str, *, agent: Agent) -> SyncSession:
        """A blocking session handle."""
        return SyncSession(self, self.runtime.session(session_id, agent=agent))

    def close(self) -> None:
        """Stop the runtime and its loop."""
        self.run(self.runtime.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def __enter__(self) -> SyncRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncSession:
    """``Session`` without ``await``; ``prompt`` waits for the turn and returns its result."""

    def __init__(self, runtime: SyncRuntime, session: Session) -> None:
        self._runtime = runtime
        self.session = session
        self.id = session.id

    def prompt(self, text: str, **options: Any) -> Any:
        """Send and wait for the turn's result (success, error, text)."""

        async def go() -> Any:
            turn = await self.session.prompt(text, **options)
            return await turn.finished

        return self._runtime.run(go())

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.session, name)
        if not callable(method):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            return self._runtime.run(result) if asyncio.iscoroutine(result) else result

        return call
