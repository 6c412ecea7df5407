"""A poll whose host cannot be looked up (it is being moved) is a host unavailable, not the poller's end.

``Router.host`` raises ``HostNotFound`` while no actor holds a host's name (between a lost node's
host being killed and re-created elsewhere), and looks the name up again whenever its handle was
dropped (any caller whose call to the host failed drops it). Raised out of ``RayTransport.poll``
as it was, it ended the poller's task: every subscription and turn wait of that host in the
process then waited for good, with nothing logged.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest

from actors.client import Subscription
from actors.errors import HostUnavailable
from actors.poller import Poller
from actors.ray_transport import RayTransport
from actors.router import HostNotFound


class _Router:
    """A host being moved: its name is not found ``missing`` times, then it answers every poll."""

    def __init__(self, missing: int) -> None:
        self.missing = missing
        self.polls: list[dict[str, int]] = []

    def host(self, name: str) -> Any:
        if self.missing > 0:
            self.missing -= 1
            raise HostNotFound(f"Failed to look up actor with name '{name}'")
        return SimpleNamespace(poll=SimpleNamespace(remote=self._poll), wake_poll=SimpleNamespace(remote=_ignore))

    async def wait_ready(self, name: str) -> None:
        """The host is up again (the real one retries until it answers)."""

    async def _poll(self, poller: str, changes: dict[str, int], *args: Any) -> Any:
        self.polls.append(dict(changes))
        if len(self.polls) > 1:
            await asyncio.Event().wait()  # a long poll with nothing new: held until cancelled
        return {session: (5, [{"type": "delta", "index": 5}]) for session in changes}, {}


def _ignore(*_: Any) -> None:
    return None


async def test_a_poll_of_a_host_not_found_raises_host_unavailable() -> None:
    transport = RayTransport(cast(Any, _Router(missing=1)), None)
    with pytest.raises(HostUnavailable, match="host 'h-1'"):
        await transport.poll("h-1", "poller-1", {"s1": -1}, [], 5.0, True, {})


async def test_a_poller_whose_host_is_not_found_once_registers_again_and_its_subscription_is_reset() -> None:
    router = _Router(missing=1)
    poller = Poller(RayTransport(cast(Any, router), None), "h-1")
    subscription = Subscription(cast(Any, SimpleNamespace(id="s1")), lambda _: None)
    poller.add(subscription)
    try:
        batch = await subscription.next_batch(timeout=10)  # before: the poller's task had ended
        assert batch is not None and batch[0].type == "reset", batch
        assert router.polls[0] == {"s1": -1}  # registered again from "now"
    finally:
        await poller.close()
