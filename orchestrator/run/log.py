"""``SessionLog``: one session's durable log and its fold, kept in step.

Every change goes through ``append``: the events are written (one atomic batch, at the index the
fold reflects) and only then folded. So the in-memory state is always the fold of what is
durable, and a process that dies loses nothing that was acknowledged. ``state()`` answers with
the state and the index it reflects; ``state_at`` folds any reducer to any point of the log.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard, TypeVar

import structlog

from orchestrator.core._fast import fast_init
from orchestrator.core.actions import SessionAction
from orchestrator.core.aistate import AIState
from orchestrator.core.contract import Contract, Reducer
from orchestrator.core.errors import UsageError
from orchestrator.core.events import AppendResult, Event
from orchestrator.core.fold import evolve, fold_events, initial_state
from orchestrator.core.ids import derived_event_id
from orchestrator.core.snapshot import decode_state, encode_later, snapshot_key
from orchestrator.run.off_loop import OFF_LOOP_BYTES, OFF_LOOP_MESSAGES, off_loop
from orchestrator.store.base import EventStore, LogLoader
from orchestrator.store.base import Snapshot as StoredSnapshot

__all__ = ["SNAPSHOT_FRACTION", "Applied", "SessionLog", "Snapshot"]

S = TypeVar("S")

SNAPSHOT_FRACTION = 8
"""A long log is snapshotted again after an eighth of its length (``SessionLog.snapshot_gap``)."""

_log = structlog.get_logger("troupe.log")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A state and the log index it reflects (what ``session.state()`` returns)."""

    state: AIState
    index: int


@fast_init
@dataclass(frozen=True, slots=True)
class Applied:
    """One appended event and the session actions folding it applied to the conversation."""

    event: Event
    actions: list[SessionAction]
    state: AIState
    """The state right after this event (so mutations can be derived event by event)."""


