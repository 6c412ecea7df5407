"""The session fold: ``AIState`` out of a session's events, one ``evolve`` at a time.

``evolve(state, event)`` is pure and total: an event it cannot use (a late part from a step that
is no longer current, a decision for an unknown command) leaves the state as it was. It also
returns the session-reducer actions it applied, which is what subscribers and a parent session
see of this session's conversation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

from orchestrator.core import event_types as ai
from orchestrator.core._json import JsonObject
from orchestrator.core.actions import ApplyPart, Retry, Send, SessionAction, Stop, ToolPhase
from orchestrator.core.aistate import (
    ActiveTurn,
    AIState,
    CompactionState,
    InboxItem,
    Interaction,
    Receipt,
    StepState,
    ToolRecord,
    Usage,
)
from orchestrator.core.contract import Contract
from orchestrator.core.events import Event
from orchestrator.core.ids import logical_event_id
from orchestrator.core.parts import AgentMessage, TextPart
from orchestrator.core.reducer import resumable, session_reducer
from orchestrator.core.state import SessionState, make_state
from orchestrator.core.stream import CompactionUpdate, Failure, Finish, MessageStart, ToolFailure, ToolResult
from orchestrator.core.wire import action_from_wire, action_to_wire, part_from_wire

__all__ = ["DENIED", "INTERRUPTED", "apply_actions", "evolve", "fold_events", "initial_state"]

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


def initial_state(contract: Contract | None = None) -> AIState:
    """The state of an empty log."""
    return AIState(app=contract.initial_app if contract is not None else {})


def fold_events(events: Iterable[Event], state: AIState | None = None, contract: Contract | None = None) -> AIState:
    """Fold ``events`` from ``state`` (or the empty log)."""
    current = state if state is not None else initial_state(contract)
    for event in events:
        current, _ = evolve(current, event, contract)
    return current


def apply_actions(session: SessionState, actions: Iterable[SessionAction]) -> SessionState:
    """Run session actions through the reducer."""
    for action in actions:
        session = session_reducer(session, action)
    return session


def evolve(state: AIState, event: Event, contract: Contract | None = None) -> tuple[AIState, list[SessionAction]]:
    """The next state after ``event``, and the session actions that produced its conversation."""
    kind = event.type
    if kind == ai.STREAM:
        return _on_stream(state, event.payload)
    handler = _HANDLERS.get(kind)
    if handler is not None:
        return handler(state, event)
    if kind in ai.COMMAND_TYPES:
        # Keyed by the command's own id, also in a fork's copy (see ``fork_event_id``).
        return state.with_(pending={**state.pending, logical_event_id(event.id): (kind, event.payload)}), []
    if not kind.startswith("ai.") and contract is not None:
        return state.with_(app=contract.fold_app(state.app, event)), []
    return state, []


# -- helpers -----------------------------------------------------------------------------------


def _int(payload: JsonObject, key: str, default: int) -> int:
    value = payload.get(key, default)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _items(payload: JsonObject, key: str) -> list[Any]:
    value = payload.get(key)
    return list(value) if isinstance(value, list | tuple) else []


def _run(state: AIState, actions: list[SessionAction], **changes: Any) -> tuple[AIState, list[SessionAction]]:
    session = apply_actions(state.session, actions)
    if session is not state.session:
        changes["session"] = session
    return (state.with_(**changes) if changes else state), actions


def _set_tool(state: AIState, call_id: str, **changes: Any) -> dict[str, ToolRecord]:
    tools = dict(state.tools)
    record = tools.get(call_id)
    if record is not None:
        tools[call_id] = replace(record, **changes)
    return tools


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


def _end_turn(
    state: AIState, turn_id: str, outcome: str, actions: list[SessionAction]
) -> tuple[AIState, list[SessionAction]]:
    """Close the active turn: its unanswered approvals close and unfinished calls end."""
    closed = list(actions)
    interactions = dict(state.interactions)
    tools = dict(state.tools)
    for key, interaction in state.interactions.items():
        if interaction.status == "pending" and tools.get(interaction.call_id, None) is not None:
            record = tools[interaction.call_id]
            if record.turn_id == turn_id:
                interactions[key] = replace(interaction, status="closed")
                closed.append(ApplyPart(ToolFailure(interaction.call_id, CLOSED, "cancelled")))
    for call_id, record in state.tools.items():
        if record.turn_id == turn_id and not record.final:
            tools[call_id] = replace(record, status="cancelled")
    active = state.active
    steps = state.session_steps
    if active is not None and active.step is not None and active.step.status == "running":
        steps += 1  # a step cut off by the end of its turn still counts as a position
    return _run(
        state,
        closed,
        active=None,
        last_turn=(turn_id, outcome),
        interactions=interactions,
        tools=tools,
        session_steps=steps,
    )


# -- commands and decisions ---------------------------------------------------------------------


def _on_decided(state: AIState, event: Event) -> tuple[AIState, list[SessionAction]]:
    payload = event.payload
    command_id = str(payload.get("commandId", ""))
    reason = payload.get("reason")
    outcome: Literal["applied", "rejected"] = "applied" if payload.get("outcome") == "applied" else "rejected"
    receipt = Receipt(command_id, outcome, None if reason is None else str(reason))
    pending = dict(state.pending)
    command = pending.pop(command_id, None)
    state = state.with_(pending=pending, receipt=receipt)
    if command is None or receipt.outcome != "applied":
        return state, []
    kind, body = command
    apply = _APPLY.get(kind)
    return apply(state, command_id, body) if apply is not None else (state, [])


def _apply_input(state: AIState, command_id: str, body: JsonObject) -> tuple[AIState, list[SessionAction]]:
    steer = body.get("steer")
    active = state.active
    # Steering a turn that is no longer active sends like a plain input.
    after = str(steer) if steer is not None and active is not None and active.id == steer else None
    item = InboxItem(
        command_id,
        body.get("role", "user"),  # type: ignore[arg-type]
        str(body.get("text", "")),
        bool(body.get("generate", True)) or after is not None,
        after,
    )
    items = state.inbox.items
    if item.after_step_of is not None:
        at = _steer_position(items, item.after_step_of)
        items = (*items[:at], item, *items[at:])
    else:
        items = (*items, item)
    return state.with_(inbox=replace(state.inbox, items=items)), []


def _apply_edit(state: AIState, command_id: str, body: JsonObject) -> tuple[AIState, list[SessionAction]]:
    target = str(body.get("inputId"))
    items = tuple(replace(i, text=str(body.get("text", i.text))) if i.id == target else i for i in state.inbox.items)
    return state.with_(inbox=replace(state.inbox, items=items)), []


def _apply_move(state: AIState, command_id: str, body: JsonObject) -> tuple[AIState, list[SessionAction]]:
    target = str(body.get("inputId"))
    item = state.inbox.get(target)
    if item is None:
        return state, []
    rest = _without(state.inbox.items, [target])
    before = body.get("beforeId")
    at = next((i for i, x in enumerate(rest) if x.id == before), len(rest)) if before is not None else len(rest)
    return state.with_(inbox=replace(state.inbox, items=(*rest[:at], item, *rest[at:]))), []


def _apply_remove(state: AIState, command_id: str, body: JsonObject) -> tuple[AIState, list[SessionAction]]:
    items = _without(state.inbox.items, [str(body.get("inputId"))])
    return state.with_(inbox=replace(state.inbox, items=items)), []


def _apply_send_now(state: AIState, command_id: str, body: JsonObject) -> tuple[AIState, list[SessionAction]]:
    target = str(body.get("inputId"))
    item = state.inbox.get(target)
    if item is None:
        return state, []
    rest = _without(state.inbox.items, [target])
    turn = state.active.id if state.active is not None else None
    promoted = replace(item, generate=True, after_step_of=turn)
    at = _steer_position(rest, turn) if turn is not None else 0
    return state.with_(inbox=replace(state.inbox, items=(*rest[:at], promoted, *rest[at:]))), []


def _apply_stop(state: AIState, command_id: str, body: JsonObject) -> tuple[AIState, list[SessionAction]]:
    active = state.active
    if active is None:
        return state, []
    items = tuple(i for i in state.inbox.items if i.after_step_of != active.id)
    if body.get("cancelQueued"):
        items = ()
    state = state.with_(inbox=replace(state.inbox, items=items))
    return _end_turn(state, active.id, "stopped", [Stop()])


def _apply_retry(state: AIState, command_id: str, body: JsonObject) -> tuple[AIState, list[SessionAction]]:
    # The planner starts the retry turn (superseding an active one first): see orchestrator.core.plan.
    return state.with_(retry_requested=True), []


def _apply_pause(state: AIState, command_id: str, body: JsonObject) -> tuple[AIState, list[SessionAction]]:
    inbox = replace(state.inbox, paused=True)
    active = state.active
    if body.get("when") == "now" and active is not None and active.phase not in ("pausing", "paused"):
        active = replace(active, phase="pausing", paused_from=active.phase, interrupted=True)
    return state.with_(inbox=inbox, active=active), []


def _apply_resume(state: AIState, command_id: str, body: JsonObject) -> tuple[AIState, list[SessionAction]]:
    inbox = replace(state.inbox, paused=False)
    active = state.active
    if active is not None and active.phase in ("pausing", "paused"):
        active = replace(active, phase=active.paused_from or "generating", paused_from=None)
    return state.with_(inbox=inbox, active=active), []


def _apply_respond(state: AIState, command_id: str, body: JsonObject) -> tuple[AIState, list[SessionAction]]:
    interaction = state.interactions.get(str(body.get("interactionId")))
    if interaction is None or interaction.status != "pending":
        return state, []
    approved = bool(body.get("approved"))
    interactions = {
        **state.interactions,
        interaction.id: replace(interaction, status="approved" if approved else "denied"),
    }
    if approved:
        return state.with_(
            interactions=interactions, tools=_set_tool(state, interaction.call_id, status="approved")
        ), []
    tools = _set_tool(state, interaction.call_id, status="denied")
    reason = body.get("reason")
    text = DENIED if not reason else f"{DENIED} Reason: {reason}"
    return _run(
        state, [ApplyPart(ToolFailure(interaction.call_id, text, "denied"))], interactions=interactions, tools=tools
    )


_APPLY = {
    ai.INPUT: _apply_input,
    ai.INPUT_EDIT: _apply_edit,
    ai.INPUT_MOVE: _apply_move,
    ai.INPUT_REMOVE: _apply_remove,
    ai.INPUT_SEND_NOW: _apply_send_now,
    ai.TURN_STOP: _apply_stop,
    ai.TURN_RETRY: _apply_retry,
    ai.PAUSE: _apply_pause,
    ai.RESUME: _apply_resume,
    ai.RESPOND: _apply_respond,
}


# -- lifecycle ---------------------------------------------------------------------------------


def _on_admitted(state: AIState, event: Event) -> tuple[AIState, list[SessionAction]]:
    ids = [str(i) for i in _items(event.payload, "inputIds")]
    items = [i for i in state.inbox.items if i.id in set(ids)]
    session, actions = _admit(state.session, items, generate=False)
    return state.with_(session=session, inbox=replace(state.inbox, items=_without(state.inbox.items, ids))), actions


def _on_turn_started(state: AIState, event: Event) -> tuple[AIState, list[SessionAction]]:
    p = event.payload
    turn_id = str(p["turnId"])
    ids = tuple(str(i) for i in _items(p, "inputIds"))
    actions: list[SessionAction] = []
    if p.get("retry"):
        actions.append(Retry())
        session = session_reducer(state.session, Retry())
        items = state.inbox.items
    else:
        admitted = {i.id: i for i in state.inbox.items if i.id in set(ids)}
        ordered = [admitted[i] for i in ids if i in admitted]
        # Everything but the last input enters as context; the last one generates.
        context = [replace(i, generate=False) for i in ordered[:-1]]
        session, context_actions = _admit(state.session, context, generate=False)
        session, last_actions = _admit(session, ordered[-1:], generate=True)
        actions = context_actions + last_actions
        if ordered and ordered[-1].role != "user":
            session = make_state(session.messages, "streaming", None)
        items = _without(state.inbox.items, ids)
    active = ActiveTurn(turn_id, ids, "starting", str(p["messageId"]), state.turns)
    return (
        state.with_(
            session=session,
            inbox=replace(state.inbox, items=items),
            active=active,
            turns=state.turns + 1,
            starting=False,
            retry_requested=False if p.get("retry") else state.retry_requested,
        ),
        actions,
    )


def _on_turn_phase(state: AIState, event: Event) -> tuple[AIState, list[SessionAction]]:
    active = state.active
    if active is None or active.id != event.payload.get("turnId"):
        return state, []
    return state.with_(active=replace(active, phase=event.payload["phase"])), []  # type: ignore[arg-type]


def _on_turn_finished(state: AIState, event: Event) -> tuple[AIState, list[SessionAction]]:
    p = event.payload
    active = state.active
    if active is None or active.id != p.get("turnId"):
        return state, []
    outcome = str(p.get("outcome", "completed"))
    if outcome == "failed":
        actions: list[SessionAction] = [ApplyPart(Failure(str(p.get("error", "The turn failed.")), p.get("code")))]  # type: ignore[arg-type]
    elif outcome == "completed":
        actions = [ApplyPart(Finish(str(p.get("reason", "stop"))))]
    elif outcome in ("stopped",):
        actions = [Stop()]
    elif outcome == "superseded":
        actions = [ApplyPart(Finish("aborted"))]
    else:  # handed-off: the next turn starts in the same batch
        actions = []
    return _end_turn(state, active.id, outcome, actions)


def _on_step_started(state: AIState, event: Event) -> tuple[AIState, list[SessionAction]]:
    p = event.payload
    active = state.active
    if active is None or active.id != p.get("turnId"):
        return state, []
    step = StepState(
        str(p["stepId"]),
        _int(p, "turnStep", active.steps),
        _int(p, "sessionStep", state.session_steps),
        model=str(p.get("model", "")),
        attempt=_int(p, "attempt", 1),
    )
    actions: list[SessionAction] = [ApplyPart(MessageStart(active.message_id))]
    return _run(state, actions, active=replace(active, step=step, phase="generating"))


def _current_step(state: AIState, step_id: object) -> StepState | None:
    active = state.active
    if active is None or active.step is None or active.step.id != step_id or active.step.status != "running":
        return None
    return active.step


def _on_stream(state: AIState, payload: JsonObject) -> tuple[AIState, list[SessionAction]]:
    call_id = payload.get("callId")
    if call_id is not None:  # preliminary output of a running tool
        record = state.tools.get(str(call_id))
        if record is None or record.status != "running":
            return state, []
    elif _current_step(state, payload.get("stepId")) is None:
        return state, []  # a late part from a step that is no longer current: dropped
    actions: list[SessionAction] = [ApplyPart(part_from_wire(p)) for p in _items(payload, "parts")]
    return _run(state, actions)


def _on_step_finished(state: AIState, event: Event) -> tuple[AIState, list[SessionAction]]:
    p = event.payload
    step = _current_step(state, p.get("stepId"))
    active = state.active
    if step is None or active is None:
        return state, []
    calls = [(str(c["id"]), str(c["name"])) for c in _items(p, "toolCalls")]
    tools = dict(state.tools)
    for call_id, name in calls:
        tools.setdefault(call_id, ToolRecord(call_id, name, active.id))
    finished = replace(
        step, status="finished", finish_reason=str(p.get("finishReason", "stop")), tool_calls=tuple(c for c, _ in calls)
    )
    usage = _add_usage(state.usage, p.get("usage"), step.model, p.get("estimate"))
    return (
        state.with_(
            active=replace(active, step=finished, steps=active.steps + 1, phase="tools" if calls else active.phase),
            tools=tools,
            usage=usage,
            session_steps=state.session_steps + 1,
        ),
        [],
    )


def _add_usage(usage: Usage, step_usage: Any, model: str, estimate: Any) -> Usage:
    if not isinstance(step_usage, Mapping):
        return usage
    prompt = int(step_usage.get("inputTokens") or 0)
    completion = int(step_usage.get("outputTokens") or 0)
    calibration = dict(usage.calibration)
    if isinstance(estimate, int) and estimate > 0 and prompt > 0:
        calibration[model] = (estimate, prompt)
    return Usage(usage.input_tokens + prompt, usage.output_tokens + completion, calibration)


def _end_step(state: AIState, active: ActiveTurn, step: StepState, status: Literal["failed", "superseded"]) -> AIState:
    """The current step ended with ``status``: it counts, in the turn and in the session."""
    return state.with_(
        active=replace(active, step=replace(step, status=status), steps=active.steps + 1),
        session_steps=state.session_steps + 1,
    )


def _on_step_failed(state: AIState, event: Event) -> tuple[AIState, list[SessionAction]]:
    step = _current_step(state, event.payload.get("stepId"))
    active = state.active
    if step is None or active is None:
        return state, []
    return _end_step(state, active, step, "failed"), []


def _on_step_superseded(state: AIState, event: Event) -> tuple[AIState, list[SessionAction]]:
    p = event.payload
    step = _current_step(state, p.get("stepId"))
    active = state.active
    if step is None or active is None:
        return state, []
    if p.get("restart"):
        # The same position runs again: roll its partial output back (the new attempt rewrites it).
        session = state.session
        rewound = make_state(resumable(session.messages), session.status, session.error)
        return state.with_(session=rewound, active=replace(active, step=replace(step, status="superseded"))), []
    return _end_step(state, active, step, "superseded"), []


def _on_tool_started(state: AIState, event: Event) -> tuple[AIState, list[SessionAction]]:
    p = event.payload
    call_id = str(p["callId"])
    record = state.tools.get(call_id)
    if record is None or record.final:
        return state, []
    tools = _set_tool(state, call_id, status="running", attempts=_int(p, "attempt", record.attempts + 1))
    active = state.active
    if active is not None and active.phase not in ("pausing", "paused"):
        active = replace(active, phase="tools")
    return _run(state, [ToolPhase(record.name, "running", id=call_id)], tools=tools, active=active)


def _on_tool_reset(state: AIState, event: Event) -> tuple[AIState, list[SessionAction]]:
    call_id = str(event.payload["callId"])
    record = state.tools.get(call_id)
    if record is None or record.final:
        return state, []
    return state.with_(tools=_set_tool(state, call_id, status="pending")), []


def _on_tool_finished(state: AIState, event: Event) -> tuple[AIState, list[SessionAction]]:
    call_id = str(event.payload["callId"])
    record = state.tools.get(call_id)
    if record is None or record.final:
        return state, []
    return _run(
        state,
        [ApplyPart(ToolResult(call_id, event.payload.get("output")))],
        tools=_set_tool(state, call_id, status="done"),
    )


def _on_tool_failed(state: AIState, event: Event) -> tuple[AIState, list[SessionAction]]:
    p = event.payload
    call_id = str(p["callId"])
    record = state.tools.get(call_id)
    if record is None or record.final:
        return state, []
    code = p.get("code")
    status = _TOOL_FAILURE_STATUS.get(str(code), "error")
    part_code = "cancelled" if status == "cancelled" else (None if code is None else str(code))
    actions: list[SessionAction] = [ApplyPart(ToolFailure(call_id, str(p.get("error", "The tool failed.")), part_code))]
    return _run(state, actions, tools=_set_tool(state, call_id, status=status))


def _on_interaction(state: AIState, event: Event) -> tuple[AIState, list[SessionAction]]:
    p = event.payload
    call_id = str(p["callId"])
    record = state.tools.get(call_id)
    if record is None or record.final:
        return state, []
    interaction = Interaction(str(p["interactionId"]), call_id, record.name, str(p.get("prompt", "")))
    tools = _set_tool(state, call_id, status="awaiting-approval", interaction_id=interaction.id)
    action = ToolPhase(record.name, "awaiting-confirmation", interaction.prompt, id=call_id)
    return _run(state, [action], tools=tools, interactions={**state.interactions, interaction.id: interaction})


def _on_child_started(state: AIState, event: Event) -> tuple[AIState, list[SessionAction]]:
    p = event.payload
    call_id = str(p["callId"])
    if call_id not in state.tools:
        return state, []
    return state.with_(tools=_set_tool(state, call_id, child=str(p["sessionId"]))), []


def _on_nested(state: AIState, event: Event) -> tuple[AIState, list[SessionAction]]:
    p = event.payload
    call_id = str(p["callId"])
    record = state.tools.get(call_id)
    seq = _int(p, "seq", 0)
    if record is None or seq <= record.child_seq:
        return state, []  # a duplicate batch (at-least-once delivery), or a call we do not know
    actions = [nest(action_from_wire(a), call_id) for a in _items(p, "actions")]
    return _run(state, actions, tools=_set_tool(state, call_id, child_seq=seq))


def nest(action: SessionAction, call_id: str) -> SessionAction:
    """``action`` from a sub-agent, addressed under the delegate call ``call_id``."""
    if isinstance(action, ApplyPart):
        inner = action.within
        path = (call_id,) if inner is None else (call_id, *((inner,) if isinstance(inner, str) else inner))
        return ApplyPart(action.part, path)
    return action


def nested_wire(actions: Iterable[SessionAction]) -> list[dict[str, Any]]:
    """Actions as a sub-agent forwards them (the parent nests them with ``nest``)."""
    return [action_to_wire(a) for a in actions]


def _on_compaction(state: AIState, event: Event) -> tuple[AIState, list[SessionAction]]:
    p = event.payload
    compaction = CompactionState(
        str(p["id"]),
        p["status"],  # type: ignore[arg-type]
        None if p.get("summary") is None else str(p["summary"]),
        _int(p, "through", 0),
        p.get("inputTokens"),  # type: ignore[arg-type]
        p.get("thresholdTokens"),  # type: ignore[arg-type]
    )
    if compaction.status != "completed" and state.compaction is not None and state.compaction.status == "completed":
        # A failed or interrupted attempt never replaces a recorded summary.
        keep = state.compaction
    else:
        keep = compaction
    part = CompactionUpdate(
        compaction.id,
        compaction.status,
        compaction.summary,
        compaction.input_tokens,
        compaction.threshold_tokens,
        p.get("usage") if isinstance(p.get("usage"), dict) else None,  # type: ignore[arg-type]
        state.active.message_id if state.active is not None else None,
    )
    return _run(state, [ApplyPart(part)], compaction=keep)


_HANDLERS = {
    ai.DECIDED: _on_decided,
    ai.INPUT_ADMITTED: _on_admitted,
    ai.TURN_STARTED: _on_turn_started,
    ai.TURN_PHASE: _on_turn_phase,
    ai.TURN_FINISHED: _on_turn_finished,
    ai.STEP_STARTED: _on_step_started,
    ai.STEP_FINISHED: _on_step_finished,
    ai.STEP_FAILED: _on_step_failed,
    ai.STEP_SUPERSEDED: _on_step_superseded,
    ai.TOOL_STARTED: _on_tool_started,
    ai.TOOL_RESET: _on_tool_reset,
    ai.TOOL_FINISHED: _on_tool_finished,
    ai.TOOL_FAILED: _on_tool_failed,
    ai.INTERACTION_REQUESTED: _on_interaction,
    ai.CHILD_STARTED: _on_child_started,
    ai.NESTED: _on_nested,
    ai.COMPACTION: _on_compaction,
}
