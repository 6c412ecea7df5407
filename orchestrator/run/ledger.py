"""The turn ledger: which turn admitted each input, and how each turn ended.

``SessionRunner.wait_turn`` and ``wait_input`` read it. It listens to every append (it is one of
the runner's listeners), so it knows the turns this process ran; an input it has never seen (the
session ran it in another process before it was activated here) is found by rebuilding a ledger
from the log and merging it in (``merge``), a rare and slow path.

It also keeps the callbacks waiting on inputs' turns (``watch``, ``SessionRunner.watch_input``):
the runner settles them after each write (``settle``), and fails them when it closes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import structlog

from orchestrator.core import event_types as ai
from orchestrator.core.aistate import AIState
from orchestrator.core.contract import Contract
from orchestrator.core.fold import initial_state
from orchestrator.core.ids import logical_event_id
from orchestrator.core.payloads import TurnFinished
from orchestrator.core.turn import TurnOutcome, TurnOutcomeKind
from orchestrator.run.log import Applied, SessionLog

__all__ = ["TurnLedger", "Watcher"]

_log = structlog.get_logger("troupe.ledger")

Watcher = Callable[[TurnOutcome | None], None]
"""Called once with how an input's turn ended, or with ``None`` when the runner closed first."""


class TurnLedger:
    """Which turn admitted each input, and how each turn ended (what ``Turn.finished`` reads)."""

    def __init__(self, state: AIState) -> None:
        self.turn_of: dict[str, str] = {}
        self.outcomes: dict[str, TurnOutcome] = {}
        self.submitted: set[str] = set()
        self.reply_of: dict[str, str] = {}
        self.reasons: dict[str, str] = {}
        """Turn id -> the reason its ``ai.turn.finished`` gave, until the turn's outcome is made."""
        self.last_turn = state.last_turn
        self.watchers: list[tuple[str, Watcher]] = []
        """(input id, callback): who waits on an input's turn (``watch``)."""
        if state.active is not None:
            self.reply_of[state.active.id] = state.active.message_id
            for input_id in state.active.input:
                self.turn_of[input_id] = state.active.id

    @classmethod
    async def from_log(cls, log: SessionLog, contract: Contract | None) -> TurnLedger:
        """A ledger rebuilt from the whole log (a rare, slow path)."""
        events = await log.store.read(log.session_id, limit=log.index)
        state = initial_state(contract)
        rebuilt = cls(state)
        for event in events:
            applied = log.fold([event], state)
            state = applied[-1].state
            await rebuilt.listen(applied, state, event.index)
        return rebuilt

    def merge(self, older: TurnLedger) -> None:
        """Take what ``older`` (rebuilt from the log) knows and this ledger does not."""
        self.turn_of = {**older.turn_of, **self.turn_of}
        self.outcomes = {**older.outcomes, **self.outcomes}
        self.reply_of = {**older.reply_of, **self.reply_of}
        self.submitted |= older.submitted

    def knows(self, input_id: str, state: AIState) -> bool:
        """Whether this ledger (or ``state``) has seen input ``input_id``; if not, read the log."""
        return (
            input_id in self.turn_of
            or input_id in self.submitted
            or state.inbox.get(input_id) is not None
            or input_id in state.pending
        )

    def input_done(self, input_id: str, state: AIState) -> bool:
        """Whether the turn that admits ``input_id`` has ended, or the input was removed unadmitted."""
        turn = self.turn_of.get(input_id)
        if turn is not None:
            return turn in self.outcomes
        return input_id in self.submitted and state.inbox.get(input_id) is None and input_id not in state.pending

    def input_outcome(self, input_id: str) -> TurnOutcome:
        """How the turn that admitted ``input_id`` ended (once ``input_done``)."""
        turn = self.turn_of.get(input_id)
        if turn is None:
            return TurnOutcome("", "removed", "", "The input was removed before it was admitted.")
        return self.outcomes[turn]

    def watch(self, input_id: str, done: Watcher) -> Callable[[], None]:
        """Call ``done`` at the ``settle`` that finds ``input_id``'s turn ended; returns the cancel."""
        entry = (input_id, done)
        self.watchers.append(entry)

        def cancel() -> None:
            if entry in self.watchers:
                self.watchers.remove(entry)

        return cancel

    def settle(self, state: AIState) -> None:
        """Call (and drop) the watchers whose input's turn has ended in ``state``."""
        ended = [entry for entry in self.watchers if self.input_done(entry[0], state)]
        if not ended:
            return
        self.watchers = [entry for entry in self.watchers if entry not in ended]
        for input_id, done in ended:
            self._call(done, self.input_outcome(input_id))

    def fail(self) -> None:
        """The runner closed: every watcher hears ``None`` (ask wherever the session is now)."""
        watchers, self.watchers = self.watchers, []
        for _, done in watchers:
            self._call(done, None)

    @staticmethod
    def _call(done: Watcher, outcome: TurnOutcome | None) -> None:
        try:
            done(outcome)
        except Exception:  # a watcher's bug must not fail the write that settled it
            _log.exception("turn watcher failed")

    async def listen(self, applied: Sequence[Applied], state: AIState, index: int) -> None:
        """A runner listener: note the turns started, the inputs submitted and the turn ended."""
        for item in applied:
            event = item.event
            if event.type == ai.TURN_STARTED:
                turn_id = str(event.payload["turnId"])
                self.reply_of[turn_id] = str(event.payload.get("messageId"))
                for input_id in event.payload.get("inputIds", ()):  # type: ignore[union-attr]
                    self.turn_of[str(input_id)] = turn_id
            elif event.type == ai.INPUT:
                self.submitted.add(logical_event_id(event.id))
            elif isinstance(event.data, TurnFinished):
                data = event.data
                reason = data.code if data.outcome == "failed" else data.reason
                if reason is not None:
                    self.reasons[data.turn_id] = reason
        if state.last_turn is not None and state.last_turn != self.last_turn:
            turn_id, outcome = state.last_turn
            reply_id = self.reply_of.get(turn_id)
            reply = next((m for m in reversed(state.messages) if m.id == reply_id), None)
            error = state.error.message if outcome == "failed" and state.error is not None else None
            text = reply.final_text if reply is not None else ""
            kind = cast(TurnOutcomeKind, outcome)  # the fold writes only the outcomes TurnFinished names
            reason = self.reasons.pop(turn_id, None)
            self.outcomes[turn_id] = TurnOutcome(turn_id, kind, text, error, index, reason)
        self.last_turn = state.last_turn
