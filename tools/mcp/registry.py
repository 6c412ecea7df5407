"""The MCP connections of one host: one per server, shared by its sessions, closed when it stops.

A connection belongs to an event loop (its process, its stdio child, its HTTP client all live
there), and a host is one loop: so the registry is kept per running loop. The host configures
the restart schedule (``actors.retry.MCP_RESTART``: this layer does not import ``actors``) and
closes its loop's connections on stop (``close_connections``). Nothing here imports the MCP SDK,
so a host that never uses MCP never loads it.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["Backoff", "Closeable", "close_connections", "configure", "connection", "restart_delay"]

Backoff = Callable[[int], float]
"""Seconds to wait before restart number ``n`` (from 0) of a server that died or would not start."""


class Closeable(Protocol):
    """A connection the registry can close."""

    async def aclose(self) -> None:
        """Close it (its process ends, its calls in flight fail)."""
        ...


def _default_backoff(attempt: int) -> float:
    return min(0.25 * (attempt + 1), 5.0)


_backoff: Backoff = _default_backoff
_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Any, Closeable]] = weakref.WeakKeyDictionary()


def configure(backoff: Backoff) -> None:
    """Set how long to wait before restarting a server (the host passes its named schedule)."""
    global _backoff
    _backoff = backoff


def restart_delay(attempt: int) -> float:
    """Seconds before restart number ``attempt`` (from 0)."""
    return _backoff(attempt)


def connection(key: Any, make: Callable[[], Closeable]) -> Closeable:
    """The running loop's connection for ``key``, made by ``make()`` on first use."""
    pool = _pools.setdefault(asyncio.get_running_loop(), {})
    found = pool.get(key)
    if found is None:
        found = pool[key] = make()
    return found


async def close_connections() -> None:
    """Close every connection of the running loop (a host stopping; idempotent)."""
    pool = _pools.pop(asyncio.get_running_loop(), {})
    for item in pool.values():
        await item.aclose()
