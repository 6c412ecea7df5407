"""Every Ray option Troupe uses, in one place: namespaces, names, restarts, concurrency, placement.

The actor classes are plain Python (``SessionHost``, ``Supervisor``); ``ray.remote`` is applied
to them here, the way Ray Serve keeps its controller a plain class.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

__all__ = [
    "ACTOR_ERRORS",
    "DEFAULT_NAMESPACE",
    "HOST_CONCURRENCY",
    "OWN_RAY_OPTIONS",
    "OWN_RAY_SYSTEM_CONFIG",
    "PRELOAD_MODULES",
    "SUPERVISOR_NAME",
    "actor_class",
    "head_node",
    "host_actor",
    "host_name",
    "own_ray_options",
    "supervisor_actor",
]

ACTOR_ERRORS: tuple[type[Exception], ...] = (
    ray.exceptions.RayActorError,
    ray.exceptions.ActorUnavailableError,
    ray.exceptions.ActorUnschedulableError,
)
"""What a call to an actor that died, is restarting or is being moved raises: retry after a wait."""

DEFAULT_NAMESPACE = "troupe"
"""The Ray namespace of a runtime's named actors (``Runtime(namespace=...)`` changes it)."""
SUPERVISOR_NAME = "troupe-supervisor"
"""The supervisor's actor name (one per namespace)."""
HOST_CONCURRENCY = 100_000
"""Concurrent calls a host accepts: long polls and child runs wait inside it, so this is high."""


def own_ray_options(address: str | None, given: dict[str, Any]) -> dict[str, Any]:
    """``ray.init`` options for the Ray a ``Runtime`` starts itself: what sessions need, nothing more.

    ``given`` (``Runtime(ray_options=...)``) wins. Ray 2.60 always starts its per-node agents
    (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``: the raylet refuses to start without
    them), so what can be left out is left out: the dashboard (``include_dashboard=True``
    asks for it), the metrics those agents would collect and export, the task timeline, and
    the driver's copy of every worker's log. The system config applies only to a Ray this call
    starts: joining a running one (``address`` or ``$RAY_ADDRESS``) takes none (start it with
    ``RAY_preload_python_modules=actors.preload ray start ...`` for ``PRELOAD_MODULES``).
    """
    options = {**OWN_RAY_OPTIONS, **given}
    starts = address in (None, "local") and not os.environ.get("RAY_ADDRESS")
    if starts:
        options["_system_config"] = {**OWN_RAY_SYSTEM_CONFIG, **given.get("_system_config", {})}
    return options


OWN_RAY_OPTIONS: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
"""No dashboard (a process and a port per cluster, for a UI Troupe does not use); worker logs
stay in the session's log files instead of being streamed to the driver."""
PRELOAD_MODULES: tuple[str, ...] = ("actors.preload",)
"""What each Python worker of a Ray the runtime starts imports before it takes work (Ray's
``preload_python_modules``): the host and supervisor classes and everything they import, then a
collection and ``gc.freeze`` (``actors.preload``). An idle worker (``actors.spare_workers``) then
has Troupe loaded before a crash, and a restarted host skips the imports: on a 2-vCPU VM a
recovery fell from 0.55-0.89 s to 0.23-0.33 s (``troupe bench actors``), and its ``__init__`` skips
a full collection (~40 ms). Each worker costs ~10 MB more (67 MB of its own against 58, idle) and
~0.3 s more to start; a worker that then runs a host or the supervisor would import the same anyway."""
OWN_RAY_SYSTEM_CONFIG: dict[str, Any] = {
    "enable_metrics_collection": False,
    "enable_timeline": False,
    "preload_python_modules": list(PRELOAD_MODULES),
}
"""No metrics collection or export (the agents' busiest work, for a Prometheus nobody reads),
no task timeline, and Troupe imported into every worker ahead (``PRELOAD_MODULES``)."""


def head_node() -> str | None:
    """The id of the cluster's head node (None if Ray does not say)."""
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    for node in nodes:
        if node.get("Alive") and "node:__internal_head__" in node.get("Resources", {}):
            return str(node["NodeID"])
    return None


def host_name(node: str, index: int) -> str:
    """The actor name of the ``index``-th host on ``node``."""
    return f"troupe-host-{node[:12]}-{index}"


def host_actor(
    cls: type, *, name: str, namespace: str, node_id: str | None, detached: bool, get_if_exists: bool = True
) -> Any:
    """The Ray actor class for a session host.

    Restartable without limit (a crash re-runs ``__init__``, and the host re-activates its
    sessions from the store), one CPU-less process pinned to a node (the supervisor moves it
    when the node is lost), with a high async concurrency for long polls.
    """
    # A crash restarts it on its node; if the node itself is lost, the supervisor re-creates the
    # host, under the same name, on a live node.
    return _named_actor(
        cls, name, namespace, max_task_retries=0, get_if_exists=get_if_exists, detached=detached, node_id=node_id
    )


def supervisor_actor(
    cls: type, *, namespace: str, detached: bool, node_id: str | None = None, get_if_exists: bool = True
) -> Any:
    """The Ray actor class for the supervisor: named, detached, restartable, got if it exists.

    Pinned to ``node_id`` (the head node, as Ray Serve pins its controller): the supervisor must
    not be on a node it is there to recover from.
    """
    return _named_actor(
        cls,
        SUPERVISOR_NAME,
        namespace,
        max_task_retries=-1,
        get_if_exists=get_if_exists,
        detached=detached,
        node_id=node_id,
    )


def _named_actor(
    cls: type,
    name: str,
    namespace: str,
    *,
    max_task_retries: int,
    get_if_exists: bool,
    detached: bool,
    node_id: str | None,
) -> Any:
    """A named, restartable, CPU-less actor with a high async concurrency, optionally pinned."""
    options: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "max_restarts": -1,
        "max_task_retries": max_task_retries,
        "get_if_exists": get_if_exists,
        **_served(node_id),
    }
    if detached:
        options["lifetime"] = "detached"
    return actor_class(cls).options(**options)


def _served(node_id: str | None) -> dict[str, Any]:
    """The options of an actor that serves calls as a host does.

    CPU-less, a high async concurrency, no task events, and pinned to ``node_id`` (unless ``None``).
    """
    options: dict[str, Any] = {
        "max_concurrency": HOST_CONCURRENCY,
        "num_cpus": 0,
        # No per-call task events (as Ray Serve does for its replicas): the GCS would keep a
        # record of every poll, command and batch, growing with traffic.
        "enable_task_events": False,
    }
    if node_id is not None:
        # Pinned to its node: a soft affinity was not reliably honoured at creation.
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=False)
    return options


def probe_actor(cls: type, *, node_id: str) -> Any:
    """An unnamed actor class made as a host's is (``_served``), pinned to ``node_id``.

    For measuring Ray's own calls beside Troupe's (``actors.bench.ray_call``).
    """
    return actor_class(cls).options(**_served(node_id))


@functools.cache
def actor_class(cls: type) -> Any:
    """``ray.remote(cls)``, made once per class in a process.

    Ray exports an actor class the first time one of its actors is created, and again for every
    new ``ray.remote(cls)``: the export fingerprints the class by disassembling the bytecode of
    every method (``compute_collision_identifier``). For ``SessionHost`` that held the caller's
    loop 52-143 ms (probe, eight dedicated hosts started by the supervisor on a 2-vCPU VM), and the
    supervisor made one for every host it started. Made once, the class is exported once per Ray
    job; ``.options`` gives each actor its name.
    """
    return ray.remote(cls)
