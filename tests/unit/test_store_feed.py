"""``StoreFeed``: a subscription fed from the store's log, one diff for each group the store reads."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from actors.client import Subscription
from actors.local import LocalRuntime
from actors.mutation import Batch
from actors.store_feed import StoreFeed
from orchestrator.core.events import Event
from orchestrator.core.fold import fold_events
from orchestrator.core.mutations import ClientView
from orchestrator.store.base import Followable, FollowsInGroups
from tests.fixtures.agents import delegating

TIMEOUT = 10


class _Followed:
    """A log the feed reads up to ``start``, then follows one event at a time (``follow`` only)."""

    def __init__(self, log: Sequence[Event], start: int) -> None:
        self.log = list(log)
        self.start = start

    async def read(self, session_id: str, after: int = 0, limit: int | None = None) -> list[Event]:
        return [e for e in self.log if after < e.index <= self.start]

    async def follow(self, session_id: str, after: int = 0) -> AsyncGenerator[Event, None]:
        for event in self.log:
            if event.index > after:
                yield event
        await asyncio.Event().wait()  # a follower never ends by itself


class _FollowedInGroups(_Followed):
    """The same, handing the new events over in ``groups`` (as PostgreSQL's reads do)."""

    def __init__(self, log: Sequence[Event], start: int, groups: Sequence[int]) -> None:
        super().__init__(log, start)
        self.groups = groups

    async def follow_groups(self, session_id: str, after: int = 0) -> AsyncGenerator[list[Event], None]:
        rest = [e for e in self.log if e.index > after]
        for size in self.groups:
            group, rest = rest[:size], rest[size:]
            yield group
        await asyncio.Event().wait()


class _Session:
    id = "s"


async def _a_turn_with_a_sub_agent() -> list[Event]:
    async with LocalRuntime(store="memory://") as rt:
        session = rt.session("s", agent=delegating())
        turn = await session.prompt("compare")
        assert (await asyncio.wait_for(turn.finished, TIMEOUT)).success
        log: list[Event] = await rt.store.read("s")
        return log


async def _batches(store: Any, start: int, count: int) -> list[Batch]:
    subscription = Subscription(_Session(), lambda _: None)  # type: ignore[arg-type]  # only .id is read
    feed = StoreFeed(store, store, subscription, delegating().contract)
    feed.start()
    try:
        batches = [await asyncio.wait_for(subscription.queue.get(), TIMEOUT) for _ in range(count)]
        return [b for b in batches if isinstance(b, Batch)]  # the feed sends Batches (None: closed)
    finally:
        feed.stop()


async def test_a_store_that_reads_in_groups_gets_one_diff_a_group() -> None:
    log = await _a_turn_with_a_sub_agent()
    start = 3
    rest = len(log) - start
    groups = [1, rest // 2 - 1, rest - rest // 2]
    store = _FollowedInGroups(log, start, groups)
    assert isinstance(store, Followable) and isinstance(store, FollowsInGroups)
    batches = await _batches(store, start, len(groups))
    assert [b.cursor for b in batches] == [start + 1, start + groups[0] + groups[1], len(log)]
    # One diff a group still takes a client from the state at ``start`` to the log's last state.
    view = ClientView.of(fold_events(log[:start], None, delegating().contract).session, start)
    for batch in batches:
        view.apply_batch(batch)
    assert view.state.messages == fold_events(log, None, delegating().contract).session.messages
    assert view.index == len(log)


async def test_a_store_that_only_follows_gets_one_diff_an_event() -> None:
    log = await _a_turn_with_a_sub_agent()
    store = _Followed(log, 2)
    assert isinstance(store, Followable) and not isinstance(store, FollowsInGroups)
    batches = await _batches(store, 2, len(log) - 2)
    assert [b.cursor for b in batches] == list(range(3, len(log) + 1))
    view = ClientView.of(fold_events(log[:2], None, delegating().contract).session, 2)
    for batch in batches:
        view.apply_batch(batch)
    assert view.state.messages == fold_events(log, None, delegating().contract).session.messages
