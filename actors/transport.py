"""How a client reaches session hosts: over Ray (``RayTransport``) or in this process (``LocalTransport``).

The ``Session`` handle and the subscription pollers only speak to a transport, so the same client
runs against a Ray cluster or against one in-process host (tests, scripts, an embedded server).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any, Protocol

from actors.host import SessionMoved
from actors.router import Router

if TYPE_CHECKING:
    from actors.host import SessionHost

__all__ = ["ACTOR_ERRORS", "LocalTransport", "RayTransport", "Transport"]

from actors.options import ACTOR_ERRORS


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
        """One long poll on ``host`` for ``poller`` (see ``SessionHost.poll``)."""
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

    async def register_agent(self, key: str, data: bytes) -> None:
        """Make an agent definition available to every host."""
        ...


class RayTransport:
    """Hosts are Ray actors; the supervisor handles trees."""

    def __init__(self, router: Router, supervisor: Any) -> None:
        self.router = router
        self.supervisor = supervisor

    async def call(self, session_id: str, method: str, *args: Any) -> Any:
        """See ``Transport.call``."""
        router = self.router
        for attempt in range(200):
            name = await router.place(session_id)
            try:
                return await getattr(router.host(name), method).remote(session_id, *args)
            except SessionMoved:
                router.forget(session_id)  # dedicated placement: the session has another host now
            except ACTOR_ERRORS:
                # The host died mid-call: wait for its restart and call again (calls are idempotent).
                router.forget(session_id)
                await router.wait_ready(name)
                await asyncio.sleep(min(0.02 * attempt, 0.5))
        raise TimeoutError(f"session {session_id}: its host did not come back")

    def host_now(self, session_id: str) -> str | None:
        """See ``Transport.host_now``."""
        return self.router.place_now(session_id)

    async def host_of(self, session_id: str) -> str:
        """See ``Transport.host_of``."""
        return await self.router.place(session_id)

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
        return await self.router.host(host).poll.remote(poller, changes, removed, timeout, full, waits)

    def wake(self, host: str, poller: str) -> None:
        """See ``Transport.wake``."""
        with contextlib.suppress(*ACTOR_ERRORS, ValueError):
            self.router.host(host).wake_poll.remote(poller)

    async def wait_ready(self, host: str) -> None:
        """See ``Transport.wait_ready``."""
        await self.router.wait_ready(host)

    async def control_tree(self, session_id: str, action: str, when: str) -> None:
        """See ``Transport.control_tree``."""
        await self.supervisor.control_tree.remote(session_id, action, when)

    async def register_agent(self, key: str, data: bytes) -> None:
        """See ``Transport.register_agent``."""
        name = await self.router.place("troupe:agents")
        await self.router.host(name).register_agent.remote(key, data)


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

    async def register_agent(self, key: str, data: bytes) -> None:
        """See ``Transport.register_agent``."""
        await self.host.register_agent(key, data)
