"""The fold of what waits in the state: commands until decided, the inbox, and due handlers.

A command is recorded as pending when it is logged, and applied once its ``ai.control.decided``
applies it (``_apply``: one ``match`` over the command payloads, ending in ``assert_never``).
Inputs wait in the inbox until a turn or an ``ai.input.admitted`` takes them into the
conversation; the admission helpers are shared with ``turns`` (a turn's start admits its inputs).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import assert_never, get_args

from orchestrator.core.actions import ApplyPart, Reset, Send, SessionAction, Stop
from orchestrator.core.aistate import AIState, DueHandler, InboxItem, Receipt, changed
from orchestrator.core.events import Event
from orchestrator.core.fold._common import DENIED, Evolved, Handlers, _end_turn, _run, _set_tool, payload_only
from orchestrator.core.ids import logical_event_id
from orchestrator.core.parts import AgentMessage, TextPart
from orchestrator.core.payloads import (
    CommandPayload,
    Decided,
    HandlerFinished,
    HandlerScheduled,
    Input,
    InputAdmitted,
    InputEdit,
    InputMove,
    InputRemove,
    InputSendNow,
    Pause,
    Respond,
    Resume,
    SessionReset,
    TurnRetry,
    TurnStop,
)
from orchestrator.core.reducer import session_reducer
from orchestrator.core.state import SessionState, make_state
from orchestrator.core.stream import ToolFailure


def _on_handler_scheduled(state: AIState, event: Event, data: HandlerScheduled) -> Evolved:
    due = DueHandler(data.event_id, data.event_type, event.index)
    return state.with_(due_handlers={**state.due_handlers, data.event_id: due}), []


def _on_handler_finished(state: AIState, event: Event, data: HandlerFinished) -> Evolved:
    if data.event_id not in state.due_handlers:
        return state, []  # a second run's finish (at-least-once): already recorded
    handlers = {k: v for k, v in state.due_handlers.items() if k != data.event_id}
    return state.with_(due_handlers=handlers), []


def _on_command(state: AIState, event: Event, data: CommandPayload) -> Evolved:
    # Keyed by the command's own id, also in a fork's copy (see ``fork_event_id``).
    return state.with_(pending={**state.pending, logical_event_id(event.id): data}), []


# -- the inbox ----------------------------------------------------------------------------------


def _admit(
    session: SessionState, items: Sequence[InboxItem], *, generate: bool
) -> tuple[SessionState, list[SessionAction]]:
    """Append inputs to the conversation: user inputs through ``send``, other roles directly."""
    actions: list[SessionAction] = []
    for item in items:
        if item.role == "user" and generate:
            action = Send(item.id, item.text)
            actions.append(action)
            session = session_reducer(session, action)
        elif all(m.id != item.id for m in session.messages):
            message = AgentMessage(item.id, item.role, (TextPart(f"{item.id}:0", item.text),))
            session = make_state(session.messages.append(message), session.status, session.error)
    return session, actions


def _without(items: tuple[InboxItem, ...], ids: Iterable[str]) -> tuple[InboxItem, ...]:
    drop = set(ids)
    return tuple(i for i in items if i.id not in drop)


def _steer_position(items: tuple[InboxItem, ...], turn_id: str) -> int:
    """Where new steering for ``turn_id`` goes: after that turn's earlier steering, or first."""
    position = 0
    for i, item in enumerate(items):
        if item.after_step_of == turn_id:
            position = i + 1
    return position


# -- commands and decisions ---------------------------------------------------------------------


def _on_decided(state: AIState, p: Decided) -> tuple[AIState, list[SessionAction]]:
    receipt = Receipt(p.command_id, p.outcome, p.reason)
    pending = dict(state.pending)
    command = pending.pop(p.command_id, None)
    state = state.with_(pending=pending, receipt=receipt)
    if command is None or receipt.outcome != "applied":
        return state, []
    return _apply(state, p.command_id, command)


def _apply(state: AIState, command_id: str, body: CommandPayload) -> tuple[AIState, list[SessionAction]]:
    """Apply a command that its decision applied."""
    match body:
        case Input():
            return _apply_input(state, command_id, body)
        case InputEdit():
            items = tuple(changed(i, text=body.text) if i.id == body.input_id else i for i in state.inbox.items)
            return state.with_(inbox=changed(state.inbox, items=items)), []
        case InputMove():
            return _apply_move(state, body)
        case InputRemove():
            return state.with_(inbox=changed(state.inbox, items=_without(state.inbox.items, [body.input_id]))), []
        case InputSendNow():
            return _apply_send_now(state, body)
        case TurnStop():
            return _apply_stop(state, body)
        case TurnRetry():
            # The planner starts the retry turn (superseding an active one first): see orchestrator.core.plan.
            return state.with_(retry_requested=True), []
        case Pause():
            return _apply_pause(state, body)
        case Resume():
            return _apply_resume(state)
        case Respond():
            return _apply_respond(state, body)
        case SessionReset():
            return _apply_reset(state)
        case _:
            assert_never(body)


