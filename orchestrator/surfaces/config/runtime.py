"""The ``runtime:`` section: where the log lives, how sessions are placed, who may connect.

A file may hold only this section (``load_runtime``), so reading it never builds agents.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from orchestrator.surfaces.config.document import Document, key_path, kind_of, read_config

__all__ = ["KEYS_ENV", "Placement", "RuntimeConfig", "build_runtime", "load_runtime", "merge_keys", "parse_runtime"]

KEYS_ENV: Final = "TROUPE_API_KEYS"
"""Comma-separated API keys, merged with the config's (and ``troupe serve --api-key``)."""


def merge_keys(*sources: Iterable[str] | str | None) -> tuple[str, ...]:
    """API keys from several places (a list, or comma-separated text), de-duplicated in order."""
    keys: list[str] = []
    for source in sources:
        if source is None:
            continue
        items = source.split(",") if isinstance(source, str) else source
        for key in (item.strip() for item in items):
            if key and key not in keys:
                keys.append(key)
    return tuple(keys)


Placement = Literal["pooled", "dedicated"]


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    """How the Ray runtime runs: where the log lives, how sessions are placed, who may connect."""

    store: str = "sqlite:///troupe.db"
    """The event store URL (``memory://``, ``sqlite:///path.db``, ``postgresql://...``)."""
    placement: Placement = "pooled"
    """``pooled``: sessions share host actors; ``dedicated``: one actor per session."""
    address: str | None = None
    """The Ray cluster to join (``auto``, ``ray://host:10001``); ``None`` starts a local Ray."""
    api_keys: tuple[str, ...] = ()
    """Keys a client must present to the HTTP surface; empty: no authentication."""
    idle_timeout: float = 300.0
    """Seconds an idle session's actor stays loaded."""
    hosts_per_node: int | None = None
    """Host actors per node when pooled; ``None``: one per CPU."""
    max_dedicated: int | None = None
    """Dedicated actors at most (``dedicated``); ``None``: from the cluster's CPUs and memory."""
    dedicated_wait: float = 120.0
    """Seconds a session waits for a dedicated actor before a clear error (``dedicated``)."""


def load_runtime(path: str | Path, *, env: Mapping[str, str] | None = None) -> RuntimeConfig:
    """The ``runtime:`` section of a file (which may hold nothing else); agents are not loaded.

    Raises:
        ConfigError: the file is missing, not YAML, has no ``runtime:`` or an invalid one.
    """
    return parse_runtime(read_config(path), source=str(path), env=os.environ if env is None else env)


def parse_runtime(text: str, *, source: str = "<config>", env: Mapping[str, str]) -> RuntimeConfig:
    """``load_runtime`` on text already read; ``source`` names it in errors."""
    doc = Document.parse(text, source, env)
    if "runtime" not in doc.data:
        doc.fail("", "no runtime: section", "add `runtime: {store: 'sqlite:///troupe.db'}` (every key is optional)")
    return build_runtime(doc, doc.interpolate(doc.data["runtime"], "runtime"))


_RUNTIME_KEYS: Final = (
    "store",
    "placement",
    "address",
    "api_keys",
    "idle_timeout",
    "hosts_per_node",
    "max_dedicated",
    "dedicated_wait",
)


def build_runtime(doc: Document, value: Any) -> RuntimeConfig:
    """The ``runtime:`` section (``value``, already interpolated) as a ``RuntimeConfig``."""
    if value is None:
        return RuntimeConfig()
    body = doc.mapping(value, "runtime", _RUNTIME_KEYS, "runtime")
    options: dict[str, Any] = {}
    if body.get("store") is not None:
        store = doc.string(body["store"], "runtime.store", "store")
        if "://" not in store:
            doc.fail("runtime.store", f"store {store!r} is not a URL", "e.g. sqlite:///troupe.db or memory://")
        options["store"] = store
    if body.get("placement") is not None:
        placement = body["placement"]
        if placement not in ("pooled", "dedicated"):
            doc.fail("runtime.placement", f"placement must be pooled or dedicated, not {placement!r}")
        options["placement"] = placement
    options["address"] = doc.optional_string(body.get("address"), "runtime.address", "address")
    options["api_keys"] = _api_keys(doc, body.get("api_keys"))
    if body.get("idle_timeout") is not None:
        options["idle_timeout"] = doc.number(body["idle_timeout"], "runtime.idle_timeout", "idle_timeout")
    if not doc.unset(hosts := body.get("hosts_per_node"), "runtime.hosts_per_node"):
        options["hosts_per_node"] = doc.integer(hosts, "runtime.hosts_per_node", "hosts_per_node")
    if not doc.unset(most := body.get("max_dedicated"), "runtime.max_dedicated"):
        options["max_dedicated"] = doc.integer(most, "runtime.max_dedicated", "max_dedicated")
    if body.get("dedicated_wait") is not None:
        options["dedicated_wait"] = doc.number(body["dedicated_wait"], "runtime.dedicated_wait", "dedicated_wait")
    return RuntimeConfig(**options)


def _api_keys(doc: Document, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):  # "${TROUPE_API_KEYS}": comma separated
        return tuple(key.strip() for key in value.split(",") if key.strip())
    if not isinstance(value, list):
        doc.fail("runtime.api_keys", f"api_keys must be a list or comma-separated text, not {kind_of(value)}")
    keys = [doc.string(key, key_path("runtime.api_keys", i), "an API key").strip() for i, key in enumerate(value)]
    return tuple(key for key in keys if key)
