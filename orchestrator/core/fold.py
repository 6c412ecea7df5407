"""The session fold: ``AIState`` out of a session's events, one ``evolve`` at a time.

``evolve(state, event)`` is pure and total: an event it cannot use (a late part from a step that
is no longer current, a decision for an unknown command) leaves the state as it was. It also
returns the session-reducer actions it applied, which is what subscribers and a parent session
see of this session's conversation.

Kept together because it is one ``match`` over every built-in payload type, with the commands'
effects beside the lifecycle they interleave with (a stop ends a turn the same way a finish
does): split by event family, the ``assert_never`` that makes a new event type a type error
would have to be repeated per module, and the shared turn-ending helpers would cross modules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeAlias, assert_never, cast, get_args

from orchestrator.core.actions import ApplyPart, Reset, Retry, Send, SessionAction, Stop, ToolPhase
from orchestrator.core.aistate import (
    ActiveTurn,
    AIState,
    CompactionState,
    DueHandler,
    InboxItem,
    Interaction,
    ModelMetadata,
    Receipt,
    StepState,
    ToolRecord,
    Usage,
    changed,
)
from orchestrator.core.contract import Contract
from orchestrator.core.events import Event
from orchestrator.core.ids import logical_event_id
from orchestrator.core.parts import AgentMessage, TextPart
from orchestrator.core.payloads import (
    PAYLOAD_CLASSES,
    ChildStarted,
    CommandPayload,
    Compaction,
    Decided,
    HandlerFinished,
    HandlerScheduled,
    Input,
    InputAdmitted,
    InputEdit,
    InputMove,
    InputRemove,
    InputSendNow,
    InteractionRequested,
    ModelMetadataRequested,
    ModelMetadataResolved,
    Nested,
    Pause,
    Respond,
    Resume,
    SessionReset,
    StepFailed,
    StepFinished,
    StepStarted,
    StepSuperseded,
    Stream,
    ToolFailed,
    ToolFinished,
    ToolReset,
    ToolStarted,
    TurnFinished,
    TurnPhaseChanged,
    TurnRetry,
    TurnStarted,
    TurnStop,
)
from orchestrator.core.reducer import resumable, session_reducer
from orchestrator.core.state import ErrorCode, SessionState, make_state
from orchestrator.core.stream import CompactionUpdate, Failure, Finish, MessageStart, ToolFailure, ToolResult
from orchestrator.core.wire import action_to_wire

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


Evolved: TypeAlias = tuple[AIState, list[SessionAction]]
"""A fold step's result: the next state, and the session actions that produced its conversation."""


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
                interactions[key] = changed(interaction, status="closed")
                closed.append(ApplyPart(ToolFailure(interaction.call_id, CLOSED, "cancelled")))
    for call_id, record in state.tools.items():
        if record.turn_id == turn_id and not record.final:
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
        interactions=interactions,
        tools=tools,
        session_steps=steps,
    )


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


# -- lifecycle ---------------------------------------------------------------------------------


def _on_admitted(state: AIState, p: InputAdmitted) -> tuple[AIState, list[SessionAction]]:
    ids = set(p.input_ids)
    items = [i for i in state.inbox.items if i.id in ids]
    session, actions = _admit(state.session, items, generate=False)
    return state.with_(session=session, inbox=changed(state.inbox, items=_without(state.inbox.items, ids))), actions


def _on_turn_started(state: AIState, p: TurnStarted) -> tuple[AIState, list[SessionAction]]:
    ids = p.input_ids
    actions: list[SessionAction] = []
    if p.retry:
        actions.append(Retry())
        session = session_reducer(state.session, Retry())
        items = state.inbox.items
    else:
        admitted = {i.id: i for i in state.inbox.items if i.id in set(ids)}
        ordered = [admitted[i] for i in ids if i in admitted]
        # Everything but the last input enters as context; the last one generates.
        context = [changed(i, generate=False) for i in ordered[:-1]]
        session, context_actions = _admit(state.session, context, generate=False)
        session, last_actions = _admit(session, ordered[-1:], generate=True)
        actions = context_actions + last_actions
        if ordered and ordered[-1].role != "user":
            session = make_state(session.messages, "streaming", None)
        items = _without(state.inbox.items, ids)
    active = ActiveTurn(p.turn_id, ids, "starting", p.message_id, state.turns)
    return (
        state.with_(
            session=session,
            inbox=changed(state.inbox, items=items),
            active=active,
            turns=state.turns + 1,
            starting=False,
            retry_requested=False if p.retry else state.retry_requested,
        ),
        actions,
    )


