"""``RayTransport``: the client's way to session hosts that are Ray actors (``actors.transport``).

Every call follows its session's host across restarts and moves (``Router.on_host`` with the
``SESSION_CALL`` schedule; calls are idempotent, so a repeat is safe). Ray's actor errors stop
here: a poll whose host died (or, being moved, has no actor under its name) raises ``HostUnavailable``,
which the client knows without Ray.
"""

from __future__ import annotations

import contextlib
from typing import Any

from actors.errors import HostUnavailable
from actors.host import BATCHED_CALLS
from actors.options import ACTOR_ERRORS
from actors.outbox import Outbox
from actors.retry import SESSION_CALL, RetriesExhausted
from actors.router import HostNotFound, Router

__all__ = ["RayTransport"]

_HOST_GONE: tuple[type[Exception], ...] = (*ACTOR_ERRORS, HostNotFound)
"""What a poll raises when its host died, is restarting, or is being moved (``HostNotFound``: the
handle was dropped, by any caller whose call to it failed, and no actor holds the name yet)."""


class RayTransport:
    """Hosts are Ray actors; the supervisor handles trees."""

    def __init__(self, router: Router, supervisor: Any) -> None:
        self.router = router
        self.supervisor = supervisor
        self.outbox = Outbox(router.host)

    async def call(self, session_id: str, method: str, *args: Any) -> Any:
        """See ``Transport.call``."""
        router = self.router
        batched = method in BATCHED_CALLS

        async def call(name: str) -> Any:
            if batched:  # with the other calls to this host in this turn of the loop (actors.outbox)
                return await self.outbox.call(name, method, session_id, args)
            return await getattr(router.host(name), method).remote(session_id, *args)

        try:
            return await router.on_host(session_id, call, SESSION_CALL)
        except RetriesExhausted:
            raise TimeoutError(f"session {session_id}: its host did not come back") from None

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
        try:
            return await self.router.host(host).poll.remote(poller, changes, removed, timeout, full, waits)
        except _HOST_GONE as error:
            # Let out of here, a HostNotFound would end the poller's task, and every feed and turn
            # wait on the host with it; the poller waits for the host and registers again instead.
            raise HostUnavailable(f"host {host!r} did not answer a poll ({type(error).__name__})") from error

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
        """Make an agent definition available to every host (stored once, idempotent)."""
        name = await self.router.place("troupe:agents")
        await self.router.host(name).register_agent.remote(key, data)
