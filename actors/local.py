"""``LocalRuntime``: the session API on one host in this process, with no Ray at all.

The same ``SessionHost`` and ``Session`` client as the Ray runtime, over an in-process transport:
every session and sub-agent runs here. For tests, scripts, and embedding a few sessions in a
program that is not a Ray application. Any store works, ``memory://`` included.
"""

from __future__ import annotations

from actors.base import BaseRuntime
from actors.host import HostOptions, SessionHost
from actors.transport import LocalTransport
from orchestrator.store import open_store

__all__ = ["LocalRuntime"]


class LocalRuntime(BaseRuntime):
    """Sessions in this process (see the module docstring)."""

    def __init__(
        self,
        store: str = "memory://",
        *,
        idle_timeout: float = 300.0,
        flush_interval: float = 0.004,
        flush_parts: int = 256,
    ) -> None:
        super().__init__()
        options = HostOptions(
            store=store,
            namespace="local",
            idle_timeout=idle_timeout,
            flush_interval=flush_interval,
            flush_parts=flush_parts,
            poll_linger=0.0,
            extra={"hosts": ["local"], "local": True},
        )
        self.options = options
        self.host: SessionHost | None = None
        self.store = open_store(store)

    async def start(self) -> None:
        """Create the in-process host."""
        if self.host is None:
            self.host = SessionHost("local", self.options)
            self.host.store = self.store
            self.host.registry.store = self.store
            self.transport = LocalTransport(self.host)

    async def close(self) -> None:
        """Close every session and the store."""
        await self._close_pollers()
        if self.host is not None:
            await self.host.shutdown()
            self.host = None