class SessionLog:
    """A session's log and fold. Not safe for concurrent appends: its owner serializes them."""

    def __init__(
        self,
        store: EventStore,
        session_id: str,
        contract: Contract | None = None,
        *,
        snapshot_every: int = 256,
    ) -> None:
        if not session_id:
            raise UsageError("a session needs a non-empty id")
        self.store = store
        self.session_id = session_id
        self.contract = contract
        self.snapshot_every = snapshot_every
        self.state: AIState = initial_state(contract)
        self.index = 0
        self._snapshot_index = 0
        self._snapshotting: asyncio.Future[None] | None = None
        """The snapshot being taken behind the writes (``commit``), if one is."""
        self._snapshot_tried = 0
        """The index of the last snapshot taken behind the writes, stored or not (one that cannot be
        encoded, a state an app made unencodable, is not tried again at every write)."""

    @classmethod
    async def open(
        cls,
        store: EventStore,
        session_id: str,
        contract: Contract | None = None,
        *,
        fresh: bool = False,
        **options: Any,
    ) -> SessionLog:
        """Load the session: the newest valid snapshot, then every event after it.

        ``fresh``: the caller knows the log is empty (a sub-agent whose delegate call has just
        started it), so nothing is read. Were it wrong, the first append would meet the events
        already there and fail (``ConcurrencyConflict``, as a stale owner's does), and the log
        would be read then.
        """
        log = cls(store, session_id, contract, **options)
        if not fresh:
            await log.refresh()
        return log

    async def refresh(self) -> None:
        """Re-read the log (after another writer appended, or a ``ConcurrencyConflict``)."""
        snap, events = await _load(self.store, self.session_id, snapshot_key(self.contract))
        state, index = initial_state(self.contract), 0
        # A long conversation's snapshot is decoded, and the log's tail after it (up to an eighth of
        # the log) folded, off the loop: here they would hold every session of the process. An
        # app's reducer folds on the loop, where its author expects it to run.
        big = snap is not None and len(snap.data) >= OFF_LOOP_BYTES
        if snap is not None:
            data = snap.data
            decoded = await off_loop(lambda: decode_state(data), when=big, waited=True)
            if decoded is not None:
                state, index = decoded, snap.index
            else:  # a snapshot this version cannot read: the whole log
                events = await self.store.read(self.session_id)
        contract, start = self.contract, state
        pure = contract is None or contract.reducer is None
        self.state = await off_loop(lambda: fold_events(events, start, contract), when=big and pure, waited=True)
        self.index = events[-1].index if events else index
        self._snapshot_index = index

    def snapshot_gap(self) -> int:
        """How far the log runs past its last snapshot before the next is taken.

        ``snapshot_every`` events, or a ``SNAPSHOT_FRACTION`` of the log once that is more. A
        snapshot encodes the whole state, which grows with the conversation (a record per tool
        call, every message): at a fixed interval a long session would pay more per event the
        longer it got (``troupe bench long``). Spaced by a fraction of the log, its cost per event
        stays flat, and opening the session folds at most that fraction after the snapshot.
        """
        return max(self.snapshot_every, self.index // SNAPSHOT_FRACTION)

    def snapshot(self) -> Snapshot:
        """The current state and the index it reflects."""
        return Snapshot(self.state, self.index)

    def stamp(self, event: Event, offset: int, now: float) -> Event:
        """``event`` as the ``offset``-th (from 0) of the next batch: its id, time and index.

        A server event without an id gets ``troupe:<session>#<index>``, so retrying the same
        batch replays it.
        """
        index = self.index + offset + 1
        event_id = event.id or derived_event_id(self.session_id, index)
        # The typed payload goes along: stamping never decodes the wire dict again.
        return Event(event_id, event.type, event.payload, event.at or now, self.session_id, index, data=event.data)

    def fold(self, stamped: Sequence[Event], state: AIState | None = None) -> list[Applied]:
        """Fold stamped events over ``state`` (default: the current state), without writing."""
        current = self.state if state is None else state
        applied = []
        for event in stamped:
            current, actions = evolve(current, event, self.contract)
            applied.append(Applied(event, actions, current))
        return applied

    async def commit(self, stamped: Sequence[Event], applied: Sequence[Applied]) -> AppendResult:
        """Write a stamped batch whose fold is ``applied``; only then does the state move.

        An identical re-append of events already in the store returns the original result with
        ``duplicate=True`` and moves nothing (the log is re-read if it was ahead of us).

        Raises:
            ConcurrencyConflict: another writer appended; call ``refresh`` and decide again.
            PartialDuplicateBatch: an id was reused with other content.
        """
        result = await self.store.append(self.session_id, stamped, expected_index=self.index, trusted=True)
        if result.duplicate:
            if result.last_index > self.index:  # written by an earlier attempt we never saw confirmed
                await self.refresh()
            return result
        self.state = applied[-1].state
        self.index = result.last_index
        since = max(self._snapshot_index, self._snapshot_tried)
        if self.index - since >= self.snapshot_gap() and self._snapshotting is None:
            # Behind the writes, not in their way: the batch is durable and the state moved, and
            # a snapshot is only a cache of the fold (a failed one is taken again at the next gap).
            self._snapshotting = asyncio.ensure_future(self._snapshot_behind(self.state, self.index))
        return result

    async def append(self, events: Sequence[Event], *, now: float = 0.0) -> tuple[AppendResult, list[Applied]]:
        """Write ``events`` as one batch at the current index, then fold them (see ``commit``)."""
        stamped = [self.stamp(event, offset, now) for offset, event in enumerate(events)]
        applied = self.fold(stamped)
        result = await self.commit(stamped, applied)
        return result, ([] if result.duplicate else applied)

    async def save_snapshot(self) -> None:
        """Cache the current fold (skipped silently when the app state is not JSON-like).

        A snapshot taken behind the writes finishes first, so an older one never lands last.
        """
        await self.settle()
        await self._save(self.state, self.index)

    async def settle(self) -> None:
        """Wait for the snapshot being taken behind the writes, if any (closing waits for it)."""
        snapshotting = self._snapshotting
        if snapshotting is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(snapshotting)

    async def _snapshot_behind(self, state: AIState, index: int) -> None:
        try:
            await self._save(state, index)
        except Exception as error:  # a cache: the log is whole, and the next gap tries again
            _log.warning("snapshot_failed", session_id=self.session_id, index=index, error=str(error))
        finally:
            self._snapshot_tried = max(self._snapshot_tried, index)
            self._snapshotting = None

    async def _save(self, state: AIState, index: int) -> None:
        """Encode ``state`` (on the off-loop thread when it is large) and store it as of ``index``."""
        try:
            # The app's part is encoded here, as it is now (an app may change its own values in
            # place); Troupe's own, immutable, on the thread when the state is large.
            data = await off_loop(encode_later(state), when=len(state.messages) >= OFF_LOOP_MESSAGES)
        except (TypeError, ValueError):
            return
        await self.store.save_snapshot(self.session_id, snapshot_key(self.contract), index, data)
        self._snapshot_index = max(self._snapshot_index, index)

    async def state_at(self, reducer: Reducer[S] | None = None, *, through: int | None = None) -> tuple[Any, int]:
        """Fold ``reducer`` (default: the session fold) over the log through ``through``."""
        if reducer is None and (through is None or through >= self.index):
            return self.state, self.index
        limit = None if through is None else max(through, 0)
        events = await self.store.read(self.session_id, after=0, limit=limit)
        index = events[-1].index if events else 0
        if reducer is None:
            return fold_events(events, None, self.contract), index
        return reducer.replay(events), index


async def _load(store: EventStore, session_id: str, key: str) -> tuple[StoredSnapshot | None, list[Event]]:
    """The snapshot under ``key`` if the log has reached its index, and the events after it (``LogLoader``).

    One read where the store can (SQLite: one trip to a reader thread); otherwise the snapshot, the
    log's last index (only when there is a snapshot), and the events after it.
    """
    if _loads_logs(store):
        return await store.load_log(session_id, key)
    snap = await store.load_snapshot(session_id, key)
    if snap is not None and snap.index > await store.last_index(session_id):
        snap = None  # a snapshot past the log's end is stale
    return snap, await store.read(session_id, after=0 if snap is None else snap.index)


_LOADERS: dict[type, bool] = {}
"""Per store class, whether it is a ``LogLoader``."""


def _loads_logs(store: EventStore) -> TypeGuard[LogLoader]:
    """``isinstance(store, LogLoader)``, asked once per store class.

    A runtime-checkable protocol's ``isinstance`` looks its members up every time (about 4 µs on
    Python 3.11), and every session a host opens asked it: 1.3 % of a host's CPU in ``bench shop``.
    """
    kind = type(store)
    known = _LOADERS.get(kind)
    if known is None:
        known = _LOADERS[kind] = isinstance(store, LogLoader)
    return known
