"""The mutation hub of a host: what subscribers long-poll for, per session.

Subscribers register interest by polling; while a session has interest, every append's
mutations are kept in a bounded ring (by log index) and wake the pollers waiting on it. A poller
that asks for an index older than the ring holds gets a ``reset`` mutation: it re-reads the
snapshot and carries on from there (subscribe, then snapshot, then drop what it already holds).
Nothing is polled in a loop: pollers wait on an event until data arrives or their timeout ends.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MutationHub"]

Mutation = dict[str, Any]


_WINDOW = 5.0
"""Seconds of one window of poll cursors (see ``MutationHub._prune``)."""


@dataclass(slots=True)
class _Channel:
    ring: deque[tuple[int, list[Mutation]]] = field(default_factory=deque)
    interest_until: float = 0.0
    last_index: int = 0
    dropped_before: int = 0
    window_start: float = 0.0
    """When the current window of polls began (windows are ``_WINDOW`` seconds)."""
    window_floor: int | None = None
    """The lowest cursor polled in the current window."""
    previous_floor: int | None = None
    """The lowest cursor polled in the window before it."""


class MutationHub:
    """Per-session rings of recent mutations, and the pollers waiting on them."""

    def __init__(self, *, ring_size: int = 1024, interest_seconds: float = 30.0, linger: float = 0.002) -> None:
        self.ring_size = ring_size
        self.interest_seconds = interest_seconds
        self.linger = linger
        self._channels: dict[str, _Channel] = {}
        self._waiters: dict[str, set[asyncio.Event]] = {}

    def interested(self, session_id: str) -> bool:
        """Whether someone polled this session recently (only then are mutations kept)."""
        channel = self._channels.get(session_id)
        return channel is not None and channel.interest_until >= time.monotonic()

    def publish(self, session_id: str, index: int, mutations: list[Mutation]) -> None:
        """Record one append's mutations and wake the pollers of this session."""
        channel = self._channels.get(session_id)
        if channel is None:
            return
        channel.last_index = index
        if mutations:
            channel.ring.append((index, mutations))
            while len(channel.ring) > self.ring_size:
                dropped, _ = channel.ring.popleft()
                channel.dropped_before = dropped
        for event in self._waiters.get(session_id, ()):
            event.set()

    def note_index(self, session_id: str, index: int) -> None:
        """Advance a channel's index without mutations (an append nobody needs to see)."""
        channel = self._channels.get(session_id)
        if channel is not None:
            channel.last_index = index

    def forget(self, session_id: str) -> None:
        """Drop a session's ring (it deactivated); pollers keep waiting and get a reset later."""
        channel = self._channels.get(session_id)
        if channel is not None:
            channel.ring.clear()
            channel.dropped_before = channel.last_index

    def _collect(self, cursors: dict[str, int]) -> tuple[dict[str, tuple[int, list[Mutation]]], bool]:
        found: dict[str, tuple[int, list[Mutation]]] = {}
        anything = False
        for session_id, after in cursors.items():
            channel = self._channels.get(session_id)
            if channel is None:
                found[session_id] = (after, [])
                continue
            if after < channel.dropped_before:
                found[session_id] = (channel.last_index, [{"type": "reset", "index": channel.last_index}])
                anything = True
                continue
            ring = channel.ring
            newer = 0  # entries after the cursor: count back from the end (cursors are near it)
            for index, _ in reversed(ring):
                if index <= after:
                    break
                newer += 1
            batch: list[Mutation] = []
            cursor = after
            if newer:
                anything = True
                for position in range(len(ring) - newer, len(ring)):
                    index, mutations = ring[position]
                    batch.extend(mutations)
                    cursor = index  # the append's index: its last events may carry no mutation
            found[session_id] = (cursor, batch)
        return found, anything

    def _register(self, cursors: dict[str, int], index_of: dict[str, int]) -> None:
        now = time.monotonic()
        until = now + self.interest_seconds
        for session_id, after in cursors.items():
            channel = self._channels.get(session_id)
            if channel is None:
                channel = self._channels[session_id] = _Channel()
                channel.last_index = index_of.get(session_id, 0)
                # A subscriber asking from an index before what this host holds must re-snapshot.
                channel.dropped_before = channel.last_index if 0 <= after < channel.last_index else 0
            channel.interest_until = until
            self._prune(channel, after, now)

    def _prune(self, channel: _Channel, after: int, now: float) -> None:
        """Drop ring entries every recent poller has already received (memory stays small).

        Constant time per poll: the lowest cursor of this window and of the one before it bound
        what is kept, so a poller that polled within the last ``_WINDOW`` seconds misses
        nothing. One quiet for longer may find its entries gone and gets a reset (re-snapshot).
        """
        if now - channel.window_start >= _WINDOW:
            channel.previous_floor = channel.window_floor
            channel.window_floor = None
            channel.window_start = now
        if channel.window_floor is None or after < channel.window_floor:
            channel.window_floor = after
        floor = channel.window_floor
        if channel.previous_floor is not None and channel.previous_floor < floor:
            floor = channel.previous_floor
        ring = channel.ring
        while ring and ring[0][0] <= floor:
            ring.popleft()

    async def poll(
        self, cursors: dict[str, int], timeout: float, index_of: dict[str, int]
    ) -> dict[str, tuple[int, list[Mutation]]]:
        """Per session: the new cursor and the mutations after the old one.

        Waits up to ``timeout`` for the first mutation to arrive. A cursor of ``-1`` means "from
        now" (the reply carries the concrete cursor to poll with next). ``index_of`` gives the
        current index of sessions this host has active, so a first poll knows where it starts.
        """
        resolved = {sid: (index_of.get(sid, 0) if after < 0 else after) for sid, after in cursors.items()}
        self._register(resolved, index_of)
        found, anything = self._collect(resolved)
        if anything or timeout <= 0 or any(after < 0 for after in cursors.values()):
            return found  # a new subscriber learns its concrete cursor at once
        event = asyncio.Event()
        for session_id in resolved:
            self._waiters.setdefault(session_id, set()).add(event)
        try:
            try:
                await asyncio.wait_for(event.wait(), timeout)
            except TimeoutError:
                return found
            if self.linger > 0:
                await asyncio.sleep(self.linger)  # let the rest of a burst arrive: fewer, larger replies
            return self._collect(resolved)[0]
        finally:
            for session_id in resolved:
                waiters = self._waiters.get(session_id)
                if waiters is not None:
                    waiters.discard(event)
                    if not waiters:
                        del self._waiters[session_id]

    def sessions(self) -> Iterable[str]:
        """Sessions with a channel."""
        return self._channels.keys()