def _apply_reset(state: AIState) -> tuple[AIState, list[SessionAction]]:
    """A new conversation: the active turn ends as ``stopped``, then the conversation starts empty.

    The counters (turn and step ids never repeat), usage, the pause and the app state carry on;
    ended tool records stay (their calls are final, so the runner stops their work and children).
    """
    actions: list[SessionAction] = []
    if state.active is not None:
        state, actions = _end_turn(state, state.active.id, "stopped", [Stop()])
    state, reset = _run(state, [Reset()], inbox=changed(state.inbox, items=()), interactions={}, compaction=None)
    return state.with_(retry_requested=False), actions + reset


def _apply_input(state: AIState, command_id: str, body: Input) -> tuple[AIState, list[SessionAction]]:
    steer = body.steer
    active = state.active
    # Steering a turn that is no longer active sends like a plain input.
    after = steer if steer is not None and active is not None and active.id == steer else None
    item = InboxItem(command_id, body.role, body.text, body.generate or after is not None, after)
    items = state.inbox.items
    if item.after_step_of is not None:
        at = _steer_position(items, item.after_step_of)
        items = (*items[:at], item, *items[at:])
    else:
        items = (*items, item)
    return state.with_(inbox=changed(state.inbox, items=items)), []


def _apply_move(state: AIState, body: InputMove) -> tuple[AIState, list[SessionAction]]:
    item = state.inbox.get(body.input_id)
    if item is None or body.before_id == body.input_id:
        return state, []  # before itself: it is already there (a no-op, applied)
    rest = _without(state.inbox.items, [body.input_id])
    before = body.before_id
    at = next((i for i, x in enumerate(rest) if x.id == before), len(rest)) if before is not None else len(rest)
    return state.with_(inbox=changed(state.inbox, items=(*rest[:at], item, *rest[at:]))), []


def _apply_send_now(state: AIState, body: InputSendNow) -> tuple[AIState, list[SessionAction]]:
    item = state.inbox.get(body.input_id)
    if item is None:
        return state, []
    rest = _without(state.inbox.items, [body.input_id])
    turn = state.active.id if state.active is not None else None
    promoted = changed(item, generate=True, after_step_of=turn)
    at = _steer_position(rest, turn) if turn is not None else 0
    return state.with_(inbox=changed(state.inbox, items=(*rest[:at], promoted, *rest[at:]))), []


def _apply_stop(state: AIState, body: TurnStop) -> tuple[AIState, list[SessionAction]]:
    active = state.active
    if active is None:
        return state, []
    items = tuple(i for i in state.inbox.items if i.after_step_of != active.id)
    if body.cancel_queued:
        items = ()
    state = state.with_(inbox=changed(state.inbox, items=items))
    return _end_turn(state, active.id, "stopped", [Stop()])


def _apply_pause(state: AIState, body: Pause) -> tuple[AIState, list[SessionAction]]:
    inbox = changed(state.inbox, paused=True)
    active = state.active
    if body.when == "now" and active is not None and active.phase not in ("pausing", "paused"):
        active = changed(active, phase="pausing", paused_from=active.phase, interrupted=True)
    return state.with_(inbox=inbox, active=active), []


def _apply_resume(state: AIState) -> tuple[AIState, list[SessionAction]]:
    inbox = changed(state.inbox, paused=False)
    active = state.active
    if active is not None and active.phase in ("pausing", "paused"):
        active = changed(active, phase=active.paused_from or "generating", paused_from=None)
    return state.with_(inbox=inbox, active=active), []


def _apply_respond(state: AIState, body: Respond) -> tuple[AIState, list[SessionAction]]:
    interaction = state.interactions.get(body.interaction_id)
    if interaction is None or interaction.status != "pending":
        return state, []
    interactions = {
        **state.interactions,
        interaction.id: changed(
            interaction, status="approved" if body.approved else "denied", reason=body.reason or None
        ),
    }
    if body.approved:
        return state.with_(
            interactions=interactions, tools=_set_tool(state, interaction.call_id, status="approved")
        ), []
    tools = _set_tool(state, interaction.call_id, status="denied")
    text = DENIED if not body.reason else f"{DENIED} Reason: {body.reason}"
    return _run(
        state, [ApplyPart(ToolFailure(interaction.call_id, text, "denied"))], interactions=interactions, tools=tools
    )


# -- admission ----------------------------------------------------------------------------------


def _on_admitted(state: AIState, p: InputAdmitted) -> tuple[AIState, list[SessionAction]]:
    ids = set(p.input_ids)
    items = [i for i in state.inbox.items if i.id in ids]
    session, actions = _admit(state.session, items, generate=False)
    return state.with_(session=session, inbox=changed(state.inbox, items=_without(state.inbox.items, ids))), actions


HANDLERS: Handlers = {
    HandlerScheduled: _on_handler_scheduled,
    HandlerFinished: _on_handler_finished,
    **dict.fromkeys(get_args(CommandPayload), _on_command),
    Decided: payload_only(_on_decided),
    InputAdmitted: payload_only(_on_admitted),
}
"""The fold of each payload class of this family (merged into ``fold._HANDLERS``)."""
