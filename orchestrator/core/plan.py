"""What a session should do next, decided from its state alone.

``next_effect(state, limits)`` is the run loop's brain, pure: it returns either lifecycle events
to append right away (admit a turn, hand off to steering, finish a turn, settle a pause) or a
piece of work for the executor (run a model step, run a tool), or nothing while the session waits
(for a model, a tool, an approval or input). The executor appends, folds, and asks again; after
a crash the same question over the recovered state picks up where the log left off.

Pause holds every admission, a handoff included: steering or Send now aimed at a turn while the
session is paused (``pause(when="after-turn")`` too) does not start a new turn. The turn stops at
the handoff point (its response's tools done, before another model step) and goes ``paused``;
its steering stays first in the queue, and on Resume it all enters together as one turn.

Lifecycle events are returned without ids: the session log gives every server event an id
derived from its session and log index, so a retried append is an idempotent replay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from orchestrator.core._fast import fast_init
from orchestrator.core.aistate import ActiveTurn, AIState, InboxItem, ToolRecord
from orchestrator.core.events import Event
from orchestrator.core.ids import reply_id, step_id
from orchestrator.core.payloads import AIPayload, InputAdmitted, TurnFinished, TurnPhaseChanged, TurnStarted
from orchestrator.core.reducer import resumable

__all__ = ["Append", "Effect", "Limits", "RunStep", "RunTool", "next_effect"]


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-agent limits the planner enforces."""

    max_steps: int = 20
    """Model steps a turn may take before it finishes without another step."""


@fast_init
@dataclass(frozen=True, slots=True)
class Append:
    """Append these lifecycle events now (no I/O needed)."""

    events: tuple[Event, ...]


@fast_init
@dataclass(frozen=True, slots=True)
class RunStep:
    """Run one model step at this position."""

    turn_id: str
    step_id: str
    turn_step: int
    session_step: int
    attempt: int


@dataclass(frozen=True, slots=True)
class RunTool:
    """Run (or ask approval for) this tool call of the active turn."""

    call: ToolRecord


@dataclass(frozen=True, slots=True)
class Cancel:
    """Stop the work in flight (a pause now, or a retry superseding the turn), then ask again."""

    reason: str


Effect: TypeAlias = Append | RunStep | RunTool | Cancel


def _event(data: AIPayload) -> Event:
    return Event("", data.type, data=data)


def _start_turn(state: AIState, items: list[InboxItem], *, retry: bool = False) -> Event:
    turn_id = f"t{state.turns + 1}"
    message_id = reply_id(turn_id)
    if retry:
        # A retry continues the reply it resumes (one assistant message per answer).
        kept = resumable(state.messages)
        if kept and kept[-1].role == "assistant":
            message_id = kept[-1].id
    return _event(TurnStarted(turn_id, tuple(i.id for i in items), message_id, retry))


def _front_run(items: tuple[InboxItem, ...]) -> tuple[list[InboxItem], bool]:
    """The inputs the next admission takes, and whether they start a turn.

    Steering left over from a finished turn enters together (the last one generating); otherwise
    leading passive context enters with the first generating input. Only passive inputs enter
    the conversation without a turn.
    """
    first = items[0]
    if first.after_step_of is not None:
        run = [i for i in items if i.after_step_of == first.after_step_of]
        return run, True
    taken: list[InboxItem] = []
    for item in items:
        taken.append(item)
        if item.generate:
            return taken, True
    return taken, False


def _running_tool(state: AIState, active: ActiveTurn) -> bool:
    return any(r.status == "running" for r in _turn_tools(state, active))


def _turn_tools(state: AIState, active: ActiveTurn) -> list[ToolRecord]:
    step = active.step
    if step is None:
        return []
    return [state.tools[c] for c in step.tool_calls if c in state.tools]


def next_effect(state: AIState, limits: Limits | None = None) -> Effect | None:
    """The next thing to do (see the module docstring); ``None`` means wait."""
    limits = limits or Limits()
    active = state.active
    if active is None:
        return _idle_effect(state)
    step = active.step
    step_running = step is not None and step.status == "running"
    if state.retry_requested:
        if step_running or _running_tool(state, active):
            return Cancel("superseded")
        return Append((_event(TurnFinished(active.id, "superseded")),))
    if active.phase == "pausing":
        if step_running or _running_tool(state, active):
            return Cancel("paused")
        return Append((_event(TurnPhaseChanged(active.id, "paused")),))
    if active.phase == "paused" or step_running:
        return None
    tools = _turn_tools(state, active)
    steering = [i for i in state.inbox.items if i.after_step_of == active.id]
    if steering and _ready_to_hand_off(active, tools):
        if state.inbox.paused:
            # Pause holds admission, and the handoff admits the steering: the turn waits at the
            # handoff point, paused, with its steering first in the queue until Resume.
            return Append((_event(TurnPhaseChanged(active.id, "paused")),))
        return Append((_event(TurnFinished(active.id, "handed-off")), _start_turn(state, steering)))
    for record in tools:
        if record.final:
            continue
        if record.status in ("pending", "approved"):
            return RunTool(record)
        return None  # running, or awaiting approval
    if step is None or active.phase == "starting":
        return _run_step(state, active, attempt=1)
    if step.status == "superseded":
        return _run_step(state, active, attempt=step.attempt + 1)
    if step.status == "finished" and not step.tool_calls:
        return Append((_event(TurnFinished(active.id, "completed", reason=step.finish_reason or "stop")),))
    if active.steps >= limits.max_steps:
        return Append((_event(TurnFinished(active.id, "completed", reason="max-steps")),))
    return _run_step(state, active, attempt=1)


def _ready_to_hand_off(active: ActiveTurn, tools: list[ToolRecord]) -> bool:
    """Steering hands off before another model step.

    That is once the current response's tools are done (an approval still waiting closes, so
    the unapproved tool never runs), or at once when Pause now cut the turn's own work.
    """
    if any(t.status == "running" for t in tools):
        return False
    if active.interrupted:
        return True
    return all(t.final or t.status == "awaiting-approval" for t in tools)


def _run_step(state: AIState, active: ActiveTurn, *, attempt: int) -> RunStep:
    return RunStep(active.id, step_id(active.id, active.steps, attempt), active.steps, state.session_steps, attempt)


def _idle_effect(state: AIState) -> Effect | None:
    if state.retry_requested:
        return Append((_start_turn(state, [], retry=True),))
    inbox = state.inbox
    if inbox.paused or not inbox.items:
        return None
    items, starts_turn = _front_run(inbox.items)
    if not starts_turn:
        return Append((_event(InputAdmitted(tuple(i.id for i in items))),))
    return Append((_start_turn(state, items),))
