"""Troupe's HTTP API as a Ray Serve application: ``troupe_app(config)`` and the ``serve run`` target ``app``.

::

    serve run orchestrator.surfaces.serve:app config=configs/shop.yaml num_replicas=2

or, in code, ``serve.run(troupe_app("configs/shop.yaml", num_replicas=2))``. Every replica serves
the whole API of ``troupe serve`` (sessions, SSE, the AI SDK ``/api/chat``) from
``orchestrator.surfaces.http.create_app`` on a runtime attached to the namespace's hosts, so a
``useChat`` stream and its resume may land on different replicas and still see one session.

Why here: the app wraps the HTTP surface, and only ``orchestrator/surfaces`` may import both
``actors`` and the surfaces. The Serve machinery itself (the deployment, the replica's runtime)
is ``actors.serve``, which names no surface: this module hands it the app's builder.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.runtime import Runtime, absolute_store
from actors.serve import Application, ingress_app, start_http
from orchestrator.core.errors import UsageError
from orchestrator.run.agent import Agent
from orchestrator.surfaces.config import RuntimeConfig, load_config
from orchestrator.surfaces.config.runtime import KEYS_ENV, merge_keys
from orchestrator.surfaces.http import create_app

__all__ = ["HttpApp", "app", "replica_parts", "troupe_app"]


@dataclass(frozen=True)
class HttpApp:
    """Builds the HTTP app in a replica (pickled to it): ``create_app(runtime, agent, api_keys=...)``."""

    agent: Agent
    api_keys: tuple[str, ...] = ()

    def __call__(self, runtime: Runtime) -> Any:
        """The FastAPI app of ``runtime`` (started) where every session runs the agent."""
        return create_app(runtime, self.agent, api_keys=list(self.api_keys))


def troupe_app(
    config: str | Path,
    *,
    agent: str | None = None,
    store: str | None = None,
    namespace: str | None = None,
    api_keys: Sequence[str] = (),
    hosts_per_node: int | None = None,
    num_replicas: int | str | None = 2,
    autoscaling_config: Mapping[str, Any] | None = None,
    ray_actor_options: Mapping[str, Any] | None = None,
    name: str = "troupe",
) -> Application:
    """A Serve application of the HTTP API for the config's agent (its main one, or ``agent``).

    ``store``, ``namespace``, ``api_keys`` and ``hosts_per_node`` override the config's
    ``runtime:`` section (keys are merged, with those in ``$TROUPE_API_KEYS`` as ``troupe serve``
    reads them); the rest goes to ``serve.deployment``
    (``num_replicas="auto"`` with ``autoscaling_config`` scales with load).

    Raises:
        ConfigError: the config is missing or invalid.
        UsageError: a store every replica cannot share (``memory://``).
    """
    build, options = replica_parts(
        config, agent=agent, store=store, namespace=namespace, api_keys=api_keys, hosts_per_node=hosts_per_node
    )
    return ingress_app(
        build,
        options,
        name=name,
        num_replicas=num_replicas,
        autoscaling_config=autoscaling_config,
        ray_actor_options=ray_actor_options,
    )


def replica_parts(
    config: str | Path,
    *,
    agent: str | None = None,
    store: str | None = None,
    namespace: str | None = None,
    api_keys: Sequence[str] = (),
    hosts_per_node: int | None = None,
) -> tuple[HttpApp, dict[str, Any]]:
    """What every replica gets: the app's builder (agent and keys) and its runtime's options.

    The runtime options are the config's ``runtime:`` section, overridden by the arguments; the
    keys are the config's, ``$TROUPE_API_KEYS``'s and ``api_keys``, merged.
    """
    loaded = load_config(config)
    main = loaded.agent(agent)
    settings = loaded.runtime or RuntimeConfig()
    keys = merge_keys(settings.api_keys, os.environ.get(KEYS_ENV), api_keys)
    options: dict[str, Any] = {
        "store": absolute_store(store or settings.store),  # every replica opens the same file
        "placement": settings.placement,
        "hosts_per_node": hosts_per_node or settings.hosts_per_node,
        "idle_timeout": settings.idle_timeout,
        "max_dedicated": settings.max_dedicated,
        "dedicated_wait": settings.dedicated_wait,
    }
    if namespace is not None:
        options["namespace"] = namespace
    return HttpApp(main, keys), options


_ARGS = ("config", "agent", "store", "namespace", "api_keys", "num_replicas", "hosts_per_node", "name", "host", "port")


def app(args: dict[str, str]) -> Application:
    """The ``serve run orchestrator.surfaces.serve:app config=PATH [key=value ...]`` builder.

    Keys: ``config`` (required), ``agent``, ``store``, ``namespace``, ``api_keys`` (comma
    separated), ``num_replicas`` (a number or ``auto``), ``hosts_per_node``, ``name``, and
    ``host`` / ``port``: where Serve's HTTP proxy listens (``serve run`` alone uses
    127.0.0.1:8000; given here, Serve is started there first).

    Raises:
        UsageError: an unknown key, or no ``config``.
    """
    unknown = sorted(set(args) - set(_ARGS))
    if unknown:
        raise UsageError(f"serve run ...:app got unknown argument(s) {unknown}; the arguments are {list(_ARGS)}")
    if not args.get("config"):
        raise UsageError("serve run orchestrator.surfaces.serve:app needs config=PATH (e.g. config=configs/shop.yaml)")
    replicas = args.get("num_replicas", "2")
    hosts = args.get("hosts_per_node")
    try:
        num_replicas: int | str = replicas if replicas == "auto" else int(replicas)
        hosts_per_node = int(hosts) if hosts else None
        port = int(args["port"]) if args.get("port") else None
    except ValueError:
        raise UsageError(
            f"num_replicas, hosts_per_node and port must be numbers (num_replicas may be 'auto'), got {args}"
        ) from None
    application = troupe_app(
        args["config"],
        agent=args.get("agent"),
        store=args.get("store"),
        namespace=args.get("namespace"),
        api_keys=[k for k in args.get("api_keys", "").split(",") if k],
        num_replicas=num_replicas,
        hosts_per_node=hosts_per_node,
        name=args.get("name", "troupe"),
    )
    if port is not None or args.get("host"):
        start_http(args.get("host") or "127.0.0.1", port or 8000)
    return application
