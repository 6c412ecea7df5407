"""Following a session through the store, not its host: for a process that hosts nothing.

A subscription normally long-polls the host that runs the session (``actors.poller``): one Ray
call per host carries every subscription of the process. With a store that pushes its commits
(PostgreSQL's ``LISTEN``/``NOTIFY``: ``store.base.Followable``), a process can instead follow the
log itself: a ``troupe serve`` on a node with no host, or one whose sessions live on another
node, sees each commit within milliseconds of it, and keeps seeing them while the session moves
between hosts (a host restarting, a node lost), since the log is where every host writes.

``StoreFeed`` folds the log once (the state at ``N``: the subscription starts after ``N``), then
folds what commits and sends the difference, as the host does (``core.mutations.diff`` of the
states before and after, with the agent's contract): once for each group of commits the store
reads (``FollowsInGroups``; PostgreSQL's every read), where the host diffs once a write. A client
ends at the same states either way; it cannot start from a state inside a write on either path.
This one costs a fold per subscribed process, where the host's costs one for all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Final

import structlog

from actors.client import Mutation, Subscription
from actors.mutation import Batch
from orchestrator.core.contract import Contract
from orchestrator.core.errors import StoreError
from orchestrator.core.fold import evolve, fold_events
from orchestrator.core.mutations import diff
from orchestrator.store.base import follow_in_groups

if TYPE_CHECKING:
    from orchestrator.store.base import EventStore, Followable

__all__ = ["FOLLOW_MODES", "StoreFeed"]

FOLLOW_MODES: Final = ("hosts", "store")
"""How a runtime's subscriptions follow a session: by long-polling its host, or through the store."""

log = structlog.get_logger()


class StoreFeed:
    """Feeds one subscription from the store's ``follow``: a fold of the log, then each commit."""

    def __init__(self, store: Followable, reader: EventStore, subscription: Subscription, contract: Contract | None):
        """Prepare the feed; ``start`` runs it on the running loop."""
        self._store = store
        self._reader = reader
        self._subscription = subscription
        self._contract = contract
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Fold the log and follow it, in a task of the running loop."""
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        """Stop following (the subscription is closed by its owner)."""
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        subscription = self._subscription
        session_id = subscription.session.id
        try:
            events = await self._reader.read(session_id)
            state = fold_events(events, None, self._contract)
            subscription.cursor = events[-1].index if events else 0
            subscription.registered.set()
            async with contextlib.aclosing(follow_in_groups(self._store, session_id, subscription.cursor)) as groups:
                async for group in groups:
                    after = state
                    for event in group:
                        after, _ = evolve(after, event, self._contract)
                    index = group[-1].index
                    batch = Batch(Mutation(m) for m in diff(state, after, index))
                    state = after
                    batch.cursor = index
                    subscription.feed(batch)  # an empty batch still tells how far the log went
        except StoreError as error:  # the store was closed, or lost for longer than it retries
            log.info("store_feed_ended", session_id=session_id, error=error.message)
            subscription.queue.put_nowait(None)
