"""The mutation hub of a host: what subscribers long-poll for, per session.

A client process polls each host through one *poller* (an id it picks). The host keeps, per
poller, the sessions it follows and how far it has received each one; a poll sends only what
changed in that set (sessions added or removed) and returns only the sessions with news. So a
poll costs what changed, not how many sessions the client follows: a client with a thousand
subscriptions on a host sends a few bytes per poll, and an append wakes only the pollers of its
session.

While a session has a poller seen recently, every append's mutations are kept in a bounded ring
(by log index). A poller whose cursor is older than the ring holds gets a ``reset`` mutation: it
re-reads the snapshot and carries on from there (subscribe, then snapshot, then drop what it
already holds). A host that restarted does not know the poller: the poll answers ``None`` and
the client registers again. Nothing is polled in a loop: a poll waits on its poller's event
until news arrives, the client wakes it (a new subscription), or its timeout ends.

The same poll carries the ends of the turns a client waits on (``Turn.finished``): the host
settles an outcome into the poller (``settle``) and the next reply takes it along, so waiting
on a turn costs no call of its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["REPLY_MUTATIONS", "REPLY_MUTATIONS_MAX", "MutationHub", "WaitFailed"]

REPLY_MUTATIONS: Final = 512
"""Mutations a poll reply takes at most while its client keeps up (a session's batch is never
split: one may go over).

The sessions left wait first in line for the next poll, which returns at once. A reply of 512
pickles to ~30-70 KB (a mutation is ~60-130 bytes), under Ray's limit for returning a value
inline (100 KiB). A larger value goes through the object store, and the shared pages it touches
stay resident in the host and the client: in `bench shop` N=1000, where replies reached 4,500
mutations and 420 KB, 2.3-2.8 KB per session in each process after the run (0.5-0.6 with the
limit). A client that falls behind gets larger replies (``REPLY_MUTATIONS_MAX``)."""

REPLY_MUTATIONS_MAX: Final = 8192
"""Mutations a poll reply may grow to while its client has a backlog on this host.

Each reply that leaves sessions in line doubles the next one's budget, up to this; a reply that
empties the line puts it back to ``REPLY_MUTATIONS``. With a fixed 512, a host's news reached a
client at most 512 per round trip, and under load the round trip grows (120-130 ms at N=3000 on
a 2-vCPU VM: each host had ~1,400 sessions in line at every reply): the backlog, and the first
text's wait, grew through the run (`bench shop` N=3000: first text p50 11.0-13.1 s, p99 20-25 s).
With the budget growing to 8192: 1.4 s and 2.1 s (to 2048: 1.9 s and 6.7 s). Replies over 100 KiB
cost memory while they are in flight (1-6 KB per session at N=1000). A client that keeps up still
gets replies of at most 512."""

Mutation = dict[str, Any]
Reply = dict[str, tuple[int, list[Mutation]]]
"""Per session with news: the poller's new cursor and the mutations after its old one."""


@dataclass(frozen=True, slots=True)
class WaitFailed:
    """A turn's end could not be waited on here (the session moved, say): ask its host directly."""

    reason: str


@dataclass(slots=True)
class _Channel:
    ring: list[tuple[int, list[Mutation]]] = field(default_factory=list)
    """Appends not yet received by every poller, oldest first: a list, not a deque (a followed
    session keeps its channel, and an empty deque is 760 bytes; the ring is short, as pollers keep up)."""
    last_index: int = 0
    dropped_before: int = 0
    """The ring holds nothing at or before this index: a cursor below it gets a reset."""
    pollers: tuple[str, ...] = ()
    """Who follows the session: nearly always one poller (a tuple of one is 48 bytes, a set 216)."""


