"""``sharded://URL|URL|…``: sessions spread over several stores by a stable hash of their root id.

The seam for the day one database is not enough (see the README's scale model): a session's log
is independent of every other's, so sessions are what to shard first. Each one lives wholly on
one shard, chosen by ``shard_index``: a stable hash (BLAKE2b, the same in every process and every
run, unlike Python's ``hash``) of its *root* session id, so a root session and its sub-agents
(``<parent>/<call id>``, however deep) always land together: a parent and its children are read,
forked and replayed together.

What holds across shards and what holds per shard:

- Every per-session guarantee of ``EventStore`` holds as it does on the shard (atomic batches,
  gap-free indexes, optimistic concurrency, idempotent replays).
- Event ids are unique *per shard*. Troupe's own ids name their session (derived ids, fork ids,
  handler ids), so they cannot clash across shards; an application that reuses one id in two
  sessions is caught only when both live on one shard. Logs whose ids begin with ``troupe:``
  (Troupe's bookkeeping, such as the HTTP surface's key logs, whose ownership claims rely on
  store-wide unique ids) all live on the first shard, so those claims stay atomic.
- ``list_sessions`` merges the shards' ordered listings: one query per shard.
- The shard count is part of the layout: changing it moves sessions, so a store is resharded by
  copying (``troupe store copy``), never by editing the URL.

``follow`` exists when every shard can follow (``Followable``): the sharded store of PostgreSQL
databases pushes commits like one database does.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncGenerator, Sequence
from typing import Final

from orchestrator.core.errors import StoreError, UsageError
from orchestrator.core.events import AppendResult, Event
from orchestrator.core.ids import RESERVED_ID_PREFIX, root_session_id
from orchestrator.store._fork import check_fork, fork_by_copy
from orchestrator.store._validate import check_id, prepare_all
from orchestrator.store.base import (
    AppendBatch,
    EventStore,
    Followable,
    Measurable,
    SessionSummary,
    Snapshot,
    follow_in_groups,
)

__all__ = ["SCHEME", "FollowableShardedStore", "ShardedStore", "shard_index", "sharded"]

SCHEME: Final = "sharded"
SEPARATOR: Final = "|"
"""Between the shards' URLs in a ``sharded://`` URL (a character no store URL needs)."""


