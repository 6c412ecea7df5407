"""The session fold: ``AIState`` out of a session's events, one ``evolve`` at a time.

``evolve(state, event)`` is pure and total: an event it cannot use (a late part from a step that
is no longer current, a decision for an unknown command) leaves the state as it was. It also
returns the session-reducer actions it applied, which is what subscribers and a parent session
see of this session's conversation.

One fold, in modules by event family. Each family keeps its handlers' table by payload class
beside them (``HANDLERS``); ``_evolve_ai`` dispatches through ``_HANDLERS``, the two merged here,
and this module checks at import that every built-in payload class has a handler: that check,
not an ``assert_never`` per module, is what turns a payload class added without a fold into an
error (at import rather than from the type checker). Where each part lives:

- ``fold`` (this module): the entry points (``initial_state``, ``fold_events``, ``evolve``) and the
  merged table.
- ``fold._common``: what several families share: ``apply_actions`` and ``_run`` (actions through
  the session reducer), ``_set_tool``, ``_end_turn`` (a stop ends a turn the same way a finish
  does), and what the model is told (``DENIED``, ``INTERRUPTED``, ``CLOSED``).
- ``fold.inbox``: commands and their effects once decided, the inbox and its admission, due handlers.
- ``fold.turns``: turns, steps, tools and approvals, sub-agents (``nest``), compaction, model metadata.

The submodules import each other, never this package (it imports them). Every name importers use
is re-exported here, so they keep importing from ``orchestrator.core.fold``.
"""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator.core.actions import SessionAction
from orchestrator.core.aistate import AIState
from orchestrator.core.contract import Contract
from orchestrator.core.events import Event
from orchestrator.core.fold import inbox, turns
from orchestrator.core.fold._common import CLOSED as CLOSED
from orchestrator.core.fold._common import DENIED, INTERRUPTED, Handlers, apply_actions
from orchestrator.core.fold.turns import nest as nest
from orchestrator.core.fold.turns import nested_wire as nested_wire
from orchestrator.core.payloads import PAYLOAD_CLASSES

__all__ = ["DENIED", "INTERRUPTED", "apply_actions", "evolve", "fold_events", "initial_state"]


def initial_state(contract: Contract | None = None) -> AIState:
    """The state of an empty log."""
    return AIState(app=contract.initial_app if contract is not None else {})


def fold_events(events: Iterable[Event], state: AIState | None = None, contract: Contract | None = None) -> AIState:
    """Fold ``events`` from ``state`` (or the empty log)."""
    current = state if state is not None else initial_state(contract)
    for event in events:
        current, _ = evolve(current, event, contract)
    return current


def evolve(state: AIState, event: Event, contract: Contract | None = None) -> tuple[AIState, list[SessionAction]]:
    """The next state after ``event``, and the session actions that produced its conversation.

    The contract's reducer sees every event, built-in ones included (seed: "``fold`` sees your
    state and every event"), so the live state and ``session.state(reducer)``, which replays the
    whole log through it, always agree. It costs one call of the reducer's ``fold`` per event.
    """
    if contract is None or contract.reducer is None:
        return _evolve_ai(state, event)
    app = contract.reducer.fold(state.app, event)
    state, actions = _evolve_ai(state, event)
    return (state if app is state.app else state.with_(app=app)), actions


def _evolve_ai(state: AIState, event: Event) -> tuple[AIState, list[SessionAction]]:
    """The built-in fold: an app event (or an ``ai.*`` type this version does not know) changes nothing.

    A table by payload class, not a ``match``: a ``match`` tries its class patterns one by one, so
    a late case (a tool result, a nested batch) paid some twenty ``isinstance`` checks per event.
    """
    data = event.data
    if data is None:
        return state, []
    return _HANDLERS[type(data)](state, event, data)


_HANDLERS: Handlers = {**inbox.HANDLERS, **turns.HANDLERS}
"""The fold of each built-in payload class (``_evolve_ai``)."""

if set(_HANDLERS) != set(PAYLOAD_CLASSES.values()):  # a payload class added without a fold
    raise TypeError(f"no fold for {sorted(c.__name__ for c in set(PAYLOAD_CLASSES.values()) - set(_HANDLERS))}")
