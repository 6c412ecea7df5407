"""The inbox and the turn state machine, model-checked: random command sequences against the seeds' rules.

A Hypothesis state machine drives the pure core (``decide`` → ``evolve`` → the planner, through
``tests.unit.driver``) with every command a caller has — send, steer, queue edit / move / remove /
send now, stop (with and without cancelling the queue), retry, pause after the turn or now,
resume, approvals — interleaved with the work the planner asks for (model steps that stream text
or call tools, tools that finish, start and never finish, or wait for approval) and crashes
(the state thrown away, the log re-folded, ``recover`` applied).

After every step it checks what ``conversations.md`` promises of the inbox:

- the fold of the log is the live state (a crash anywhere loses nothing that was folded);
- no accepted input is lost: each is pending, in the conversation, or was removed by a command
  that says so (``remove``; a stop that cancels the queue, or the stopped turn's steering);
- no input is doubled: an input id is in the conversation at most once, and never both pending
  and in the conversation;
- queue edits keep the order, a move puts the input where it was asked, a remove takes only it;
- a rejected command writes its command and its decision and changes nothing else;
- while admission is paused and no turn runs, no model step starts.
"""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from orchestrator.core.aistate import AIState
from orchestrator.core.commands import (
    Command,
    Decision,
    EditInput,
    MoveInput,
    PauseSession,
    RemoveInput,
    Respond,
    ResumeSession,
    RetryTurn,
    SendInput,
    SendNow,
    StopTurn,
)
from orchestrator.core.events import Event
from orchestrator.core.fold import fold_events
from orchestrator.core.plan import RunStep, RunTool, next_effect
from orchestrator.core.recovery import recover
from orchestrator.core.stream import TextDelta, ToolCall

from .driver import Driver

POLICY = {"lookup": "rerun", "charge": "report", "approve_me": "report"}
"""Tool names the model calls, and each one's recovery policy."""

texts = st.text(alphabet="abc xyz", min_size=1, max_size=6).filter(str.strip)


def _user_ids(state: AIState) -> list[str]:
    return [m.id for m in state.messages if m.role == "user"]


def _move(order: list[str], input_id: str, before_id: str | None) -> list[str]:
    """The seed's move: ``input_id`` before ``before_id`` (``None``: to the end); before itself: as it is."""
    if before_id == input_id:
        return order
    rest = [i for i in order if i != input_id]
    at = rest.index(before_id) if before_id is not None else len(rest)
    return [*rest[:at], input_id, *rest[at:]]


