"""The fold of a turn's lifecycle: turns, steps, tools and approvals, sub-agents, compaction, model metadata.

Each handler drops what no longer applies (a late part from a step that is not current, a result
for a call already final, a duplicate batch from a sub-agent), so replaying a log with those
events in it gives the state the live session had.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, cast

from orchestrator.core.actions import ApplyPart, Retry, SessionAction, Stop, ToolPhase
from orchestrator.core.aistate import (
    ActiveTurn,
    AIState,
    CompactionState,
    Interaction,
    ModelMetadata,
    StepState,
    ToolRecord,
    Usage,
    changed,
)
from orchestrator.core.fold._common import (
    _TOOL_FAILURE_STATUS,
    Handlers,
    _end_turn,
    _interrupted,
    _run,
    _set_tool,
    payload_only,
)
from orchestrator.core.fold.inbox import _admit, _without
from orchestrator.core.payloads import (
    ChildStarted,
    Compaction,
    InteractionRequested,
    ModelMetadataRequested,
    ModelMetadataResolved,
    Nested,
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
    TurnStarted,
)
from orchestrator.core.reducer import resumable, session_reducer
from orchestrator.core.state import ErrorCode, make_state
from orchestrator.core.stream import CompactionUpdate, Failure, Finish, MessageStart, ToolFailure, ToolResult
from orchestrator.core.wire import action_to_wire

# -- lifecycle ---------------------------------------------------------------------------------


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
    made: dict[str, ToolRecord] = {}
    for call_id, name in p.tool_calls:
        if call_id not in state.tools and call_id not in made:  # a call id seen before keeps its record
            made[call_id] = ToolRecord(call_id, name, active.id)
    tools = {**state.tools, **made} if made else state.tools
    finished = changed(
        step, status="finished", finish_reason=p.finish_reason, tool_calls=tuple(c for c, _ in p.tool_calls)
    )
    usage = _add_usage(state.usage, p.usage, step.model, p.estimate)
    phase = "tools" if p.tool_calls else active.phase
    calls = (*active.calls, *made) if made else active.calls
    return (
        state.with_(
            active=changed(active, step=finished, steps=active.steps + 1, phase=phase, calls=calls),
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


HANDLERS: Handlers = {
    Stream: payload_only(_on_stream),
    TurnStarted: payload_only(_on_turn_started),
    TurnPhaseChanged: payload_only(_on_turn_phase),
    TurnFinished: payload_only(_on_turn_finished),
    StepStarted: payload_only(_on_step_started),
    StepFinished: payload_only(_on_step_finished),
    StepFailed: payload_only(_on_step_failed),
    StepSuperseded: payload_only(_on_step_superseded),
    ToolStarted: payload_only(_on_tool_started),
    ToolReset: payload_only(_on_tool_reset),
    ToolFinished: payload_only(_on_tool_finished),
    ToolFailed: payload_only(_on_tool_failed),
    InteractionRequested: payload_only(_on_interaction),
    ChildStarted: payload_only(_on_child_started),
    Nested: payload_only(_on_nested),
    Compaction: payload_only(_on_compaction),
    ModelMetadataRequested: payload_only(_on_metadata_requested),
    ModelMetadataResolved: payload_only(_on_metadata_resolved),
}
"""The fold of each payload class of this family (merged into ``fold._HANDLERS``)."""