def shard_index(session_id: str, shards: int) -> int:
    """The shard of ``session_id`` among ``shards``: its root's stable hash; Troupe's own logs on 0."""
    if session_id.startswith(RESERVED_ID_PREFIX):
        return 0
    digest = hashlib.blake2b(root_session_id(session_id).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


class ShardedStore:
    """An ``EventStore`` over several stores: each session (with its sub-agents) wholly on one of them."""

    def __init__(self, shards: Sequence[EventStore], *, url: str | None = None) -> None:
        """Route over ``shards``, in this order (the order is part of the layout).

        Raises:
            UsageError: fewer than two shards.
        """
        if len(shards) < 2:
            raise UsageError(f"a sharded store needs at least two shards, got {len(shards)}: use the one store itself")
        self.shards = tuple(shards)
        self._url = url if url is not None else f"{SCHEME}://" + SEPARATOR.join(s.url for s in self.shards)

    @property
    def url(self) -> str:
        """The URL that opens the same shards in the same order."""
        return self._url

    def shard(self, session_id: str) -> EventStore:
        """The store that holds ``session_id``'s log."""
        return self.shards[shard_index(check_id(session_id, "session id"), len(self.shards))]

    # -- writes ------------------------------------------------------------------------------

    async def append(
        self, session_id: str, events: Sequence[Event], expected_index: int | None = None, *, trusted: bool = False
    ) -> AppendResult:
        """Append one atomic batch to the session's shard (see ``EventStore.append``)."""
        return await self.shard(session_id).append(session_id, events, expected_index, trusted=trusted)

    async def append_many(self, batches: Sequence[AppendBatch]) -> list[AppendResult | StoreError]:
        """Each shard's batches in one ``append_many`` of that shard (concurrently); results in order."""
        checked = prepare_all(batches)  # the same refusals as one store, before any shard writes
        results: list[AppendResult | StoreError | None] = [None] * len(checked)
        by_shard: dict[int, list[int]] = {}
        for position, batch in enumerate(checked):
            if isinstance(batch, StoreError):
                results[position] = batch
            else:
                by_shard.setdefault(shard_index(batch.session_id, len(self.shards)), []).append(position)
        outcomes = await asyncio.gather(
            *(self.shards[k].append_many([batches[p] for p in positions]) for k, positions in by_shard.items())
        )
        for positions, outcome in zip(by_shard.values(), outcomes, strict=True):
            for position, result in zip(positions, outcome, strict=True):
                results[position] = result
        return [r for r in results if r is not None]

    async def fork(self, source: str, target: str, through: int) -> AppendResult:
        """Start ``target`` as a copy of ``source`` through ``through``, on ``target``'s own shard."""
        src, dst, point = check_fork(source, target, through)
        if self.shard(src) is self.shard(dst):
            return await self.shard(src).fork(src, dst, point)
        return await fork_by_copy(self, src, dst, point)

    async def save_snapshot(self, session_id: str, reducer: str, index: int, data: bytes) -> None:
        """Store the snapshot beside the session's log."""
        await self.shard(session_id).save_snapshot(session_id, reducer, index, data)

    async def delete_snapshot(self, session_id: str, reducer: str) -> None:
        """Forget the snapshot on the session's shard."""
        await self.shard(session_id).delete_snapshot(session_id, reducer)

    # -- reads -------------------------------------------------------------------------------

    async def read(self, session_id: str, after: int = 0, limit: int | None = None) -> list[Event]:
        """The session's events, from its shard."""
        return await self.shard(session_id).read(session_id, after, limit)

    async def last_index(self, session_id: str) -> int:
        """The session's last index, from its shard."""
        return await self.shard(session_id).last_index(session_id)

    async def list_sessions(
        self, prefix: str | None = None, after: str | None = None, limit: int = 100
    ) -> list[SessionSummary]:
        """Every shard's first ``limit`` sessions in id order, merged: the first ``limit`` of all."""
        listed = await asyncio.gather(*(s.list_sessions(prefix, after, limit) for s in self.shards))
        merged = sorted((summary for part in listed for summary in part), key=lambda s: s.session_id)
        return merged[:limit]

    async def load_snapshot(self, session_id: str, reducer: str) -> Snapshot | None:
        """The snapshot, from the session's shard."""
        return await self.shard(session_id).load_snapshot(session_id, reducer)

    async def stored_bytes(self) -> int:
        """The bytes every shard that can say so takes, summed."""
        sizes = await asyncio.gather(*(s.stored_bytes() for s in self.shards if isinstance(s, Measurable)))
        return sum(sizes)

    async def close(self) -> None:
        """Close every shard."""
        await asyncio.gather(*(s.close() for s in self.shards))


class FollowableShardedStore(ShardedStore):
    """A sharded store whose shards all push their commits: ``follow`` asks the session's shard."""

    def follow(self, session_id: str, after: int = 0) -> AsyncGenerator[Event, None]:
        """The session's events after ``after``, then each new one as it commits (its shard's ``follow``)."""
        shard = self.shard(session_id)
        assert isinstance(shard, Followable)
        return shard.follow(session_id, after)

    def follow_groups(self, session_id: str, after: int = 0) -> AsyncGenerator[list[Event], None]:
        """``follow``'s events in the groups the session's shard reads them (one event a group if it cannot)."""
        shard = self.shard(session_id)
        assert isinstance(shard, Followable)
        return follow_in_groups(shard, session_id, after)


def sharded(shards: Sequence[EventStore], *, url: str | None = None) -> ShardedStore:
    """A ``ShardedStore`` over ``shards``, able to ``follow`` when every shard can."""
    if shards and all(isinstance(s, Followable) for s in shards):
        return FollowableShardedStore(shards, url=url)
    return ShardedStore(shards, url=url)
