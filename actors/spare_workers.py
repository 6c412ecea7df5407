"""Idle Ray workers started ahead on the hosts' nodes, so that a host's restart need not boot one.

When a host actor dies, Ray restarts it in a worker process; with no idle worker on the node it
starts a new one, and that process's boot (Python, ``import ray``, registering with its node)
was 0.46-0.57 s of a 1.0-1.3 s recovery on a 2-vCPU VM (``troupe bench actors``, its ``ray``
leg; ``actors.boot``). Ray starts idle workers ahead only when it starts, and on a node that
runs more actors than CPUs (two hosts and the supervisor on two cores) none is left idle. So the
supervisor asks each hosts' node for ``spares`` idle workers of its job, kept ``KEEP_ALIVE``
seconds from Ray's reaping of idle workers: at its start, after every recovery on that node, and
every ``REFRESH`` seconds (a spare some other task took is replaced then). A restart takes one:
the ``ray`` leg fell to 0.02-0.03 s, a recovery to 0.89-0.91 s. Each costs its idle process
(a Python with Ray imported: ~45 MB of its own) and ~1 CPU-second to start.

Ray's public API has no call for it: this uses the raylet's ``PrestartWorkers`` RPC (Ray 2.60,
which ``pyproject.toml`` pins), on a channel made the way Ray makes its own
(``ray._private.grpc_utils.init_grpc_channel``): with the cluster's auth token when token
authentication is on (Ray 2.60's default for a local cluster; a plain channel was refused as
``UNAUTHENTICATED``, and every recovery booted its own worker: 1.27 s against 0.27) and TLS when
``RAY_USE_TLS`` asks for it. If the call fails (another Ray, a node gone), nothing else does: a
restart then boots its own worker, as before.
"""

from __future__ import annotations

import importlib
from typing import Any, Final, cast

import ray
import structlog

__all__ = ["KEEP_ALIVE", "REFRESH", "prestart"]

log = structlog.get_logger()

KEEP_ALIVE: Final = 2 * 3600
"""Seconds Ray keeps a spare from its idle-worker reaping (then it is reaped like any other)."""
REFRESH: Final = 3600.0
"""Seconds between two rounds of spares (each round asks for ``spares`` more per node: at most
two rounds' worth are alive at once, since a spare outlives ``REFRESH`` by one round)."""
_CALL_LIMIT: Final = 10.0
"""Seconds one node's raylet has to answer."""


def prestart(node_id: str, count: int, keep_alive: int = KEEP_ALIVE) -> bool:
    """Ask node ``node_id``'s raylet to start ``count`` idle workers of this job now; whether it agreed.

    Blocking (a gRPC call): run it off the event loop (``asyncio.to_thread``). Never raises.
    """
    if count <= 0:
        return True
    try:
        # Ray's own gRPC stubs and channel maker (untyped): loaded by name, and only here.
        channels: Any = importlib.import_module("ray._private.grpc_utils")
        messages: Any = importlib.import_module("ray.core.generated.node_manager_pb2")
        stubs: Any = importlib.import_module("ray.core.generated.node_manager_pb2_grpc")
        from ray._private.utils import get_runtime_env_info
        from ray.runtime_env import RuntimeEnv

        nodes: list[dict[str, Any]] = cast(Any, ray).nodes()
        node = next((n for n in nodes if n["NodeID"] == node_id and n.get("Alive")), None)
        if node is None:
            return False
        request = messages.PrestartWorkersRequest(
            language=0,  # Python
            job_id=bytes.fromhex(ray.get_runtime_context().get_job_id()),
            runtime_env_info=get_runtime_env_info(RuntimeEnv()),
            keep_alive_duration_secs=keep_alive,
            num_workers=count,
        )
        with channels.init_grpc_channel(f"{node['NodeManagerAddress']}:{node['NodeManagerPort']}") as channel:
            stubs.NodeManagerServiceStub(channel).PrestartWorkers(request, timeout=_CALL_LIMIT)
        return True
    except Exception as error:  # an optimisation only: a restart then boots its own worker
        log.warning("spare_workers_unavailable", node=node_id[:12], error=f"{type(error).__name__}: {error}")
        return False
