"""How a client reaches session hosts: over Ray (``actors.ray_transport``) or in this process (``LocalTransport``).

The ``Session`` handle and the subscription pollers only speak to a transport, so the same client
runs against a Ray cluster or against one in-process host (tests, scripts, an embedded server).
A transport raises ``HostUnavailable`` for a host that does not answer, never a Ray error: the
client names no Ray.
"""

from __future__ import annotations

from typing import Any, Protocol

from actors.host import SessionHost

__all__ = ["LocalTransport", "Transport"]


class Transport(Protocol):
    """What the client needs of the hosts."""

    async def call(self, session_id: str, method: str, *args: Any) -> Any:
        """Call ``method(session_id, *args)`` on the session's host, retrying across restarts."""
        ...

    def host_now(self, session_id: str) -> str | None:
        """The session's host when known without a round trip."""
        ...

    async def host_of(self, session_id: str) -> str:
        """The session's host."""
        ...

    async def poll(
        self,
        host: str,
        poller: str,
        changes: dict[str, int],
        removed: list[str],
        timeout: float,
        full: bool,
        waits: dict[str, tuple[str, str]],
    ) -> Any:
        """One long poll on ``host`` for ``poller`` (see ``SessionHost.poll``).

        Raises:
            HostUnavailable: the host died or is restarting (wait for it, then register again).
        """
        ...

    def wake(self, host: str, poller: str) -> None:
        """End ``poller``'s waiting poll on ``host`` now (fire and forget)."""
        ...

    async def wait_ready(self, host: str) -> None:
        """Wait until ``host`` answers again."""
        ...

    async def control_tree(self, session_id: str, action: str, when: str) -> None:
        """Pause / resume / stop a session's live descendants."""
        ...


class LocalTransport:
    """One host in this process: every session and sub-agent runs here, no Ray involved."""

    def __init__(self, host: SessionHost) -> None:
        self.host = host

    async def call(self, session_id: str, method: str, *args: Any) -> Any:
        """See ``Transport.call``."""
        return await getattr(self.host, method)(session_id, *args)

    def host_now(self, session_id: str) -> str | None:
        """See ``Transport.host_now``."""
        return self.host.name

    async def host_of(self, session_id: str) -> str:
        """See ``Transport.host_of``."""
        return self.host.name

    async def poll(
        self,
        host: str,
        poller: str,
        changes: dict[str, int],
        removed: list[str],
        timeout: float,
        full: bool,
        waits: dict[str, tuple[str, str]],
    ) -> Any:
        """See ``Transport.poll``."""
        return await self.host.poll(poller, changes, removed, timeout, full, waits)

    def wake(self, host: str, poller: str) -> None:
        """See ``Transport.wake``."""
        self.host.hub.wake(poller)

    async def wait_ready(self, host: str) -> None:
        """See ``Transport.wait_ready``."""
        return None

    async def control_tree(self, session_id: str, action: str, when: str) -> None:
        """See ``Transport.control_tree``."""
        prefix = session_id + "/"
        for child in sorted(s for s in self.host.hosted if s.startswith(prefix)):
            await self.host.control(child, action, when)
