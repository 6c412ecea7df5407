"""What several of the fold's event families share: the model's texts, and ending a turn.

A stop, a reset and a turn's finish all end a turn the same way (``_end_turn``: its open
approvals close, its unfinished calls end, a running summary is interrupted), so that helper and
the ones it needs (``_run``, which runs actions through the session reducer, and ``_interrupted``)
live here, below both ``inbox`` (commands) and ``turns`` (the lifecycle) that call them.
``apply_actions`` is public (the package re-exports it) but lives here because ``_run`` uses it.
So do the shape of a family's handler table (``Handlers``) and ``payload_only``, which fits a
handler that needs only the payload into it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeAlias

from orchestrator.core.actions import ApplyPart, SessionAction
from orchestrator.core.aistate import ActiveTurn, AIState, CompactionState, Interaction, ToolRecord, changed
from orchestrator.core.events import Event
from orchestrator.core.reducer import apply_within, session_reducer
from orchestrator.core.state import SessionState
from orchestrator.core.stream import CompactionUpdate, ToolFailure

DENIED = "The user denied this call."
"""What the model is told about a denied approval."""
INTERRUPTED = "The call was interrupted and may have partly run; it was not run again."
"""What the model is told about a ``report`` tool cut short by a crash, a stop or a pause."""
CLOSED = "Not run: the turn ended before the call was approved."
"""What the model is told about an approval that a handoff or stop closed."""

_TOOL_FAILURE_STATUS = {
    "cancelled": "cancelled",
    "denied": "denied",
    "interrupted": "interrupted",
    "closed": "cancelled",
}


Evolved: TypeAlias = tuple[AIState, list[SessionAction]]
"""A fold step's result: the next state, and the session actions that produced its conversation."""

Handlers: TypeAlias = dict[type, Callable[[AIState, Event, Any], Evolved]]
"""A family's folds by payload class (``HANDLERS`` in ``inbox`` and ``turns``; ``fold`` merges them)."""


def payload_only(handle: Callable[[AIState, Any], Evolved]) -> Callable[[AIState, Event, Any], Evolved]:
    """A handler that needs only the payload, as a table entry (which also gets the event)."""
    return lambda state, _event, data: handle(state, data)


def apply_actions(session: SessionState, actions: Iterable[SessionAction]) -> SessionState:
    """Run session actions through the reducer.

    A run of parts bound for one delegate call (a sub-agent's batch) goes there in one walk
    (``reducer.apply_within``), not one walk each: the state is the one the reducer makes of
    them one by one.
    """
    actions = actions if isinstance(actions, list | tuple) else list(actions)
    i, n = 0, len(actions)
    while i < n:
        action = actions[i]
        within = action.within if type(action) is ApplyPart else None
        i += 1
        if within is None:
            session = session_reducer(session, action)
            continue
        parts = [action.part]  # type: ignore[union-attr]  # an ApplyPart: ``within`` is set
        while i < n:
            following = actions[i]
            if type(following) is not ApplyPart or following.within != within:
                break
            parts.append(following.part)
            i += 1
        session = apply_within(session, parts, within)
    return session


# -- helpers -----------------------------------------------------------------------------------


def _run(state: AIState, actions: list[SessionAction], **changes: Any) -> tuple[AIState, list[SessionAction]]:
    session = apply_actions(state.session, actions)
    if session is not state.session:
        changes["session"] = session
    return (state.with_(**changes) if changes else state), actions


def _set_tool(state: AIState, call_id: str, **changes: Any) -> dict[str, ToolRecord]:
    tools = dict(state.tools)
    record = tools.get(call_id)
    if record is not None:
        tools[call_id] = changed(record, **changes)
    return tools


def _end_turn(
    state: AIState, turn_id: str, outcome: str, actions: list[SessionAction]
) -> tuple[AIState, list[SessionAction]]:
    """Close the active turn: its unanswered approvals close and unfinished calls end."""
    closed = list(actions)
    # Copied only when something changes: the maps keep every call and approval of the session,
    # and most turns end with all of theirs final (a copy per turn grew with the conversation).
    interactions: dict[str, Interaction] | None = None
    tools: dict[str, ToolRecord] | None = None
    for key, interaction in state.interactions.items():
        if interaction.status == "pending" and state.tools.get(interaction.call_id, None) is not None:
            record = state.tools[interaction.call_id]
            if record.turn_id == turn_id:
                if interactions is None:
                    interactions = dict(state.interactions)
                interactions[key] = changed(interaction, status="closed")
                closed.append(ApplyPart(ToolFailure(interaction.call_id, CLOSED, "cancelled")))
    for call_id, record in _turn_records(state, turn_id):
        if record.turn_id == turn_id and not record.final:
            if tools is None:
                tools = dict(state.tools)
            tools[call_id] = changed(record, status="cancelled")
    active = state.active
    steps = state.session_steps
    if active is not None and active.step is not None and active.step.status == "running":
        steps += 1  # a step cut off by the end of its turn still counts as a position
    compaction = state.compaction
    if compaction is not None and compaction.status == "running":
        # The turn ended under a running summary (a stop): the compaction is interrupted there.
        compaction = changed(compaction, status="interrupted")
        closed.append(ApplyPart(_interrupted(compaction, active)))
    return _run(
        state,
        closed,
        active=None,
        compaction=compaction,
        last_turn=(turn_id, outcome),
        interactions=state.interactions if interactions is None else interactions,
        tools=state.tools if tools is None else tools,
        session_steps=steps,
    )


def _turn_records(state: AIState, turn_id: str) -> Iterable[tuple[str, ToolRecord]]:
    """The tool records ``turn_id`` made: the active turn's own list, not a walk over the session's."""
    active = state.active
    if active is None or active.id != turn_id:
        return state.tools.items()  # not the active turn: every record (the caller filters by turn)
    tools = state.tools
    return [(call_id, tools[call_id]) for call_id in active.calls if call_id in tools]


def _interrupted(compaction: CompactionState, active: ActiveTurn | None) -> CompactionUpdate:
    """The part update that marks ``compaction`` interrupted in the turn's message."""
    return CompactionUpdate(
        compaction.id,
        "interrupted",
        None,
        compaction.input_tokens,
        compaction.threshold_tokens,
        None,
        active.message_id if active is not None else None,
    )
