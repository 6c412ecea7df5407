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
from actors.hub import REPLY_MUTATIONS
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
        return {session: (5, [{"type": "delta", "index": 5}]) for session in changes}, {}


class _Parts:
    """An actor method: ``remote`` gives one awaitable, or one per value with ``num_returns``."""

    def __init__(self, method: Any, count: int = 1) -> None:
        self.method = method
        self.count = count

    def options(self, *, num_returns: int) -> _Parts:
        return _Parts(self.method, num_returns)

    def remote(self, *args: Any) -> Any:
        if self.count == 1:
            return self.method(*args)
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
    """A host whose polls answer ``replies`` in turn (each as the host would for its parts), or fail with ``error``."""

    def __init__(self, replies: list[Any] | None = None, error: Exception | None = None) -> None:
        self.replies, self.error = list(replies or []), error
        self.asked: list[int] = []

    def host(self, name: str) -> Any:
        return SimpleNamespace(poll=_Parts(self._poll))

    async def _poll(
        self, poller: str, changes: Any, removed: Any, timeout: float, full: bool, waits: Any, parts: int = 1
    ) -> Any:
        self.asked.append(parts)
        if self.error is not None:
            raise self.error
        reply = self.replies.pop(0)
        if reply is None:  # the host does not know the poller
            return None if parts == 1 else [None, *([{}] * (parts - 1))]
        news, outcomes = reply
        if parts == 1:
            return news, outcomes
        split = [dict(list(news.items())[i::parts]) for i in range(parts)]
        return [(split[0], outcomes), *split[1:]]


def _news(sessions: int, each: int) -> dict[str, Any]:
    return {f"s-{i}": (1, [{"type": "delta", "index": 1}] * each) for i in range(sessions)}


async def test_a_poll_asks_for_its_reply_in_parts_after_a_full_one_and_gives_the_poller_one_reply() -> None:
    full, small = _news(REPLY_MUTATIONS // 4, 4), _news(3, 2)
    host = _Host([(full, {"i-1": "done"}), (full, {}), (small, {}), (small, {}), None])
    transport = RayTransport(cast(Any, host), None)
    replies = [await transport.poll("h-1", "p", {}, [], 5.0, False, {}) for _ in range(4)]
    assert host.asked == [1, POLL_PARTS, POLL_PARTS, 1]  # four parts while replies fill one
    assert replies[0] == (full, {"i-1": "done"}) and replies[1] == (full, {}) and replies[2] == (small, {})
    assert await transport.poll("h-1", "p", {}, [], 5.0, False, {}) is None  # unknown to the host


async def test_a_poll_whose_host_died_mid_call_raises_host_unavailable_once() -> None:
    for parts in (1, POLL_PARTS):
        host = _Host(error=ray.exceptions.RayActorError())
        transport = RayTransport(cast(Any, host), None)
        transport._parts["h-1"] = parts
        with pytest.raises(HostUnavailable, match="host 'h-1' did not answer a poll"):
            await transport.poll("h-1", "p", {}, [], 5.0, False, {})