def _on_turn_phase(state: AIState, p: TurnPhaseChanged) -> tuple[AIState, list[SessionAction]]:
    active = state.active
    if active is None or active.id != p.turn_id:
        return state, []
    paused_from = active.paused_from
    if p.phase == "paused" and paused_from is None and active.phase not in ("pausing", "paused"):
        paused_from = active.phase  # held at a handoff by a pause after the turn: resume into it
    return state.with_(active=changed(active, phase=p.phase, paused_from=paused_from)), []


def _on_turn_finished(state: AIState, p: TurnFinished) -> tuple[AIState, list[SessionAction]]:
    active = state.active
    if active is None or active.id != p.turn_id:
        return state, []
    actions: list[SessionAction]
    match p.outcome:
        case "failed":
            code = cast("ErrorCode | None", p.code)  # passed on as written (the part's reader checks it)
            actions = [ApplyPart(Failure(p.error if p.error is not None else "The turn failed.", code))]
        case "completed":
            actions = [ApplyPart(Finish(p.reason or "stop"))]
        case "stopped":
            actions = [Stop()]
        case "superseded":
            actions = [ApplyPart(Finish("aborted"))]
        case _:  # handed-off: the next turn starts in the same batch
            actions = []
    return _end_turn(state, active.id, p.outcome, actions)


def _on_step_started(state: AIState, p: StepStarted) -> tuple[AIState, list[SessionAction]]:
    active = state.active
    if active is None or active.id != p.turn_id:
        return state, []
    step = StepState(
        p.step_id,
        active.steps if p.turn_step is None else p.turn_step,
        state.session_steps if p.session_step is None else p.session_step,
        model=p.model,
        attempt=p.attempt,
    )
    actions: list[SessionAction] = [ApplyPart(MessageStart(active.message_id))]
    return _run(state, actions, active=changed(active, step=step, phase="generating"))


def _current_step(state: AIState, step_id: str | None) -> StepState | None:
    active = state.active
    if active is None or active.step is None or active.step.id != step_id or active.step.status != "running":
        return None
    return active.step


def _on_stream(state: AIState, p: Stream) -> tuple[AIState, list[SessionAction]]:
    if p.call_id is not None:  # preliminary output of a running tool
        record = state.tools.get(p.call_id)
        if record is None or record.status != "running":
            return state, []
    elif _current_step(state, p.step_id) is None:
        return state, []  # a late part from a step that is no longer current: dropped
    actions: list[SessionAction] = [ApplyPart(part) for part in p.parts]
    return _run(state, actions)


def _on_step_finished(state: AIState, p: StepFinished) -> tuple[AIState, list[SessionAction]]:
    step = _current_step(state, p.step_id)
    active = state.active
    if step is None or active is None:
        return state, []
    tools = dict(state.tools)
    for call_id, name in p.tool_calls:
        tools.setdefault(call_id, ToolRecord(call_id, name, active.id))
    finished = changed(
        step, status="finished", finish_reason=p.finish_reason, tool_calls=tuple(c for c, _ in p.tool_calls)
    )
    usage = _add_usage(state.usage, p.usage, step.model, p.estimate)
    phase = "tools" if p.tool_calls else active.phase
    return (
        state.with_(
            active=changed(active, step=finished, steps=active.steps + 1, phase=phase),
            tools=tools,
            usage=usage,
            session_steps=state.session_steps + 1,
        ),
        [],
    )


