"""Stop and steer as a caller says them: the turn they name (or the active one), replayed by id.

The host fills in the active turn when the caller named none, so a repeat of the same stop or
steer after the turn changed would differ from what is stored. These look up the stored command
by its id and return the first receipt when the repeat is what the caller sent, so every client
method stays safe to retry (seed ``conversations.md``, Input identity).
"""

from __future__ import annotations

from orchestrator.core.aistate import AIState, Receipt
from orchestrator.core.commands import SendInput, StopTurn
from orchestrator.core.errors import PartialDuplicateBatch
from orchestrator.core.payloads import CommandPayload, Input, TurnStop
from orchestrator.run.runner import SessionRunner

__all__ = ["steer_turn", "stop_turn"]


async def steer_turn(runner: SessionRunner, input_id: str, text: str, turn_id: str | None) -> Receipt | None:
    """Steer ``turn_id`` (default: the active turn), or send when none is active; replayed by ``input_id``."""
    active = runner.state.active
    observed = turn_id if turn_id is not None else (active.id if active is not None else None)
    receipt = (await runner.submit(SendInput(input_id, text, steer=observed))).receipt
    if receipt is not None and receipt.reason == PartialDuplicateBatch.code:
        first = await runner.recorded(input_id)
        if first is not None and _same_steer(first.payload, text, turn_id):
            return first.receipt
    return receipt


async def stop_turn(
    runner: SessionRunner, command_id: str, cancel_queued: bool, turn_id: str | None
) -> tuple[Receipt | None, int]:
    """Stop ``turn_id`` (default: the active turn): the receipt and how many queued inputs it cancelled."""
    state = runner.state
    active = state.active
    target = turn_id if turn_id is not None else (active.id if active is not None else None)
    if target is not None:
        cancelled = _cancelled(state, target, cancel_queued)
        decision = await runner.submit(StopTurn(command_id, target, cancel_queued))
        if decision.events:  # decided now
            return decision.receipt, cancelled if decision.applied else 0
    elif state.last_turn is None:
        return None, 0  # no turn has ever ended: no stop can be stored under this id
    # A repeat of a stop already stored (or, with no turn active, possibly nothing to stop).
    reused = Receipt(command_id, "rejected", PartialDuplicateBatch.code)
    first = await runner.recorded(command_id)
    if first is None:
        return (None, 0) if target is None else (reused, 0)
    stored = first.payload
    if (
        not isinstance(stored, TurnStop)
        or stored.cancel_queued != cancel_queued
        or (turn_id is not None and stored.turn_id != turn_id)
    ):
        return reused, 0
    if first.receipt.outcome != "applied" or stored.turn_id is None:
        return first.receipt, 0
    before, _ = await runner.log.state_at(through=first.index - 1)
    return first.receipt, _cancelled(before, stored.turn_id, cancel_queued)


def _same_steer(stored: CommandPayload, text: str, turn_id: str | None) -> bool:
    """Whether ``stored`` is the steering a caller resends (``turn_id``: the turn it named, if any)."""
    if not isinstance(stored, Input) or stored.role != "user" or stored.text != text or not stored.generate:
        return False
    return turn_id is None or stored.steer in (turn_id, None)


def _cancelled(state: AIState, turn_id: str, cancel_queued: bool) -> int:
    """The queued inputs a stop of ``turn_id`` cancels in ``state`` (none when it is not active)."""
    if state.active is None or state.active.id != turn_id:
        return 0
    items = state.inbox.items
    return len(items) if cancel_queued else sum(1 for i in items if i.after_step_of == turn_id)
