"""A poller keeps no reply once it has handed the batches out (not through the next long poll)."""

from __future__ import annotations

import asyncio
import weakref
from types import SimpleNamespace
from typing import Any, cast

from actors.client import Subscription
from actors.poller import Poller


class _Tracked(list[dict[str, Any]]):
    """A reply's mutation list that a weak reference can watch."""


class _Transport:
    """Answers the first poll with one batch, then holds the next poll open until released."""

    def __init__(self) -> None:
        self.sent: weakref.ref[_Tracked] | None = None
        self.second_poll = asyncio.Event()
        self.release = asyncio.Event()
        self.polls = 0

    async def poll(self, host: str, poller: str, *args: Any) -> Any:
        self.polls += 1
        if self.polls == 1:
            mutations = _Tracked([{"type": "delta", "index": 3, "delta": "hi"}])
            self.sent = weakref.ref(mutations)
            return {"s1": (3, mutations)}, {}
        self.second_poll.set()
        await self.release.wait()
        return {}, {}


async def test_the_reply_is_let_go_before_the_next_long_poll_waits() -> None:
    transport = _Transport()
    poller = Poller(cast(Any, transport), "host-1")
    subscription = Subscription(cast(Any, SimpleNamespace(id="s1")), lambda _: None)
    poller.add(subscription)
    await asyncio.wait_for(transport.second_poll.wait(), 5)
    batch = await subscription.next_batch(timeout=5)
    assert batch is not None and [m.type for m in batch] == ["delta"] and batch[0]["delta"] == "hi"
    assert transport.sent is not None and transport.sent() is None  # the reply's list is gone while it polls
    transport.release.set()
    await poller.close()
