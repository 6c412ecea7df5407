"""API keys and session ownership, kept in the event store.

A caller is identified by the SHA-256 of its bearer token (the token itself is never stored).
With no keys configured the server is open: every caller is the same anonymous owner and may
use every session.

Ownership is claimed atomically through the store's unique event ids: creating session ``S``
appends an event with id ``troupe:owner:S`` to the log ``troupe:keys:<key hash>``. Event ids are
unique across the store, so when two keys race for one id exactly one append succeeds (the other
gets ``PartialDuplicateBatch``), and a retried claim by the same key is an idempotent replay. The
key's log doubles as its session list (``GET /api/sessions``). For lookups, the owner is also
written as the snapshot ``(troupe:owner:S, "owner")`` (the key hash) and cached in memory; a claim
that crashed between the two writes heals on the owner's next create.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from orchestrator.core.errors import PartialDuplicateBatch
from orchestrator.core.events import Event
from orchestrator.store.base import EventStore

__all__ = ["ANONYMOUS", "Keys", "OwnedSession", "Owners", "key_hash"]

OWNED = "troupe.session.owned"
"""The event type of an ownership claim (in a key's own log, never in a session's)."""


def key_hash(key: str) -> bytes:
    """What identifies a key: its SHA-256."""
    return hashlib.sha256(key.encode()).digest()


ANONYMOUS: bytes = key_hash("")
"""The owner when no keys are configured."""


class Keys:
    """The configured API keys; ``check`` maps a bearer token to its owner hash."""

    def __init__(self, keys: Sequence[str]) -> None:
        """Accept ``keys`` (none: the server is open)."""
        given = list(keys)
        if not all(isinstance(k, str) and k for k in given):
            raise ValueError("api_keys must be non-empty strings")
        self._hashes = [key_hash(k) for k in given]

    @property
    def enabled(self) -> bool:
        """Whether callers must present a key."""
        return bool(self._hashes)

    def check(self, token: str | None) -> bytes | None:
        """The owner hash of ``token``, or ``None`` when it is not a configured key."""
        if not self.enabled:
            return ANONYMOUS
        if not token:
            return None
        digest = key_hash(token)
        found = None
        for known in self._hashes:  # compare with every key, in constant time each
            if hmac.compare_digest(known, digest):
                found = known
        return found


@dataclass(frozen=True, slots=True)
class OwnedSession:
    """One row of a key's session list."""

    id: str
    """The session id."""
    created_at: float
    """When the key created it (seconds since the epoch)."""


class Owners:
    """Who owns which session (see the module docstring)."""

    def __init__(
        self, store: EventStore, *, open_access: bool, cache_size: int = 10_000, clock: Callable[[], float] = time.time
    ) -> None:
        """Keep ownership in ``store``; ``open_access`` lets every caller use every session."""
        self.store = store
        self.open_access = open_access
        self.cache_size = cache_size
        self.clock = clock
        self._cache: OrderedDict[str, bytes] = OrderedDict()

    @staticmethod
    def _log(owner: bytes) -> str:
        return f"troupe:keys:{owner.hex()}"

    async def owner(self, session_id: str) -> bytes | None:
        """The owner hash of ``session_id`` (``None``: no key owns it)."""
        cached = self._cache.get(session_id)
        if cached is not None:
            self._cache.move_to_end(session_id)
            return cached
        snapshot = await self.store.load_snapshot(f"troupe:owner:{session_id}", "owner")
        if snapshot is None:
            return None
        self._remember(session_id, snapshot.data)
        return snapshot.data

    def _remember(self, session_id: str, owner: bytes) -> None:
        self._cache[session_id] = owner
        self._cache.move_to_end(session_id)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    async def allowed(self, session_id: str, owner: bytes) -> bool:
        """Whether ``owner`` may use the session."""
        if self.open_access:
            return True
        found = await self.owner(session_id)
        return found is not None and hmac.compare_digest(found, owner)

    async def claim(self, session_id: str, owner: bytes) -> Literal["created", "exists", "taken"]:
        """Make ``owner`` the session's owner: ``created``, ``exists`` (already its own) or ``taken``."""
        found = await self.owner(session_id)
        if found is not None:
            return "exists" if hmac.compare_digest(found, owner) else "taken"
        if not self.open_access and await self.store.last_index(session_id) > 0:
            return "taken"  # created elsewhere (the Python API, the CLI): it belongs to no key
        claim = Event(f"troupe:owner:{session_id}", OWNED, {"sessionId": session_id}, self.clock())
        try:
            result = await self.store.append(self._log(owner), [claim])
        except PartialDuplicateBatch:
            return "taken"  # another key's claim won
        await self.store.save_snapshot(f"troupe:owner:{session_id}", "owner", 0, owner)
        self._remember(session_id, owner)
        return "exists" if result.duplicate else "created"

    async def sessions(self, owner: bytes, after: str | None, limit: int) -> list[OwnedSession]:
        """The owner's sessions in id order, after the keyset cursor ``after``."""
        events = await self.store.read(self._log(owner))
        rows = sorted(
            (OwnedSession(str(e.payload["sessionId"]), e.at) for e in events if e.type == OWNED),
            key=lambda row: row.id,
        )
        if after is not None:
            rows = [row for row in rows if row.id > after]
        return rows[:limit]