class InboxMachine(RuleBasedStateMachine):
    """The core under random commands, work and crashes (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.driver = Driver(policy=POLICY)
        self.accepted: set[str] = set()
        """Input ids whose ``SendInput`` was applied."""
        self.dropped: set[str] = set()
        """Inputs a command took out of the queue on purpose (remove, stop)."""
        self.serial = 0
        self.ticks = 0

    # -- helpers ---------------------------------------------------------------------------------

    @property
    def state(self) -> AIState:
        return self.driver.state

    def _id(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}-{self.serial}"

    def _pending_ids(self) -> list[str]:
        return [item.id for item in self.state.inbox.items]

    def _submit(self, command: Command) -> Decision:
        before = self.state
        size = len(self.driver.log)
        decision = self.driver.submit(command)
        if decision.receipt is not None and not decision.applied:
            # A rejection: its command and decision are written, and the state moves on no further.
            assert len(self.driver.log) == size + 2, decision
            assert self.state.inbox == before.inbox
            assert self.state.active == before.active
            assert self.state.messages == before.messages
        return decision

    def _check_order(self, before: list[str], expected: list[str]) -> None:
        """The queue is ``expected``, but for inputs admitted meanwhile (they left from the queue only)."""
        now = self._pending_ids()
        assert [i for i in now if i in before] == [i for i in expected if i in now], (before, expected, now)

    def _effect(self) -> Any:
        return next_effect(self.state, self.driver.limits)

    # -- commands ----------------------------------------------------------------------------------

    @rule(text=texts, generate=st.booleans())
    def send(self, text: str, generate: bool) -> None:
        input_id = self._id("u")
        decision = self._submit(SendInput(input_id, text, "user", generate))
        assert decision.applied
        self.accepted.add(input_id)

    @rule(text=texts, observed=st.booleans())
    def steer(self, text: str, observed: bool) -> None:
        active = self.state.active
        turn = active.id if observed and active is not None else None
        input_id = self._id("steer")
        decision = self._submit(SendInput(input_id, text, "user", True, steer=turn))
        assert decision.applied
        self.accepted.add(input_id)

    @rule(data=st.data(), text=texts)
    def edit(self, data: st.DataObject, text: str) -> None:
        target = data.draw(st.sampled_from(sorted(self.accepted | {"nobody"})))
        before = self._pending_ids()
        decision = self._submit(EditInput(self._id("edit"), target, text))
        assert decision.applied == (target in before), decision
        if decision.applied:
            self._check_order(before, before)
            item = self.state.inbox.get(target)
            assert item is None or item.text == text

    @rule(data=st.data())
    def move(self, data: st.DataObject) -> None:
        ids = sorted(self.accepted | {"nobody"})
        target = data.draw(st.sampled_from(ids))
        before_id = data.draw(st.none() | st.sampled_from(ids))
        before = self._pending_ids()
        decision = self._submit(MoveInput(self._id("move"), target, before_id))
        valid = target in before and (before_id is None or before_id in before)
        assert decision.applied == valid, decision
        if valid:
            self._check_order(before, _move(before, target, before_id))

    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        target = data.draw(st.sampled_from(sorted(self.accepted | {"nobody"})))
        before = self._pending_ids()
        decision = self._submit(RemoveInput(self._id("remove"), target))
        assert decision.applied == (target in before), decision
        if decision.applied:
            assert self.state.inbox.get(target) is None
            assert target not in _user_ids(self.state)
            self.dropped.add(target)
            self._check_order(before, [i for i in before if i != target])

    @rule(data=st.data(), observed=st.booleans())
    def send_now(self, data: st.DataObject, observed: bool) -> None:
        target = data.draw(st.sampled_from(sorted(self.accepted | {"nobody"})))
        active = self.state.active
        turn = active.id if observed and active is not None else None
        item = self.state.inbox.get(target)
        decision = self._submit(SendNow(self._id("sendnow"), target, turn))
        if item is None:
            assert not decision.applied and decision.receipt is not None
            assert decision.receipt.reason == "not-pending"

    @rule(cancel_queued=st.booleans(), observed=st.booleans())
    def stop(self, cancel_queued: bool, observed: bool) -> None:
        active = self.state.active
        before = self.state.inbox.items
        turn = active.id if observed and active is not None else None
        decision = self._submit(StopTurn(self._id("stop"), turn, cancel_queued))
        if active is None:
            assert decision.receipt is None and not decision.events  # nothing to stop: nothing written
            return
        if not decision.applied:
            return
        assert self.state.active is None or self.state.active.id != active.id
        now = {item.id for item in self.state.inbox.items}
        in_chat = set(_user_ids(self.state))
        for item in before:
            if item.id in now or item.id in in_chat:
                continue
            # Gone from the queue without entering the conversation: only what the stop may cancel.
            assert cancel_queued or item.after_step_of == active.id, (item, cancel_queued)
            self.dropped.add(item.id)

    @rule(observed=st.booleans())
    def retry(self, observed: bool) -> None:
        turn = self.state.last_turn[0] if observed and self.state.last_turn is not None else None
        self._submit(RetryTurn(self._id("retry"), turn))

    @rule(when=st.sampled_from(["after-turn", "now"]))
    def pause(self, when: Any) -> None:
        assert self._submit(PauseSession(self._id("pause"), when)).applied

    @rule()
    def resume(self) -> None:
        assert self._submit(ResumeSession(self._id("resume"))).applied

    @rule(data=st.data(), approved=st.booleans())
    def respond(self, data: st.DataObject, approved: bool) -> None:
        pending = sorted(i.id for i in self.state.interactions.values() if i.status == "pending")
        target = data.draw(st.sampled_from([*pending, "nobody"]))
        decision = self._submit(Respond(self._id("respond"), target, approved, None if approved else "no"))
        assert decision.applied == (target in pending)

    # -- the work the planner asks for ---------------------------------------------------------------

    @precondition(lambda self: isinstance(self._effect(), RunStep))
    @rule(kind=st.sampled_from(["text", "lookup", "charge", "approve_me"]), text=texts)
    def model_step(self, kind: str, text: str) -> None:
        if kind == "text":
            self.driver.step(TextDelta("t", text))
        else:
            self.driver.step(TextDelta("t", text), ToolCall(self._id("call"), kind, {}))

    @precondition(lambda self: isinstance(self._effect(), RunTool))
    @rule(finish=st.booleans())
    def tool(self, finish: bool) -> None:
        effect = self._effect()
        call = effect.call
        if call.name == "approve_me" and call.status == "pending":
            self.driver.tool_done(approval=self._id("ask"))
        elif finish:
            self.driver.tool_done("done")
        else:  # started, then the process dies before it finishes (see ``crash``)
            self.driver.append(
                Event("", "ai.tool.started", {"callId": call.id, "name": call.name, "attempt": call.attempts + 1})
            )

    @rule()
    def crash(self) -> None:
        """The process dies: the state is refolded from the log, and recovery reconciles it."""
        refolded = fold_events(self.driver.log, None, None)
        self.driver.state = refolded
        self.driver.append(*recover(refolded, lambda name: POLICY.get(name, "rerun")))
        self.driver.settle()

    # -- what must always hold ---------------------------------------------------------------------

    @invariant()
    def fold_is_live_state(self) -> None:
        assert self.driver.replay() == self.state

    @invariant()
    def no_input_lost_or_doubled(self) -> None:
        pending = self._pending_ids()
        chat = _user_ids(self.state)
        assert len(pending) == len(set(pending)), pending
        assert len(chat) == len(set(chat)), chat
        assert not set(pending) & set(chat)
        assert set(pending) | set(chat) <= self.accepted | {m.id for m in self.state.messages if m.role != "user"}
        lost = self.accepted - set(pending) - set(chat) - self.dropped
        assert not lost, f"accepted inputs neither pending, in the conversation nor removed: {sorted(lost)}"

    @invariant()
    def paused_admits_nothing(self) -> None:
        if self.state.inbox.paused and self.state.active is None:
            assert not isinstance(self._effect(), RunStep | RunTool)


InboxMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestInboxModel = InboxMachine.TestCase
