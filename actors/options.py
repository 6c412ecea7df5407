"""Every Ray option Troupe uses, in one place: namespaces, names, restarts, concurrency, placement.

The actor classes are plain Python (``SessionHost``, ``Supervisor``); ``ray.remote`` is applied
to them here, the way Ray Serve keeps its controller a plain class.
"""

from __future__ import annotations

from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

__all__ = [
    "DEFAULT_NAMESPACE",
    "HOST_CONCURRENCY",
    "SUPERVISOR_NAME",
    "host_actor",
    "host_name",
    "supervisor_actor",
]

DEFAULT_NAMESPACE = "troupe"
"""The Ray namespace of a runtime's named actors (``Runtime(namespace=...)`` changes it)."""
SUPERVISOR_NAME = "troupe-supervisor"
"""The supervisor's actor name (one per namespace)."""
HOST_CONCURRENCY = 100_000
"""Concurrent calls a host accepts: long polls and child runs wait inside it, so this is high."""


def host_name(node: str, index: int) -> str:
    """The actor name of the ``index``-th host on ``node``."""
    return f"troupe-host-{node[:12]}-{index}"


def host_actor(cls: type, *, name: str, namespace: str, node_id: str | None, detached: bool) -> Any:
    """The Ray actor class for a session host.

    Restartable without limit (a crash re-runs ``__init__``, and the host re-activates its
    sessions from the store), one CPU-less process pinned softly to its node (on node loss it
    restarts elsewhere), with a high async concurrency for long polls.
    """
    options: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "max_restarts": -1,
        "max_task_retries": 0,
        "max_concurrency": HOST_CONCURRENCY,
        "num_cpus": 0,
        "get_if_exists": True,
    }
    if detached:
        options["lifetime"] = "detached"
    if node_id is not None:
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=True)
    return ray.remote(cls).options(**options)


def supervisor_actor(cls: type, *, namespace: str, detached: bool) -> Any:
    """The Ray actor class for the supervisor: named, detached, restartable, got if it exists."""
    options: dict[str, Any] = {
        "name": SUPERVISOR_NAME,
        "namespace": namespace,
        "max_restarts": -1,
        "max_task_retries": -1,
        "max_concurrency": HOST_CONCURRENCY,
        "num_cpus": 0,
        "get_if_exists": True,
    }
    if detached:
        options["lifetime"] = "detached"
    return ray.remote(cls).options(**options)