def _add_usage(usage: Usage, step_usage: Mapping[str, Any] | None, model: str, estimate: int | None) -> Usage:
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
        active=changed(active, step=changed(step, status=status), steps=active.steps + 1),
        session_steps=state.session_steps + 1,
    )


def _on_step_failed(state: AIState, p: StepFailed) -> tuple[AIState, list[SessionAction]]:
    step = _current_step(state, p.step_id)
    active = state.active
    if step is None or active is None:
        return state, []
    return _end_step(state, active, step, "failed"), []


def _on_step_superseded(state: AIState, p: StepSuperseded) -> tuple[AIState, list[SessionAction]]:
    step = _current_step(state, p.step_id)
    active = state.active
    if step is None or active is None:
        return state, []
    compaction = state.compaction
    actions: list[SessionAction] = []
    if compaction is not None and compaction.status == "running":
        # A pause now or a retry cut the step while it summarized: that compaction is interrupted.
        interrupted = changed(compaction, status="interrupted")
        state, actions = _run(state, [ApplyPart(_interrupted(interrupted, active))], compaction=interrupted)
    if p.restart:
        # The same position runs again: roll its partial output back (the new attempt rewrites it).
        session = state.session
        rewound = make_state(resumable(session.messages), session.status, session.error)
        return state.with_(session=rewound, active=changed(active, step=changed(step, status="superseded"))), actions
    return _end_step(state, active, step, "superseded"), actions


def _on_tool_started(state: AIState, p: ToolStarted) -> tuple[AIState, list[SessionAction]]:
    record = state.tools.get(p.call_id)
    if record is None or record.final:
        return state, []
    attempt = record.attempts + 1 if p.attempt is None else p.attempt
    if p.recovery is None:
        tools = _set_tool(state, p.call_id, status="running", attempts=attempt)
    else:
        tools = _set_tool(state, p.call_id, status="running", attempts=attempt, recovery=p.recovery)
    active = state.active
    if active is not None and active.phase not in ("pausing", "paused"):
        active = changed(active, phase="tools")
    return _run(state, [ToolPhase(record.name, "running", id=p.call_id)], tools=tools, active=active)


def _on_tool_reset(state: AIState, p: ToolReset) -> tuple[AIState, list[SessionAction]]:
    record = state.tools.get(p.call_id)
    if record is None or record.final:
        return state, []
    return state.with_(tools=_set_tool(state, p.call_id, status="pending")), []


def _on_tool_finished(state: AIState, p: ToolFinished) -> tuple[AIState, list[SessionAction]]:
    record = state.tools.get(p.call_id)
    if record is None or record.final:
        return state, []
    return _run(
        state,
        [ApplyPart(ToolResult(p.call_id, p.output))],
        tools=_set_tool(state, p.call_id, status="done"),
    )


def _on_tool_failed(state: AIState, p: ToolFailed) -> tuple[AIState, list[SessionAction]]:
    record = state.tools.get(p.call_id)
    if record is None or record.final:
        return state, []
    status = _TOOL_FAILURE_STATUS.get(str(p.code), "error")
    part_code = "cancelled" if status == "cancelled" else p.code
    actions: list[SessionAction] = [ApplyPart(ToolFailure(p.call_id, p.error, part_code))]
    return _run(state, actions, tools=_set_tool(state, p.call_id, status=status))


def _on_interaction(state: AIState, p: InteractionRequested) -> tuple[AIState, list[SessionAction]]:
    record = state.tools.get(p.call_id)
    if record is None or record.final:
        return state, []
    interaction = Interaction(p.interaction_id, p.call_id, record.name, p.prompt)
    tools = _set_tool(state, p.call_id, status="awaiting-approval", interaction_id=interaction.id)
    action = ToolPhase(record.name, "awaiting-confirmation", interaction.prompt, id=p.call_id)
    return _run(state, [action], tools=tools, interactions={**state.interactions, interaction.id: interaction})


