"""Optimistic display: confirmed state plus this client's commands not yet confirmed.

A client folds its pending commands with the same ``decide`` and ``evolve`` the server runs, so
what it shows at once is what the server will most likely confirm, with no extra I/O:

- an idle, unpaused send appears in ``messages`` at once with ``starting=True`` (a turn awaiting
  acceptance, not a running model);
- later sends, and every send while paused, wait in ``inbox.items``;
- steering, and Send now aimed at an active turn, appear in ``messages`` after the current
  response instead of in the queue;
- a pending Stop clears ``active`` at once.

The steering rule holds for confirmed steering too, not only for pending commands: an input
waiting to hand off to the active turn (``after_step_of`` is that turn) is drawn as a message
after the current response until the handoff admits it, at that same place. So a steering
message never jumps from the conversation to the queue and back as its command is confirmed,
and every client draws the same thing. The raw state keeps it in ``inbox.items``.

When the server's confirmed events arrive, the client drops the commands they confirm
(``settled``) and folds again; another client's accepted turn may move a speculative send back
into the queue. A pending send whose id the state already holds is skipped: the server replays
an identical resubmission, so applying it again would show the input twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import assert_never

from orchestrator.core.aistate import AIState
from orchestrator.core.commands import (
    Command,
    EditInput,
    MoveInput,
    PauseSession,
    RemoveInput,
    ResetSession,
    Respond,
    ResumeSession,
    RetryTurn,
    SendInput,
    SendNow,
    StopTurn,
    decide,
)
from orchestrator.core.contract import Contract
from orchestrator.core.fold import evolve
from orchestrator.core.plan import Append, next_effect
from orchestrator.core.state import make_state

__all__ = ["optimistic", "settled"]


def optimistic(state: AIState, pending: Sequence[Command], contract: Contract | None = None) -> AIState:
    """``state`` with ``pending`` commands applied speculatively (see the module docstring)."""
    for command in pending:
        if isinstance(command, SendInput) and _holds_input(state, command.id):
            continue  # already confirmed: the server replays it, it does not add it again
        was_idle = state.active is None and not state.inbox.paused and not state.inbox.items
        decision = decide(state, command)
        for event in decision.events:
            state, _ = evolve(state, event, contract)
        if decision.applied and isinstance(command, SendInput) and was_idle and command.generate:
            effect = next_effect(state)
            if isinstance(effect, Append):
                for event in effect.events:
                    state, _ = evolve(state, event, contract)
                state = state.with_(starting=True)
    return _steering_as_messages(state)


def _holds_input(state: AIState, input_id: str) -> bool:
    return state.inbox.get(input_id) is not None or state.messages.index_of_id(input_id) is not None


def _steering_as_messages(state: AIState) -> AIState:
    """Inputs waiting to hand off to the active turn, drawn after its current response."""
    active = state.active
    if active is None:
        return state
    steering = [i for i in state.inbox.items if i.after_step_of == active.id]
    if not steering:
        return state
    session = state.session
    messages = session.messages
    for item in steering:  # in inbox order: the order they hand off in
        messages = messages.append(item.message)
    items = tuple(i for i in state.inbox.items if i.after_step_of != active.id)
    return state.with_(
        session=make_state(messages, session.status, session.error), inbox=replace(state.inbox, items=items)
    )


def settled(state: AIState, command: Command) -> bool:
    """Whether the confirmed ``state`` already shows ``command``'s effect (its optimistic copy can go).

    Judged by content, for a command the server accepted: a send is settled once its input is
    queued or in the conversation, a stop once the turn it aimed at is no longer active, an edit
    once the input has that text (or is gone), and so on. A client checks after every mutation,
    so a later change by another client (which moves the state past the command's effect) comes
    after the check that settled it.
    """
    inbox = state.inbox
    match command:
        case SendInput():
            return _holds_input(state, command.id)
        case SendNow():
            item = inbox.get(command.input_id)
            if item is None:
                return True  # handed off already
            if command.turn_id is not None:
                return item.after_step_of == command.turn_id
            # Aimed at whatever is active: waiting to hand off, or first in line with no turn.
            return item.after_step_of is not None or (inbox.items[0].id == item.id and item.generate)
        case StopTurn():
            # A stop naming no turn stops whichever is active: once answered, nothing is left to show.
            active = state.active
            return command.turn_id is None or active is None or active.id != command.turn_id
        case EditInput():
            item = inbox.get(command.input_id)
            return item is None or item.text == command.text
        case MoveInput():
            ids = [i.id for i in inbox.items]
            if command.input_id not in ids:
                return True
            at = ids.index(command.input_id)
            if command.before_id is None:
                return at == len(ids) - 1
            # An anchor no longer pending: the fold rejects the move locally, so it shows nothing.
            return command.before_id not in ids or (at + 1 < len(ids) and ids[at + 1] == command.before_id)
        case RemoveInput():
            return inbox.get(command.input_id) is None
        case PauseSession():
            return inbox.paused
        case ResumeSession():
            return not inbox.paused
        case Respond():
            interaction = state.interactions.get(command.interaction_id)
            return interaction is None or interaction.status != "pending"
        case RetryTurn() | ResetSession():
            return True  # nothing shown ahead of them: a retry's turn, a reset's empty conversation
        case _:
            assert_never(command)
