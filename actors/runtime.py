"""``Runtime``: start (or join) Ray, run the session hosts and the supervisor, hand out sessions.

::

    async with Runtime(store="sqlite:///troupe.db") as rt:   # local Ray; address="auto" joins a cluster
        session = rt.session("s-1", agent=shopper)
        turn = await session.prompt("Add two mugs to the cart")
        result = await turn.finished

A runtime shuts down only what it started: the Ray it started itself (``ray.shutdown``), and the
actors it owns in its namespace. Joining a cluster (``address=...``) creates hosts that are
detached, so sessions outlive the driver; a second driver in the same namespace reuses them.
For scripts and notebooks, ``Runtime.sync(...)`` gives the same API without ``await``.

Who owns the hosts and the supervisor is explicit (``owns``). By default a runtime owns what it
created itself, and only in a driver: the process that started Ray or joined it. Inside a Ray
worker (a task, an actor, a Serve replica, a Ray Data UDF) a runtime attaches to the Ray it runs
in (no ``ray.init``), creates the namespace's hosts and supervisor detached if they are missing,
and stops nothing on close: a pipeline's many runtimes share them, and one that closes must not
stop what the others use. Which runtime created an actor is settled by Ray's name registry
(creating a named actor whose name is taken fails), never by a look-before-create that two
runtimes could both pass. ``owns=True`` asks a runtime to stop the namespace's hosts and
supervisor on close whoever created them (the driver of a pipeline whose tasks made them);
``owns=False`` leaves everything running.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import ray
import structlog

from actors.base import BaseRuntime
from actors.client import Session
from actors.dedicated import DedicatedLimits, default_max_actors
from actors.host import SessionHost
from actors.host_options import HostOptions
from actors.memory import TRIM_EVERY
from actors.options import (
    ACTOR_ERRORS,
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
from actors.registry import AgentRegistry, agent_blob
from actors.router import Router
from actors.store_feed import FOLLOW_MODES
from actors.supervisor import Supervisor
from orchestrator.core.errors import UsageError
from orchestrator.run.agent import Agent
from orchestrator.run.pacing import DEFAULT_BUDGET, FIRST_FLUSH, NESTED_DELAY
from orchestrator.store import open_store
from orchestrator.store.base import EventStore

__all__ = ["Runtime", "SyncRuntime", "absolute_store", "in_ray_worker"]

log = structlog.get_logger()
T = TypeVar("T")


def absolute_store(url: str) -> str:
    """Every host process must open the same file: make a relative SQLite path absolute.

    A ``sharded://`` URL gets the same for each of its shards.
    """
    sharded = "sharded://"
    if url.startswith(sharded):
        return sharded + "|".join(absolute_store(part) if part else part for part in url[len(sharded) :].split("|"))
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
        flush_interval: float = FIRST_FLUSH,
        flush_every: float = 0.02,
        flush_parts: int = 256,
        flush_budget: float = DEFAULT_BUDGET,
        nested_delay: float = NESTED_DELAY,
        children: Literal["spread", "local"] = "local",
        warm: int = 2,
        max_dedicated: int | None = None,
        dedicated_wait: float = 120.0,
        sqlite_writer: Literal["thread", "inline"] = "inline",
        follow: Literal["hosts", "store"] = "hosts",
        ray_options: dict[str, Any] | None = None,
        owns: bool | None = None,
        trim_every: float = TRIM_EVERY,
        interest_seconds: float = 30.0,
        spare_workers: int = 1,
    ) -> None:
        if placement not in ("pooled", "dedicated"):
            raise UsageError(f"placement must be 'pooled' or 'dedicated', not {placement!r}")
        self.store_url = absolute_store(store)
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
        if max_dedicated is not None and max_dedicated < 1:
            raise UsageError(
                f"max_dedicated must be at least 1 (or None: from the cluster's CPUs), not {max_dedicated}"
            )
        if dedicated_wait <= 0:
            raise UsageError(f"dedicated_wait must be a positive number of seconds, not {dedicated_wait}")
        self.max_dedicated = max_dedicated
        self.dedicated_wait = dedicated_wait
        if sqlite_writer not in ("thread", "inline"):
            raise UsageError(f"sqlite_writer must be 'thread' or 'inline', not {sqlite_writer!r}")
        self.sqlite_writer = sqlite_writer
        if follow not in FOLLOW_MODES:
            raise UsageError(f"follow must be 'hosts' or 'store', not {follow!r}")
        self.follow = follow
        if isinstance(trim_every, bool) or not isinstance(trim_every, int | float):
            raise UsageError(f"trim_every must be a number of seconds (negative: never trim), not {trim_every!r}")
        self.trim_every = float(trim_every)
        if isinstance(interest_seconds, bool) or not isinstance(interest_seconds, int | float) or interest_seconds <= 0:
            raise UsageError(f"interest_seconds must be a positive number of seconds, not {interest_seconds!r}")
        self.interest_seconds = float(interest_seconds)
        if isinstance(spare_workers, bool) or not isinstance(spare_workers, int) or spare_workers < 0:
            raise UsageError(f"spare_workers must be a whole number per node (0: none), not {spare_workers!r}")
        self.spare_workers = spare_workers
        super().__init__()
        self.ray_options = dict(ray_options or {})
        self.owns = owns
        """Whether close() stops the namespace's actors: ``None`` = those it created, in a driver."""
        self.host_names: list[str] = []
        self.router: Router = Router(self.namespace, [], placement)
        self.supervisor: Any = None
        self.store: EventStore = open_store(self.store_url)
        self._started_ray = False
        self._per_node: int | None = hosts_per_node
        self._created: list[str] = []  # the names of the actors this runtime created
        self._held: list[Any] = []  # handles kept alive: a non-detached actor dies with its last handle
        self._options: HostOptions | None = None
        self._blobs: dict[str, bytes] = {}
        self.transport: RayTransport = RayTransport(self.router, None)
        self._registry = AgentRegistry(self.store, RAY_PICKLE)

    def _agent_key(self, agent: Agent) -> str:
        key, data = agent_blob(agent, RAY_PICKLE)  # pickled once per agent object, checked at once
        self._blobs[key] = data
        return key

    async def _register_agent(self, key: str, agent: Agent) -> None:
        if self.placement == "dedicated":
            # Into the store from here: a host would have to take a dedicated actor for it.
            await self._registry.register(key, self._blobs[key])
            return
        await self.transport.register_agent(key, self._blobs[key])

    async def __aenter__(self) -> Runtime:
        await self.start()
        return self

    async def start(self) -> None:
        """Start or join Ray, then create (or find) the hosts and the supervisor.

        Inside a Ray worker Ray is already up: the runtime attaches to it and creates what is
        missing detached (it must outlive the task that created it).

        Raises:
            StoreError: the store cannot be reached (checked first, before anything starts: one
                clear error naming the URL, rather than every host failing later).
        """
        await self.store.list_sessions(limit=1)
        if not ray.is_initialized():
            options = own_ray_options(self.address, self.ray_options)
            ray.init(address=self.address, namespace=self.namespace, **options)
            self._started_ray = True
            # Where to find (and, after a killed driver, clean up) this Ray's processes: README.
            log.info("ray_started", session=_session_name())
        worker = in_ray_worker()
        detached = self.address is not None or worker or self.owns is False
        owns_created = self.owns is not False and (not worker or self.owns is True)
        nodes = [n for n in _nodes() if n.get("Alive")]
        warning = shared_file_warning(self.store_url, len(nodes))
        if warning is not None:
            log.warning("sqlite_store_on_a_cluster", store=self.store_url, nodes=len(nodes), fix=warning)
        per_node = self.hosts_per_node or max(2, int(min(n["Resources"].get("CPU", 1) for n in nodes)))
        self._per_node = per_node
        names: list[tuple[str, str | None]] = []
        if self.placement == "pooled":
            for node in nodes:
                for i in range(per_node):
                    names.append((host_name(node["NodeID"], i), node["NodeID"]))
            known = _actor(SUPERVISOR_NAME, self.namespace)
            if known is not None:
                # A driver joining a namespace that runs already routes over the hosts the others
                # route over (the supervisor's list), not over the nodes alive now: after a node was
                # lost, its hosts live on elsewhere under their old names, and a session must not be
                # activated on two hosts at once.
                hosts: list[str] = (await known.info.remote())["hosts"]
                names = [(name, None) for name in hosts]
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
            trim_every=self.trim_every,
            interest_seconds=self.interest_seconds,
            extra={"hosts": self.host_names, "children": self.children},
        )
        self.router = Router(self.namespace, self.host_names, self.placement, children=self.children)
        handles = []
        for name, node_id in names:

            def host(get_if_exists: bool, name: str = name, node_id: str | None = node_id) -> Any:
                actor = host_actor(
                    SessionHost,
                    name=name,
                    namespace=self.namespace,
                    node_id=node_id,
                    detached=detached,
                    get_if_exists=get_if_exists,
                )
                return actor.remote(name, self._options, RayCluster)

            handle, created = _create_or_get(host, name, self.namespace)
            if created and owns_created:
                self._created.append(name)
            handles.append(handle)
        self._held = handles

        def supervisor(get_if_exists: bool) -> Any:
            actor = supervisor_actor(
                Supervisor,
                namespace=self.namespace,
                detached=detached,
                node_id=head_node(),
                get_if_exists=get_if_exists,
            )
            return actor.remote(
                self.namespace,
                self.host_names,
                self.placement,
                self._options,
                self.warm,
                self.dedicated_limits(),
                self.spare_workers,
            )

        # Its process starts while the hosts' do (its constructor needs only their names); it
        # starts watching them once they are ready. One after the other, a runtime took ~2.1 s to
        # start on a 2-vCPU VM, the hosts ~1.1 of it.
        self.supervisor, created = _create_or_get(supervisor, SUPERVISOR_NAME, self.namespace)
        if created and owns_created:
            self._created.append(SUPERVISOR_NAME)
        if self.owns is True:  # asked to stop the namespace's actors, whoever created them
            self._created = [*self.host_names, SUPERVISOR_NAME]
        await asyncio.gather(*(h.ready.remote() for h in handles))
        await self.supervisor.start.remote()
        self.transport = RayTransport(self.router, self.supervisor)
        log.info(
            "runtime_started",
            namespace=self.namespace,
            hosts=len(self.host_names),
            placement=self.placement,
            in_worker=worker,
            owns=list(self._created),
        )

    async def close(self) -> None:
        """Stop what this runtime owns (and nothing else): see the module docstring."""
        await self._close_pollers()
        if self._created and ray.is_initialized():
            log.info("runtime_stopping", namespace=self.namespace, actors=list(self._created))
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
            for handle in hosts:
                with contextlib.suppress(Exception):
                    ray.kill(handle, no_restart=True)
            # The supervisor goes last, once the hosts are gone: a host's call to it would otherwise
            # be retried against a dead supervisor, and Ray prints that retry on the user's
            # terminal. A dead host's calls die with it; a report is never retried at all
            # (``Supervisor.report``: one may still be on its way from a host that is going).
            if hosts:
                await asyncio.wait([asyncio.ensure_future(_gone(h)) for h in hosts], timeout=10)
            with contextlib.suppress(Exception):
                ray.kill(self.supervisor, no_restart=True)
        self._created.clear()
        self._held.clear()
        await self.store.close()
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    def dedicated_limits(self) -> DedicatedLimits:
        """The dedicated pool's limits: ``max_dedicated`` or a default from the cluster's CPUs and memory."""
        resources: dict[str, float] = cast(Any, ray).cluster_resources()
        cpus = resources.get("CPU", 1.0)
        actors = self.max_dedicated or default_max_actors(cpus, resources.get("memory", 0.0))
        return DedicatedLimits(
            actors=actors,
            wait=self.dedicated_wait,
            starts=max(1, int(cpus)),
            warm=min(self.warm, actors),
            keep=actors,  # a start costs ~1 CPU-second; an idle warm actor ~0.6 % of a core
            linger=self.idle_timeout,  # then a quiet pool shrinks back to its warm actors
        )

    def worker_options(self) -> dict[str, Any]:
        """What a runtime in a Ray worker needs to reach this one's hosts and sessions.

        ``Runtime(**rt.worker_options())`` in a task or actor attaches to the same namespace,
        store and host layout (sessions are routed by id over the host names, so every runtime
        of a namespace must count the same hosts). It owns nothing.
        """
        return {
            "store": self.store_url,
            "namespace": self.namespace,
            "placement": self.placement,
            "hosts_per_node": self._per_node,
            "children": self.children,
            "idle_timeout": self.idle_timeout,
            "flush_interval": self.flush_interval,
            "flush_every": self.flush_every,
            "flush_parts": self.flush_parts,
            "flush_budget": self.flush_budget,
            "nested_delay": self.nested_delay,
            "sqlite_writer": self.sqlite_writer,
            "warm": self.warm,
            "spare_workers": self.spare_workers,
            "max_dedicated": self.max_dedicated,
            "dedicated_wait": self.dedicated_wait,
            "trim_every": self.trim_every,
            "interest_seconds": self.interest_seconds,
        }

    # -- operations --------------------------------------------------------------------------------

    async def hosts(self) -> list[Any]:
        """The handles of every host: the pooled ones, or the dedicated ones live now (inspection, tests)."""
        names = self.host_names
        if self.placement == "dedicated" and self.supervisor is not None:
            names = (await self.supervisor.info.remote())["hosts"]
        return [self.router.host(n) for n in names]

    async def deactivate_idle(self) -> int:
        """Deactivate every session with nothing to do (memory checks, tests)."""
        counts = await asyncio.gather(*(h.deactivate_idle.remote() for h in await self.hosts()), return_exceptions=True)
        for count in counts:  # a dedicated host may be stopped meanwhile (released to a full pool)
            if isinstance(count, BaseException) and not isinstance(count, ACTOR_ERRORS):
                raise count
        return sum(c for c in counts if isinstance(c, int))

    @classmethod
    def sync(cls, store: str = "sqlite:///troupe.db", **options: Any) -> SyncRuntime:
        """The same runtime for code without an event loop (scripts, notebooks)."""
        return SyncRuntime(cls(store, **options))


