"""Optimistic display: confirmed state plus this client's commands not yet confirmed.

A client folds its pending commands with the same ``decide`` and ``evolve`` the server runs, so
what it shows at once is what the server will most likely confirm, with no extra I/O:

- an idle, unpaused send appears in ``messages`` at once with ``starting=True`` (a turn awaiting
  acceptance, not a running model);
- later sends, and every send while paused, wait in ``inbox.items``;
- steering, and Send now aimed at an active turn, appear in ``messages`` after the current
  response instead of in the queue;
- a pending Stop clears ``active`` at once.

When the server's confirmed events arrive, the client drops the commands they confirm and folds
again; another client's accepted turn may move a speculative send back into the queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from orchestrator.core.aistate import AIState
from orchestrator.core.commands import Command, SendInput, SendNow, decide
from orchestrator.core.contract import Contract
from orchestrator.core.fold import evolve
from orchestrator.core.parts import AgentMessage, TextPart
from orchestrator.core.plan import Append, next_effect
from orchestrator.core.state import make_state

__all__ = ["optimistic"]


def optimistic(state: AIState, pending: Sequence[Command], contract: Contract | None = None) -> AIState:
    """``state`` with ``pending`` commands applied speculatively (see the module docstring)."""
    for command in pending:
        was_idle = state.active is None and not state.inbox.paused and not state.inbox.items
        decision = decide(state, command)
        for event in decision.events:
            state, _ = evolve(state, event, contract)
        if not decision.applied:
            continue
        if isinstance(command, SendInput) and was_idle and command.generate:
            effect = next_effect(state)
            if isinstance(effect, Append):
                for event in effect.events:
                    state, _ = evolve(state, event, contract)
                state = state.with_(starting=True)
        elif isinstance(command, SendInput | SendNow) and state.active is not None:
            input_id = command.id if isinstance(command, SendInput) else command.input_id
            item = state.inbox.get(input_id)
            if item is not None and item.after_step_of == state.active.id:
                message = AgentMessage(item.id, item.role, (TextPart(f"{item.id}:0", item.text),))
                session = state.session
                items = tuple(i for i in state.inbox.items if i.id != item.id)
                state = state.with_(
                    session=make_state(session.messages.append(message), session.status, session.error),
                    inbox=replace(state.inbox, items=items),
                )
    return state
