"""Crash recovery, as a pure function of the state a re-folded log gives.

``recover(state, policy)`` returns the events that reconcile unfinished work; after appending
them, the planner carries on as if nothing happened:

- a model step that was running is marked superseded and runs again at the same position (its
  partial output is rolled back, and a scripted model replays it exactly);
- a tool that was scheduled but never started simply runs (nothing to write);
- a tool that started and did not finish runs again when its policy is ``rerun``, and otherwise
  gets exactly one error result saying it was interrupted and may have partly run (the policy
  its start recorded wins: a tool from a dynamic source, e.g. an MCP server, says it there);
- a delegate call with a running sub-agent is re-attached (the sub-agent resumes from its own
  log; attaching again is idempotent);
- a compaction that was running is marked interrupted, and a pause that was settling is paused.
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.core import event_types as ai
from orchestrator.core.aistate import AIState
from orchestrator.core.events import Event
from orchestrator.core.fold import INTERRUPTED
from orchestrator.core.payloads import Compaction, StepSuperseded, ToolFailed, ToolReset, TurnPhaseChanged

__all__ = ["REATTACH", "recover"]

REATTACH = "reattach"
"""The policy of a delegate call: its sub-agent is a durable session, so it is re-attached."""


def recover(state: AIState, policy: Callable[[str], str]) -> list[Event]:
    """The events that reconcile a crashed session (see the module docstring).

    ``policy(tool_name)`` is ``rerun``, ``report`` or ``reattach`` (delegate calls).
    """
    events: list[Event] = []
    active = state.active
    if active is None:
        return events
    if active.step is not None and active.step.status == "running":
        events.append(Event("", ai.STEP_SUPERSEDED, data=StepSuperseded(active.step.id, "recovered", restart=True)))
    if state.compaction is not None and state.compaction.status == "running":
        events.append(Event("", ai.COMPACTION, data=Compaction(state.compaction.id, "interrupted")))
    for record in state.tools.values():
        if record.turn_id != active.id or record.status != "running":
            continue
        rule = record.recovery or policy(record.name)
        if rule == "report":
            events.append(Event("", ai.TOOL_FAILED, data=ToolFailed(record.id, INTERRUPTED, "interrupted")))
        else:  # rerun, and reattach: back to pending, and the planner starts (or re-attaches) it
            events.append(Event("", ai.TOOL_RESET, data=ToolReset(record.id, "recovered")))
    if active.phase == "pausing":
        events.append(Event("", ai.TURN_PHASE, data=TurnPhaseChanged(active.id, "paused")))
    return events