def shared_file_warning(store_url: str, nodes: int) -> str | None:
    """What to do instead, when a cluster of several nodes is given one SQLite file (else ``None``).

    A warning, not a refusal: nodes on one machine (a test's ``Cluster``) do share the file, but
    the nodes of a real cluster each see a file of their own, and sessions would split between them.
    """
    if nodes > 1 and store_url.startswith("sqlite:"):
        return (
            f"{nodes} nodes share a SQLite store, which only works if they are on one machine: "
            "give every node one PostgreSQL store (store='postgresql://…', or TROUPE_STORE)"
        )
    return None


async def _gone(handle: Any) -> None:
    """Return once the killed actor ``handle`` answers no more (``ray.kill`` takes effect asynchronously)."""
    with contextlib.suppress(Exception):  # a dead actor's call raises: that is the answer awaited
        for _ in range(100):
            await asyncio.wait_for(handle.ready.remote(), 5)
            await asyncio.sleep(0.05)


def _nodes() -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = cast(Any, ray).nodes()
    return listed


def _actor(name: str, namespace: str) -> Any:
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError:
        return None


def in_ray_worker() -> bool:
    """Whether this process is a Ray worker (a task, an actor, a Serve replica), not a driver."""
    return bool(ray.is_initialized() and cast(Any, ray.get_runtime_context()).worker.mode == ray.WORKER_MODE)


def _create_or_get(create: Callable[[bool], Any], name: str, namespace: str) -> tuple[Any, bool]:
    """The named actor ``create(get_if_exists)`` makes, and whether this call created it.

    Ray's name registry decides: creating under a name that is taken fails (``ValueError``), so
    of several runtimes starting at once exactly one is the creator. An actor that died between
    the failed create and the lookup is created again (``get_if_exists``: by whoever gets there).
    """
    for _ in range(100):
        try:
            return create(False), True
        except ValueError:
            existing = _actor(name, namespace)
            if existing is not None:
                return existing, False
    return create(True), False


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
