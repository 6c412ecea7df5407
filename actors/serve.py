"""The Ray Serve door: an ingress deployment whose replicas each serve an ASGI app on an attached runtime.

``ingress_app(build, runtime_options, ...)`` returns a bound Serve application: every replica
starts a ``Runtime(**runtime_options)`` (in a replica, a worker: it attaches to the Ray it runs
in, shares the namespace's hosts and supervisor, and stops nothing on close; ``actors.runtime``)
and serves ``build(runtime)``, an ASGI app, through Serve's HTTP proxy (FastAPI ingress). All
replicas reach the same sessions: they route by session id over the same hosts, on one store.
Every response carries ``x-troupe-replica`` (the replica that answered).

Troupe's HTTP API is built by ``orchestrator.surfaces.serve`` (``troupe_app``, and the
``serve run orchestrator.surfaces.serve:app config=...`` target), which may import both this
module and the HTTP surface; this module names no surface: it takes the app's builder.

Ray Serve is imported by this module only (``pip install 'raytroupe[serve]'``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import ray
from ray import serve
from ray.serve import Application

from actors.runtime import Runtime

__all__ = ["REPLICA_HEADER", "Application", "TroupeIngress", "ingress_app", "start_http"]

REPLICA_HEADER = "x-troupe-replica"
"""The response header naming the replica that answered."""

AppBuilder = Callable[[Runtime], Any]
"""Builds the ASGI app a replica serves, from its started runtime (e.g. ``create_app(rt, agent)``)."""

DEFAULT_ACTOR_OPTIONS: Mapping[str, Any] = {"num_cpus": 0.25}
"""A replica mostly waits on the hosts: a quarter of a CPU each, so a small machine fits several."""


class _ReplicaHeader:
    """ASGI middleware: add ``x-troupe-replica`` to every HTTP response."""

    def __init__(self, app: Any, replica: str) -> None:
        self.app = app
        self.replica = replica.encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Callable[[Any], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def tagged(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (REPLICA_HEADER.encode(), self.replica)]}
            await send(message)

        await self.app(scope, receive, tagged)


@serve.ingress()
class TroupeIngress:
    """One replica: a started runtime and the app built on it (see the module docstring)."""

    # Serve's ingress wrapper awaits an async constructor (the runtime starts on the replica's loop).
    async def __init__(self, build: AppBuilder, runtime_options: Mapping[str, Any]) -> None:  # type: ignore[misc]
        # (Not ``self.app`` / ``self.runtime``: Serve's wrapper class has an ``app`` property.)
        self.troupe_runtime = Runtime(**runtime_options)
        await self.troupe_runtime.start()
        replica = serve.get_replica_context().replica_id.unique_id
        self.troupe_app = _ReplicaHeader(build(self.troupe_runtime), replica)

    def __serve_build_asgi_app__(self) -> Any:
        return self.troupe_app

    async def __del__(self) -> None:
        await self.troupe_runtime.close()  # in a replica it owns nothing: its pollers and store only


def ingress_app(
    build: AppBuilder,
    runtime_options: Mapping[str, Any],
    *,
    name: str = "troupe",
    num_replicas: int | str | None = None,
    autoscaling_config: Mapping[str, Any] | None = None,
    ray_actor_options: Mapping[str, Any] | None = None,
    **deployment_options: Any,
) -> Application:
    """A Serve application: replicas of ``TroupeIngress`` serving ``build(runtime)``.

    ``num_replicas``, ``autoscaling_config``, ``ray_actor_options`` and any other
    ``deployment_options`` go to ``serve.deployment`` as they are (``num_replicas="auto"`` with
    an ``autoscaling_config`` scales by load). Replicas default to a quarter of a CPU each.
    """
    options: dict[str, Any] = {"name": name, **deployment_options}
    if num_replicas is not None:
        options["num_replicas"] = num_replicas
    if autoscaling_config is not None:
        options["autoscaling_config"] = dict(autoscaling_config)
    options["ray_actor_options"] = {**DEFAULT_ACTOR_OPTIONS, **dict(ray_actor_options or {})}
    deployment: Any = serve.deployment(TroupeIngress, **options)
    bound: Application = deployment.bind(build, dict(runtime_options))
    return bound


def start_http(host: str, port: int) -> None:
    """Start Serve's HTTP proxy on ``host:port`` (joining or starting Ray as ``serve run`` would).

    ``serve run module:app`` has no port option and starts the proxy on 8000; an app builder that
    calls this first (``port=`` on ``orchestrator.surfaces.serve:app``) picks the address instead:
    ``serve run`` then finds Serve running and deploys to it.
    """
    if not ray.is_initialized():
        ray.init(namespace="serve")  # what serve run's own ray.init uses
    serve.start(http_options={"host": host, "port": port})
