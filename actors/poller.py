"""``Poller``: one long poll at a time per host, for every subscription and turn wait of this process.

The host remembers what a poller follows and how far it got (``actors.hub``), so each poll sends
only what changed and brings back only the sessions with news, and the ends of the turns this
process waits on. A host that restarted is registered again from "now" and its subscribers are
told to re-read the snapshot (a ``reset``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from actors.client import Mutation, Session, Subscription
from actors.errors import HostUnavailable
from actors.hub import WaitFailed
from actors.mutation import Batch
from actors.transport import Transport
from orchestrator.core.ids import new_id
from orchestrator.core.turn import TurnOutcome

__all__ = ["WAIT_WAKE", "Poller"]

WAIT_WAKE = 0.01
"""Seconds a new turn wait may ride on the next poll before the waiting poll is ended for it."""


class Poller:
    """One long poll at a time per host, for every session this process subscribes to on it.

    The host remembers what this poller follows and how far it got (``actors.hub``), so each
    poll sends only the sessions added or removed since the last one, and brings back only the
    sessions with news. The same polls carry the turns this process waits on (``Turn.finished``)
    and bring back how they ended: a turn costs no long-held call of its own.
    """

    def __init__(self, transport: Transport, host: str) -> None:
        self.transport = transport
        self.host = host
        self.id = new_id("poller")
        self.cursors: dict[str, int] = {}
        self.subscribers: dict[str, list[Subscription]] = {}
        self.task: asyncio.Task[None] | None = None
        self._added: dict[str, int] = {}
        self._removed: set[str] = set()
        self._full = True  # the next poll registers everything (first poll, or a host restart)
        self._polling = False
        self._resets: set[str] = set()
        self.waits: dict[str, tuple[str, str, asyncio.Future[TurnOutcome | WaitFailed]]] = {}
        """Turns waited on: input id -> session id, agent key, and the future of the outcome."""
        self._new_waits: dict[str, tuple[str, str]] = {}
        self._wake_timer: asyncio.TimerHandle | None = None

    def wait(self, session: Session, input_id: str) -> asyncio.Future[TurnOutcome | WaitFailed]:
        """How the turn that admits ``input_id`` ends, delivered by a later poll."""
        known = self.waits.get(input_id)
        if known is not None and not known[2].cancelled():
            return known[2]
        future: asyncio.Future[TurnOutcome | WaitFailed] = asyncio.get_running_loop().create_future()
        self.waits[input_id] = (session.id, session.agent_key, future)
        self._new_waits[input_id] = (session.id, session.agent_key)
        if self._polling and self._wake_timer is None:
            # A poll waiting at the host carries no news of this wait: if no reply comes back soon
            # (which would send it with the next poll), end the waiting poll.
            self._wake_timer = asyncio.get_running_loop().call_later(WAIT_WAKE, self._wake_for_waits)
        self._ensure_running()
        return future

    def _wake_for_waits(self) -> None:
        self._wake_timer = None
        if self._new_waits and self._polling:
            self.transport.wake(self.host, self.id)

    def _ensure_running(self) -> None:
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self._run())

    def add(self, subscription: Subscription) -> None:
        """Follow ``subscription``'s session on this host (a second subscriber shares the first's feed)."""
        session_id = subscription.session.id
        self.subscribers.setdefault(session_id, []).append(subscription)
        cursor = self.cursors.get(session_id)
        if cursor is not None and cursor >= 0:  # already followed: this subscriber starts after `cursor`
            subscription.cursor = cursor
            subscription.registered.set()
        elif cursor is None:
            self.cursors[session_id] = -1
            self._added[session_id] = -1
            self._removed.discard(session_id)
            if self._polling:
                self.transport.wake(self.host, self.id)  # the waiting poll returns; the next sends it
        self._ensure_running()

    def fresh(self, session_id: str) -> bool:
        """Whether this poller neither follows ``session_id`` nor has a change of it on the way."""
        return session_id not in self.cursors and session_id not in self._removed

    def adopt(self, subscription: Subscription, cursor: int) -> bool:
        """Feed ``subscription`` from ``cursor`` on: the host registered it (``MutationHub.follow``).

        ``False`` when the session became followed meanwhile (another subscription of this
        process): then subscribe through a poll (``add``) instead.
        """
        session_id = subscription.session.id
        if not self.fresh(session_id):
            return False
        self.subscribers[session_id] = [subscription]
        self.cursors[session_id] = cursor
        subscription.cursor = cursor
        subscription.registered.set()
        self._ensure_running()
        return True

    def remove(self, subscription: Subscription) -> None:
        """Stop feeding ``subscription``; the host drops a session nobody here follows any more."""
        session_id = subscription.session.id
        subs = self.subscribers.get(session_id, [])
        if subscription in subs:
            subs.remove(subscription)
        if not subs:
            self.subscribers.pop(session_id, None)
            if self.cursors.pop(session_id, None) is not None:
                self._added.pop(session_id, None)
                self._removed.add(session_id)
            if not self.subscribers and not self.waits and self._polling:
                self.transport.wake(self.host, self.id)  # nothing left to wait for: send the removals

    async def _run(self) -> None:
        transport = self.transport
        # Removals go out even after the last subscription closed: the host then drops the
        # sessions' rings at once, not when this client polls again.
        while self.subscribers or self.waits or (self._removed and not self._full):
            full = self._full
            added = dict(self.cursors) if full else self._added
            removed = [] if full else list(self._removed)
            waits = {i: (sid, key) for i, (sid, key, _) in self.waits.items()} if full else self._new_waits
            self._added, self._removed, self._full, self._new_waits = {}, set(), False, {}
            self._polling = True
            following = bool(self.subscribers or self.waits)
            timeout = 5.0 if following and not added else 0.0
            try:
                reply = await transport.poll(self.host, self.id, added, removed, timeout, full, waits)
            except HostUnavailable:
                # The host restarted and lost its rings: register again from "now", and once the
                # host has told us where "now" is, tell subscribers to re-read the snapshot.
                # (A snapshot read before re-registering could miss what happens in between.)
                await transport.wait_ready(self.host)
                self._restart(reset=True)
                continue
            except asyncio.CancelledError:
                return
            finally:
                self._polling = False
            if reply is None:  # the host does not know this poller (it restarted between polls)
                self._restart(reset=False)
                continue
            self._deliver(*reply)
            # Not kept through the next poll: the reply's mutation dicts (copied into each batch)
            # would stay in memory while it waits, a whole reply's worth at the driver's peak.
            reply = None

    def _deliver(
        self, news: dict[str, tuple[int, list[dict[str, Any]]]], outcomes: dict[str, TurnOutcome | WaitFailed]
    ) -> None:
        """Hand one reply's batches to the subscribers and its turn outcomes to the waiters."""
        for input_id, outcome in outcomes.items():
            entry = self.waits.pop(input_id, None)
            if entry is not None and not entry[2].done():
                entry[2].set_result(outcome)
        for session_id, (cursor, mutations) in news.items():
            if session_id not in self.cursors:
                continue
            previous = self.cursors[session_id]
            self.cursors[session_id] = cursor
            batch = Batch(Mutation(m) for m in mutations)
            batch.cursor = cursor
            if session_id in self._resets:
                self._resets.discard(session_id)
                batch.insert(0, Mutation(type="reset", index=cursor))
            advanced = cursor > previous >= 0  # an empty batch still tells how far the log went
            subs = self.subscribers.get(session_id, ())
            # A live view applies its batch in this call (``Subscription.attach``): one that closes
            # a subscription of this session meanwhile must not make the loop skip the next one.
            for sub in subs if len(subs) < 2 else tuple(subs):
                if not sub.registered.is_set():
                    sub.cursor = cursor
                    sub.registered.set()
                    if batch:
                        sub.feed(batch)
                elif batch or advanced:
                    sub.feed(batch)

    def _restart(self, *, reset: bool) -> None:
        """Register every session again; with ``reset``, from "now", and re-read the snapshot."""
        self._full = True
        self._added.clear()
        self._removed.clear()
        if reset:
            for session_id in self.cursors:
                self.cursors[session_id] = -1
                self._resets.add(session_id)

    async def close(self) -> None:
        """Stop polling; the turns still waited on are cancelled (nobody will deliver them)."""
        if self._wake_timer is not None:
            self._wake_timer.cancel()
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        for _, _, future in self.waits.values():
            future.cancel()  # the runtime is closing: nobody will deliver these
        self.waits.clear()
