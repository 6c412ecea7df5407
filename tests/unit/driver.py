"""A pure, in-memory driver of the fold for unit tests: decide, evolve, and the planner's appends.

It plays the executor's part without I/O: model steps and tool runs are written by hand with
``step`` and ``tool_done``, so every test states exactly what the model and the tools did.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from orchestrator.core import event_types as ai
from orchestrator.core.aistate import AIState
from orchestrator.core.commands import Command, Decision, decide
from orchestrator.core.contract import Contract
from orchestrator.core.events import Event
from orchestrator.core.fold import INTERRUPTED, evolve, fold_events, initial_state
from orchestrator.core.plan import Append, Cancel, Limits, RunStep, RunTool, next_effect
from orchestrator.core.stream import AgentStreamPart, ToolCall
from orchestrator.core.wire import part_to_wire


class Driver:
    """Keeps a log (a list of events) and its fold, like ``SessionLog`` without a store."""

    def __init__(
        self, contract: Contract | None = None, limits: Limits | None = None, policy: dict[str, str] | None = None
    ) -> None:
        self.contract = contract
        self.limits = limits or Limits()
        self.policy = policy or {}
        """Tool name -> ``rerun`` or ``report`` (default ``rerun``), for work a pause now or a retry cancels."""
        self.log: list[Event] = []
        self.state: AIState = initial_state(contract)

    def append(self, *events: Event) -> None:
        for event in events:
            indexed = replace(event, index=len(self.log) + 1, id=event.id or f"troupe:s#{len(self.log) + 1}")
            self.log.append(indexed)
            self.state, _ = evolve(self.state, indexed, self.contract)

    def submit(self, command: Command, *, settle: bool = True) -> Decision:
        decision = decide(self.state, command)
        self.append(*decision.events)
        if settle:
            self.settle()
        return decision

    def settle(self) -> RunStep | RunTool | None:
        """Apply the planner's lifecycle appends until it asks for work (or waits)."""
        for _ in range(100):
            effect = next_effect(self.state, self.limits)
            if isinstance(effect, Append):
                self.append(*effect.events)
                continue
            if isinstance(effect, RunStep | RunTool) or effect is None:
                return effect
            if isinstance(effect, Cancel):
                self.cancel(effect.reason)
                continue
            raise AssertionError(f"unexpected effect {effect!r}")
        raise AssertionError("the planner did not settle")

    def step(
        self, *parts: AgentStreamPart, finish: str | None = None, calls: list[tuple[str, str]] | None = None
    ) -> None:
        """Run the model step the planner asks for, streaming ``parts``."""
        effect = self.settle()
        assert isinstance(effect, RunStep), f"expected a model step, got {effect!r}"
        self.append(
            Event(
                "",
                ai.STEP_STARTED,
                {
                    "turnId": effect.turn_id,
                    "stepId": effect.step_id,
                    "turnStep": effect.turn_step,
                    "sessionStep": effect.session_step,
                    "attempt": effect.attempt,
                    "model": "fake",
                },
            )
        )
        if parts:
            self.append(Event("", ai.STREAM, {"stepId": effect.step_id, "parts": [part_to_wire(p) for p in parts]}))
        tool_calls = calls or [(p.id, p.name) for p in parts if isinstance(p, ToolCall)]
        reason = finish or ("tool-calls" if tool_calls else "stop")
        self.append(
            Event(
                "",
                ai.STEP_FINISHED,
                {
                    "stepId": effect.step_id,
                    "finishReason": reason,
                    "toolCalls": [{"id": i, "name": n} for i, n in tool_calls],
                },
            )
        )
        self.settle()

    def tool_done(self, output: Any = "ok", *, approval: str | None = None) -> str:
        """Run the tool call the planner asks for (asking approval first when ``approval``)."""
        effect = self.settle()
        assert isinstance(effect, RunTool), f"expected a tool run, got {effect!r}"
        call = effect.call
        if approval is not None and call.status == "pending":
            self.append(
                Event("", ai.INTERACTION_REQUESTED, {"interactionId": approval, "callId": call.id, "prompt": "OK?"})
            )
            self.settle()
            return call.id
        self.append(Event("", ai.TOOL_STARTED, {"callId": call.id, "name": call.name, "attempt": call.attempts + 1}))
        self.append(Event("", ai.TOOL_FINISHED, {"callId": call.id, "output": output}))
        self.settle()
        return call.id

    def cancel(self, reason: str) -> None:
        """Cancel the work in flight as the runner does (``orchestrator.run``'s ``_cancel_work``)."""
        active = self.state.active
        assert active is not None
        step = active.step
        if step is not None and step.status == "running":
            self.append(
                Event("", ai.STEP_SUPERSEDED, {"stepId": step.id, "reason": reason, "restart": reason == "paused"})
            )
        for record in list(self.state.tools.values()):
            if record.turn_id != active.id or record.status != "running":
                continue
            policy = self.policy.get(record.name, "rerun")
            if reason == "paused" and policy == "rerun":
                self.append(Event("", ai.TOOL_RESET, {"callId": record.id, "reason": reason}))
            elif policy == "report":
                self.append(
                    Event("", ai.TOOL_FAILED, {"callId": record.id, "error": INTERRUPTED, "code": "interrupted"})
                )
            else:
                self.append(
                    Event("", ai.TOOL_FAILED, {"callId": record.id, "error": "Cancelled.", "code": "cancelled"})
                )

    def replay(self) -> AIState:
        return fold_events(self.log, None, self.contract)
