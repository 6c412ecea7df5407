"""``RayTransport``: the client's way to session hosts that are Ray actors (``actors.transport``).

Every call follows its session's host across restarts and moves (``Router.on_host`` with the
``SESSION_CALL`` schedule; calls are idempotent, so a repeat is safe). Ray's actor errors stop
here: a poll whose host died (or, being moved, has no actor under its name) raises ``HostUnavailable``,
which the client knows without Ray.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Final

from actors.errors import HostUnavailable
from actors.host import BATCHED_CALLS
from actors.hub import REPLY_MUTATIONS
from actors.options import ACTOR_ERRORS
from actors.outbox import Outbox
from actors.retry import SESSION_CALL, RetriesExhausted
from actors.router import HostNotFound, Router

__all__ = ["POLL_PARTS", "RayTransport"]

POLL_PARTS: Final = 4
"""Values a poll reply comes back in when the host has much to send (``MutationHub.split``).

Ray returns a value of up to 100 KiB inline, in the call's reply; a larger one goes through the
object store, whose shared pages stay resident in both processes once touched. A part of
``REPLY_MUTATIONS`` (512) mutations is ~30-70 KB, so one round trip carries 2,048 inline. In
`bench shop` N=1000 a busy host gathered up to ~4,500 between two polls: one part per round trip
put the first text p50 at 311-323 ms against 202-213 before; four parts, at 172-189.

A call with four returns costs the caller ~0.3 ms more CPU than with one (a micro-benchmark: 1.03
against 0.76 ms), so a poll asks for four only after a reply that filled one part: a quiet host's
polls stay single."""

_HOST_GONE: tuple[type[Exception], ...] = (*ACTOR_ERRORS, HostNotFound)
"""What a poll raises when its host died, is restarting, or is being moved (``HostNotFound``: the
handle was dropped, by any caller whose call to it failed, and no actor holds the name yet)."""


def _unavailable(host: str, error: BaseException) -> HostUnavailable:
    return HostUnavailable(f"host {host!r} did not answer a poll ({type(error).__name__})")


class RayTransport:
    """Hosts are Ray actors; the supervisor handles trees."""

    def __init__(self, router: Router, supervisor: Any) -> None:
        self.router = router
        self.supervisor = supervisor
        self.outbox = Outbox(router.host)
        self._parts: dict[str, int] = {}
        """Per host, the parts its next poll asks for (``POLL_PARTS`` after a reply that filled one)."""

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
        """See ``Transport.poll``: in ``POLL_PARTS`` values, each returned inline, after a full reply."""
        parts = self._parts.get(host, 1)
        try:
            method = self.router.host(host).poll
            if parts == 1:
                refs = [method.remote(poller, changes, removed, timeout, full, waits)]
            else:
                refs = method.options(num_returns=parts).remote(poller, changes, removed, timeout, full, waits, parts)
        except _HOST_GONE as error:
            raise _unavailable(host, error) from error
        # Every part fails alike when the call does: wait for all, so no failure goes unread.
        first, *rest = await asyncio.gather(*refs, return_exceptions=True)
        if isinstance(first, BaseException):
            if isinstance(first, _HOST_GONE):
                # Let out of here, a HostNotFound would end the poller's task, and every feed and turn
                # wait on the host with it; the poller waits for the host and registers again instead.
                raise _unavailable(host, first) from first
            raise first
        if first is None:
            return None
        news = first[0]
        for part in rest:
            if part:
                news.update(part)
        sent = sum(len(batch) for _, batch in news.values())
        self._parts[host] = POLL_PARTS if sent >= REPLY_MUTATIONS else 1
        return first

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
