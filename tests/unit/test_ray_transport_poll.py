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
import ray

from actors.client import Subscription
from actors.errors import HostUnavailable
from actors.poller import Poller
from actors.ray_transport import POLL_PARTS, RayTransport
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
        return SimpleNamespace(poll=_Parts(self._poll), wake_poll=SimpleNamespace(remote=_ignore))

    async def wait_ready(self, name: str) -> None:
        """The host is up again (the real one retries until it answers)."""

    async def _poll(self, poller: str, changes: dict[str, int], *args: Any) -> Any:
        self.polls.append(dict(changes))
        if len(self.polls) > 1:
            await asyncio.Event().wait()  # a long poll with nothing new: held until cancelled
        parts: int = args[-1]
        return [({session: (5, [{"type": "delta", "index": 5}]) for session in changes}, {}), *([{}] * (parts - 1))]


class _Parts:
    """An actor method called with ``num_returns``: one awaitable per value it returns."""

    def __init__(self, method: Any) -> None:
        self.method = method
        self.count = 1

    def options(self, *, num_returns: int) -> _Parts:
        self.count = num_returns
        return self

    def remote(self, *args: Any) -> list[Any]:
        call = asyncio.ensure_future(self.method(*args))

        async def part(i: int) -> Any:
            return (await asyncio.shield(call))[i]

        return [part(i) for i in range(self.count)]


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


class _Host:
    """A host whose poll answers with ``values`` (one per part), or whose every part fails with ``error``."""

    def __init__(self, values: list[Any] | None = None, error: Exception | None = None) -> None:
        self.values, self.error = values, error
        self.asked: list[int] = []

    def host(self, name: str) -> Any:
        return SimpleNamespace(poll=_Parts(self._poll))

    async def _poll(self, *args: Any) -> Any:
        self.asked.append(args[-1])
        if self.error is not None:
            raise self.error
        return self.values


async def test_a_poll_asks_for_its_reply_in_parts_and_gives_the_poller_one_reply() -> None:
    first = {"s1": (3, [{"type": "delta", "index": 3}])}
    values = [(first, {"i-1": "done"}), {"s2": (4, [])}, {}, {"s3": (9, [{"type": "reset", "index": 9}])}]
    host = _Host(values[:POLL_PARTS])
    reply = await RayTransport(cast(Any, host), None).poll("h-1", "p", {}, [], 5.0, False, {})
    assert host.asked == [POLL_PARTS]
    expected = {"s1": first["s1"], "s2": (4, [])}
    if POLL_PARTS > 3:
        expected["s3"] = (9, [{"type": "reset", "index": 9}])
    assert reply == (expected, {"i-1": "done"})
    unknown = _Host([None, *([{}] * (POLL_PARTS - 1))])
    assert await RayTransport(cast(Any, unknown), None).poll("h-1", "p", {}, [], 5.0, False, {}) is None


async def test_a_poll_whose_host_died_mid_call_raises_host_unavailable_once() -> None:
    host = _Host(error=ray.exceptions.RayActorError())
    with pytest.raises(HostUnavailable, match="host 'h-1' did not answer a poll"):
        await RayTransport(cast(Any, host), None).poll("h-1", "p", {}, [], 5.0, False, {})