@dataclass(slots=True)
class _Poller:
    cursors: dict[str, int] = field(default_factory=dict)
    """Per followed session: the index it has received through."""
    dirty: dict[str, None] = field(default_factory=dict)
    """Followed sessions with something to send, in the order they got it (a reply that reached
    ``reply_mutations`` leaves the rest first in line for the next)."""
    event: asyncio.Event = field(default_factory=asyncio.Event)
    seen: float = 0.0
    """When its client last polled: at a poll's start and end (see ``waiting``)."""
    waiting: bool = False
    """A poll of it waits here for news now: its client is there, however long ago it was sent."""
    budget: int = REPLY_MUTATIONS
    """Mutations its next reply may take: doubled while replies leave sessions in line."""
    outcomes: dict[str, Any] = field(default_factory=dict)
    """Turns its client waits on that have ended: input id -> how the turn ended."""


class MutationHub:
    """Per-session rings of recent mutations, and the pollers that follow them."""

    def __init__(
        self,
        *,
        ring_size: int = 1024,
        interest_seconds: float = 30.0,
        linger: float = 0.002,
        reply_mutations: int = REPLY_MUTATIONS,
        reply_mutations_max: int = REPLY_MUTATIONS_MAX,
    ) -> None:
        if reply_mutations < 1:
            raise ValueError(f"reply_mutations must be at least 1 (mutations per poll reply), not {reply_mutations}")
        if reply_mutations_max < reply_mutations:
            raise ValueError(
                f"reply_mutations_max ({reply_mutations_max}) must be at least reply_mutations ({reply_mutations}): "
                "it is what a reply grows to while its client has a backlog"
            )
        self.ring_size = ring_size
        self.reply_mutations = reply_mutations
        self.reply_mutations_max = reply_mutations_max
        self.interest_seconds = interest_seconds
        self.linger = linger
        self._channels: dict[str, _Channel] = {}
        self._pollers: dict[str, _Poller] = {}
        self._waiting = 0  # polls waiting for news now
        self._swept = time.monotonic()

    def interested(self, session_id: str) -> bool:
        """Whether a poller seen recently follows this session (only then are mutations kept)."""
        channel = self._channels.get(session_id)
        if channel is None or not channel.pollers:
            return False
        since = time.monotonic() - self.interest_seconds
        pollers = self._pollers
        return any((p := pollers.get(pid)) is not None and (p.waiting or p.seen >= since) for pid in channel.pollers)

    def publish(self, session_id: str, index: int, mutations: list[Mutation]) -> None:
        """Record one append's mutations and wake the pollers of this session."""
        channel = self._channels.get(session_id)
        if channel is None:
            return
        channel.last_index = index
        # An append that changes nothing a client sees is still news: its subscribers learn the
        # index, so a reader waiting for the log to reach it is not left waiting.
        ring = channel.ring
        ring.append((index, mutations))
        excess = len(ring) - self.ring_size
        if excess > 0:
            channel.dropped_before = ring[excess - 1][0]
            del ring[:excess]
        self._wake(channel, session_id)

    def note_index(self, session_id: str, index: int) -> None:
        """Advance a channel's index without mutations (an append nobody needs to see).

        The channel may still have pollers, only none seen within ``interest_seconds`` (a client,
        or this host, stalled). This append's mutations are not kept, so a poller that comes
        back from before it must re-read the snapshot: the ring is dropped through ``index``, and
        its pollers are told. Without that, its next poll would bring the appends after this one
        and skip this one (or, with nothing appended after, wait without news).
        """
        channel = self._channels.get(session_id)
        if channel is not None:
            channel.last_index = index
            channel.ring.clear()
            channel.dropped_before = index
            self._wake(channel, session_id)  # a poll waiting meanwhile hands the reset out now

    def _wake(self, channel: _Channel, session_id: str) -> None:
        """The session has news for each of its pollers: mark it and end their waiting polls."""
        for pid in channel.pollers:
            poller = self._pollers.get(pid)
            if poller is not None:
                poller.dirty[session_id] = None
                poller.event.set()

    def forget(self, session_id: str) -> None:
        """Drop a session's ring (it deactivated); its pollers get a reset if they fell behind."""
        channel = self._channels.get(session_id)
        if channel is not None:
            channel.ring.clear()
            channel.dropped_before = channel.last_index

    def knows(self, poller_id: str) -> bool:
        """Whether this hub has seen ``poller_id`` (a host that restarted has not)."""
        return poller_id in self._pollers

    def settle(self, poller_id: str, input_id: str, outcome: Any) -> None:
        """A turn ``poller_id`` waits on has ended: its next poll reply carries ``outcome``."""
        poller = self._pollers.get(poller_id)
        if poller is not None:
            poller.outcomes[input_id] = outcome
            poller.event.set()

    def take_outcomes(self, poller_id: str) -> dict[str, Any]:
        """The turn outcomes settled for ``poller_id`` since its last poll (each is sent once)."""
        poller = self._pollers.get(poller_id)
        if poller is None or not poller.outcomes:
            return {}
        outcomes, poller.outcomes = poller.outcomes, {}
        return outcomes

    def follow(self, poller_id: str, session_id: str, index: int) -> bool:
        """Follow ``session_id`` for ``poller_id`` from ``index`` on, outside a poll; ``False``: unknown poller.

        A host calls this with the index of the snapshot it answers in the same turn of its loop,
        so the client holds the snapshot and receives every mutation after it: subscribe, then
        snapshot, in one call. A poller this hub has not seen (a first poll not yet in, a host
        that restarted) is not registered here: its client must subscribe through a poll.
        """
        poller = self._pollers.get(poller_id)
        if poller is None:
            return False
        poller.seen = time.monotonic()
        self._follow(poller_id, poller, session_id, index, index)
        poller.dirty.pop(session_id, None)  # the client has its cursor: nothing to tell it yet
        return True

    def wake(self, poller_id: str) -> None:
        """End the poller's waiting poll now (its client has new subscriptions to send)."""
        poller = self._pollers.get(poller_id)
        if poller is not None:
            poller.event.set()

    async def poll(
        self,
        poller_id: str,
        changes: Mapping[str, int],
        removed: Sequence[str],
        timeout: float,
        index_of: Mapping[str, int],
        *,
        full: bool = False,
    ) -> Reply | None:
        """The news for ``poller_id``'s sessions, waiting up to ``timeout`` for some.

        Args:
            poller_id: the client's poller (one per client process and host).
            changes: sessions to follow from now on (or again), each with the index the client
                has; ``-1`` means "from now" (the reply carries the concrete cursor).
            removed: sessions to stop following.
            timeout: seconds to wait for news when there is none yet.
            index_of: the current index of the ``changes`` sessions active on this host, so a
                first poll knows where "now" is.
            full: ``changes`` is every session the client follows (its first poll, or after the
                host restarted).

        Returns:
            Per session with news, the new cursor and the mutations after the old one; ``None``
            when this hub does not know the poller and ``full`` is false (register again).
        """
        now = time.monotonic()
        self._sweep(now)
        poller = self._pollers.get(poller_id)
        if poller is None:
            if not full:
                return None
            poller = self._pollers[poller_id] = _Poller(budget=self.reply_mutations)
        poller.seen = now
        for session_id in removed:
            self._unfollow(poller_id, poller, session_id)
        for session_id, after in changes.items():
            self._follow(poller_id, poller, session_id, after, index_of.get(session_id, 0))
        if not poller.dirty and not poller.outcomes and timeout > 0 and not changes:
            # The event stays set from a publish or a wake that came before this poll: no wait then.
            # A poll waiting here counts as interest however long it waits: past interest_seconds
            # (a short one, or a host frozen by a stall) its client is still there for the news.
            self._waiting += 1
            poller.waiting = True
            try:
                await asyncio.wait_for(poller.event.wait(), timeout)
            except TimeoutError:
                return {}
            finally:
                self._waiting -= 1
                poller.waiting = False
                poller.seen = time.monotonic()
            if self.linger > 0:
                await asyncio.sleep(self.linger)  # let the rest of a burst arrive: fewer, larger replies
        poller.event.clear()
        return self._collect(poller)

    def _follow(self, poller_id: str, poller: _Poller, session_id: str, after: int, index: int) -> None:
        channel = self._channels.get(session_id)
        if channel is None:
            channel = self._channels[session_id] = _Channel(last_index=index)
            # A client asking from before what this host holds must re-read the snapshot.
            channel.dropped_before = index if 0 <= after < index else 0
        if poller_id not in channel.pollers:
            channel.pollers = (*channel.pollers, poller_id)
        poller.cursors[session_id] = channel.last_index if after < 0 else after
        poller.dirty[session_id] = None  # the reply tells the client its cursor

    def _unfollow(self, poller_id: str, poller: _Poller, session_id: str) -> None:
        poller.cursors.pop(session_id, None)
        poller.dirty.pop(session_id, None)
        channel = self._channels.get(session_id)
        if channel is not None:
            channel.pollers = tuple(pid for pid in channel.pollers if pid != poller_id)
            if not channel.pollers:
                del self._channels[session_id]

    def _collect(self, poller: _Poller) -> Reply:
        found: Reply = {}
        dirty, poller.dirty = poller.dirty, {}
        budget, sent = poller.budget, 0
        for session_id in dirty:
            if sent >= budget:
                poller.dirty[session_id] = None  # first in line for the next poll, which returns at once
                continue
            after = poller.cursors.get(session_id)
            channel = self._channels.get(session_id)
            if after is None or channel is None:
                continue
            if after < channel.dropped_before:
                poller.cursors[session_id] = channel.last_index
                found[session_id] = (channel.last_index, [{"type": "reset", "index": channel.last_index}])
                continue
            ring = channel.ring
            newer = 0  # entries after the cursor: count back from the end (cursors are near it)
            for index, _ in reversed(ring):
                if index <= after:
                    break
                newer += 1
            batch: list[Mutation] = []
            cursor = after
            for position in range(len(ring) - newer, len(ring)):
                index, mutations = ring[position]
                batch.extend(mutations)
                cursor = index  # the append's index: its last events may carry no mutation
            poller.cursors[session_id] = cursor
            found[session_id] = (cursor, batch)
            sent += len(batch)
            self._prune(channel, session_id)
        # Sessions left in line: the client is behind on this host, and a reply a round trip
        # cannot keep up with a backlog that grows meanwhile. Caught up: small replies again.
        poller.budget = min(budget * 2, self.reply_mutations_max) if poller.dirty else self.reply_mutations
        return found

    def _prune(self, channel: _Channel, session_id: str) -> None:
        """Drop the ring entries every poller of the session has received."""
        floor: int | None = None
        for pid in channel.pollers:
            poller = self._pollers.get(pid)
            cursor = None if poller is None else poller.cursors.get(session_id)
            if cursor is not None and (floor is None or cursor < floor):
                floor = cursor
        if floor is None:
            return
        ring = channel.ring
        received = 0
        while received < len(ring) and ring[received][0] <= floor:
            received += 1
        if received:
            channel.dropped_before = ring[received - 1][0]  # a poller joining from before it must re-snapshot
            del ring[:received]

    def _sweep(self, now: float) -> None:
        """Forget pollers not seen for ``interest_seconds`` (their clients left), now and then."""
        if now - self._swept < self.interest_seconds:
            return
        self._swept = now
        since = now - self.interest_seconds
        for pid in [pid for pid, p in self._pollers.items() if p.seen < since and not p.waiting]:
            poller = self._pollers.pop(pid)
            for session_id in list(poller.cursors):
                self._unfollow(pid, poller, session_id)

    def sessions(self) -> Iterable[str]:
        """Sessions someone follows."""
        return self._channels.keys()

    def stats(self) -> dict[str, int]:
        """What the hub holds: ``followed`` sessions, known ``pollers``, appends ``kept`` in rings.

        Each returns to zero when nobody follows anything (long-running hosts keep nothing).
        ``waiting``: polls waiting for news now (held open until news, a wake or their timeout).
        """
        return {
            "followed": len(self._channels),
            "pollers": len(self._pollers),
            "waiting": self._waiting,
            "kept": sum(len(channel.ring) for channel in self._channels.values()),
        }