def _on_child_started(state: AIState, p: ChildStarted) -> tuple[AIState, list[SessionAction]]:
    if p.call_id not in state.tools:
        return state, []
    return state.with_(tools=_set_tool(state, p.call_id, child=p.session_id)), []


def _on_nested(state: AIState, p: Nested) -> tuple[AIState, list[SessionAction]]:
    record = state.tools.get(p.call_id)
    if record is None or p.seq <= record.child_seq:
        return state, []  # a duplicate batch (at-least-once delivery), or a call we do not know
    actions = [nest(action, p.call_id) for action in p.actions]
    return _run(state, actions, tools=_set_tool(state, p.call_id, child_seq=p.seq))


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


def _on_compaction(state: AIState, p: Compaction) -> tuple[AIState, list[SessionAction]]:
    compaction = CompactionState(p.id, p.status, p.summary, p.through or 0, p.input_tokens, p.threshold_tokens)
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
        p.usage if isinstance(p.usage, dict) else None,
        state.active.message_id if state.active is not None else None,
    )
    return _run(state, [ApplyPart(part)], compaction=keep)


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


# -- model metadata (the default compaction threshold's inputs) ----------------------------------


def _on_metadata_requested(state: AIState, p: ModelMetadataRequested) -> tuple[AIState, list[SessionAction]]:
    if not p.model or p.model in state.model_metadata:
        return state, []  # recorded once per model and session
    return state.with_(model_metadata={**state.model_metadata, p.model: ModelMetadata("pending")}), []


def _on_metadata_resolved(state: AIState, p: ModelMetadataResolved) -> tuple[AIState, list[SessionAction]]:
    if not p.model:
        return state, []
    window = p.context_window
    if p.status == "resolved" and window is not None and window > 0:
        output = p.max_output_tokens if p.max_output_tokens is not None and p.max_output_tokens > 0 else None
        metadata = ModelMetadata("resolved", window, output)
    else:
        metadata = ModelMetadata("unavailable")
    return state.with_(model_metadata={**state.model_metadata, p.model: metadata}), []


def _payload_only(handle: Callable[[AIState, Any], Evolved]) -> Callable[[AIState, Event, Any], Evolved]:
    return lambda state, _event, data: handle(state, data)


_HANDLERS: dict[type, Callable[[AIState, Event, Any], Evolved]] = {
    HandlerScheduled: _on_handler_scheduled,
    HandlerFinished: _on_handler_finished,
    **dict.fromkeys(get_args(CommandPayload), _on_command),
    Stream: _payload_only(_on_stream),
    Decided: _payload_only(_on_decided),
    InputAdmitted: _payload_only(_on_admitted),
    TurnStarted: _payload_only(_on_turn_started),
    TurnPhaseChanged: _payload_only(_on_turn_phase),
    TurnFinished: _payload_only(_on_turn_finished),
    StepStarted: _payload_only(_on_step_started),
    StepFinished: _payload_only(_on_step_finished),
    StepFailed: _payload_only(_on_step_failed),
    StepSuperseded: _payload_only(_on_step_superseded),
    ToolStarted: _payload_only(_on_tool_started),
    ToolReset: _payload_only(_on_tool_reset),
    ToolFinished: _payload_only(_on_tool_finished),
    ToolFailed: _payload_only(_on_tool_failed),
    InteractionRequested: _payload_only(_on_interaction),
    ChildStarted: _payload_only(_on_child_started),
    Nested: _payload_only(_on_nested),
    Compaction: _payload_only(_on_compaction),
    ModelMetadataRequested: _payload_only(_on_metadata_requested),
    ModelMetadataResolved: _payload_only(_on_metadata_resolved),
}
"""The fold of each built-in payload class (``_evolve_ai``)."""

if set(_HANDLERS) != set(PAYLOAD_CLASSES.values()):  # a payload class added without a fold
    raise TypeError(f"no fold for {sorted(c.__name__ for c in set(PAYLOAD_CLASSES.values()) - set(_HANDLERS))}")
