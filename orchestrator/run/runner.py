"""``SessionRunner``: executes one session's effects, in process. The Ray shell drives this too.

Everything that changes the session goes through one lock and the log: commands (decided, then
appended), the model's stream parts (buffered and flushed every few milliseconds or few hundred
parts as one ``ai.stream`` event), tool runs, sub-agent batches and lifecycle events from the
planner. After every append the runner asks the planner what to do next, cancels work the state
no longer wants (a stop, a pause now, a superseded turn), and tells its listeners (subscribers,
a parent session) what was applied.

On open it re-folds the log and applies ``recover``: a crash costs at most the work in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import structlog

from orchestrator.core import event_types as ai
from orchestrator.core._json import JsonObject, JsonValue
from orchestrator.core.aistate import AIState, Receipt, ToolRecord
from orchestrator.core.approvals import split_nested
from orchestrator.core.buffer import coalesce
from orchestrator.core.commands import Command, Decision, Respond, decide
from orchestrator.core.errors import ConcurrencyConflict, ModelError, PartialDuplicateBatch, ToolError, UsageError
from orchestrator.core.events import Event, check_caller_event
from orchestrator.core.fold import initial_state
from orchestrator.core.ids import approval_id, child_session_id
from orchestrator.core.parts import ToolPart
from orchestrator.core.payloads import Stream
from orchestrator.core.plan import Append, Cancel, Limits, RunStep, RunTool, next_effect
from orchestrator.core.recovery import REATTACH, recover
from orchestrator.core.stream import AgentStreamPart, MessageMetadata, StepFinish, TextDelta, ToolCall, ToolResult
from orchestrator.core.turn import TurnOutcome
from orchestrator.core.wire import part_to_wire
from orchestrator.models.base import CancelSignal, ModelAdapter, ModelRequest, ToolSpec
from orchestrator.run.agent import Agent, MetadataContext, ResolverContext
from orchestrator.run.children import ChildBatch, Children, ChildRequest
from orchestrator.run.compaction import (
    SUMMARY_INSTRUCTIONS,
    calibrate,
    compaction_cut,
    estimate_tokens,
    prompt_messages,
)
from orchestrator.run.log import Applied, SessionLog
from orchestrator.run.pacing import StreamPacer
from orchestrator.run.toolport import ToolLike
from orchestrator.store.base import EventStore

_log = structlog.get_logger("troupe.runner")

__all__ = ["Listener", "SessionRunner"]

Listener = Callable[[Sequence[Applied], AIState, int], Awaitable[None]]
"""Told after every append: what was applied, the state after it, and its log index."""


@dataclass
class _StepWork:
    step_id: str
    task: asyncio.Task[None]
    signal: CancelSignal


@dataclass
class _ToolWork:
    call_id: str
    name: str
    task: asyncio.Task[None]
    signal: CancelSignal
    child: str | None = None


class SessionRunner:
    """Runs a session's turns (see the module docstring). Create with ``open``."""

    def __init__(
        self,
        log: SessionLog,
        agent: Agent,
        *,
        children: Children | None = None,
        clock: Callable[[], float] = time.time,
        flush_interval: float = 0.004,
        flush_every: float = 0.02,
        flush_parts: int = 256,
        nested_delay: float = 0.01,
        pacer: StreamPacer | None = None,
    ) -> None:
        self.log = log
        self.agent = agent
        self.children = children
        self.clock = clock
        self.flush_interval = flush_interval
        self.flush_every = max(flush_every, flush_interval)
        self.flush_parts = flush_parts
        self.nested_delay = nested_delay
        self.pacer = pacer if pacer is not None else StreamPacer()
        """The stream-write budget this session shares with the others of its process."""
        self._nested_timer: asyncio.TimerHandle | None = None
        self.limits = Limits(agent.max_steps)
        self.listeners: list[Listener] = []
        self._lock = asyncio.Lock()
        self._changed = asyncio.Condition()
        self._step: _StepWork | None = None
        self._tools: dict[str, _ToolWork] = {}
        self._driving = False
        self._again = False
        self._closed = False
        self._cancelling = False
        self._waiters = 0
        self._queue: list[tuple[Sequence[Event], asyncio.Future[list[Applied]]]] = []
        self._draining = False
        self._background: set[asyncio.Task[Any]] = set()
        self._held: dict[str, dict[int, ChildBatch]] = {}
        self._ledger = _TurnLedger(log.state)
        self.listeners.append(self._ledger.listen)

    @classmethod
    async def open(
        cls, store: EventStore, session_id: str, agent: Agent, *, start: bool = True, **options: Any
    ) -> SessionRunner:
        """Load the session from the store, recover unfinished work, and start driving it."""
        log = await SessionLog.open(store, session_id, agent.contract)
        runner = cls(log, agent, **options)
        if start:
            await runner.start()
        return runner

    @property
    def session_id(self) -> str:
        """The session's id."""
        return self.log.session_id

    @property
    def state(self) -> AIState:
        """The current fold."""
        return self.log.state

    async def start(self) -> None:
        """Reconcile work a crash interrupted, then run whatever the state asks for."""
        events = recover(self.log.state, self._policy)
        if events:
            await self._append(events)
        self._kick()

    def _policy(self, name: str) -> str:
        if self.agent.sub_agent(name) is not None:
            return REATTACH
        for ref in self.agent.tools:
            if isinstance(ref, ToolLike) and ref.name == name:
                return ref.recovery
        return "rerun"

    # -- the one way anything changes ----------------------------------------------------------

    async def _append(self, events: Sequence[Event]) -> list[Applied]:
        """Queue ``events`` for the session's next write and wait until it is durable.

        Everything queued while a write is in flight (stream flushes, sub-agent batches, tool
        results) goes out together in the next one: group commit at the session level, so the
        number of writes follows what the store can take rather than how many producers there are.
        """
        future: asyncio.Future[list[Applied]] = asyncio.get_running_loop().create_future()
        self._queue.append((events, future))
        self._request_drain()
        return await future

    def _request_drain(self) -> None:
        if not self._draining and not self._closed:
            self._draining = True
            self._spawn(self._drain())

    async def _drain(self) -> None:
        if self._nested_timer is not None:
            self._nested_timer.cancel()
            self._nested_timer = None
        try:
            while self._queue or self._nested_ready():
                async with self._lock:
                    items, self._queue = self._queue, []
                    events = [*self._take_nested(), *(e for batch, _ in items for e in batch)]
                    try:
                        applied = await self._commit_locked(events) if events else []
                    except BaseException as error:
                        for _, future in items:
                            if not future.done():
                                future.set_exception(error)
                        if not isinstance(error, Exception):
                            raise
                        continue
                    for _, future in items:
                        if not future.done():
                            future.set_result(applied)
        finally:
            self._draining = False
            if self._queue and not self._closed:
                self._request_drain()

    async def _commit_locked(self, events: Sequence[Event]) -> list[Applied]:
        """Append ``events`` and whatever the planner decides follows them, as one batch.

        The planner runs over the state the batch would produce (a pure fold; nothing is written
        yet), so a command, the turn it starts and that turn's first step are one write; so are a
        step's last parts, its finish and the next tool's start. Work (a model step, a tool run)
        starts only once the batch is durable. Call with the lock held.
        """
        log = self.log
        now = self.clock()
        batch: list[Event] = []
        staged: list[Applied] = []
        state = log.state

        def add(new: Sequence[Event]) -> None:
            nonlocal state
            for event in new:
                if _stale(state, event):
                    continue  # a late part or end of a step that was stopped or superseded: dropped
                stamped = log.stamp(event, len(batch), now)
                folded = log.fold([stamped], state)[0]
                batch.append(stamped)
                staged.append(folded)
                state = folded.state

        add(events)
        starts: list[Callable[[], None]] = []
        early: list[Callable[[AIState], _StepWork]] = []
        cancel: str | None = None
        claimed: set[str] = set()
        for _ in range(64):
            effect = next_effect(state, self.limits)
            if isinstance(effect, Append):
                add(effect.events)
                continue
            if isinstance(effect, RunStep):
                if self._step is not None and self._step.step_id == effect.step_id:
                    break
                new, step = self._prepare_step(effect, state)
                add(new)
                if step is not None:
                    if self.agent.compaction is None:
                        early.append(step)
                    else:  # compaction reads and appends to the log: start after the write
                        starts.append(partial(self._start_after_write, step))
                continue
            if isinstance(effect, RunTool):
                call = effect.call
                if call.id in self._tools or call.id in claimed:
                    break
                claimed.add(call.id)
                new, start = self._prepare_tool(call, state)
                add(new)
                if start is not None:
                    starts.append(start)
                if new:
                    continue
            elif isinstance(effect, Cancel):
                cancel = effect.reason
            break
        applied: list[Applied] = []
        # A model step starts while its start is written: the model's first tokens take longer
        # than the write, and its parts are queued behind this batch, so they are still durable
        # only after it. (The model call is no side effect to guard; tools start after the write.)
        speculative = [step(state) for step in early]
        if batch:
            try:
                result = await log.commit(batch, staged)
            except BaseException as error:
                self._abandon(speculative)
                if isinstance(error, ConcurrencyConflict):
                    # Someone else wrote this session's log (a stale owner, a failover): re-read it.
                    await log.refresh()
                raise
            if not result.duplicate:
                applied = staged
                state, index = log.state, log.index
                for listener in list(self.listeners):
                    await listener(applied, state, index)
                self._reconcile()
                if self._waiters:
                    async with self._changed:
                        self._changed.notify_all()
        for start in starts:
            start()
        if cancel is not None and not self._cancelling:
            self._cancelling = True
            self._spawn(self._cancel_work(cancel))
        return applied

    def _kick(self) -> None:
        if self._closed:
            return
        if self._driving:
            self._again = True
            return
        self._spawn(self._drive())

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _drive(self) -> None:
        self._driving = True
        try:
            while not self._closed:
                self._again = False
                async with self._lock:
                    await self._commit_locked([])
                if not self._again:
                    break
        finally:
            self._driving = False

    def _reconcile(self) -> None:
        """Cancel, without writing anything, work the state no longer wants (a stop ended it)."""
        state = self.log.state
        step = self._step
        if step is not None:
            current = state.active.step if state.active is not None else None
            if current is None or current.id != step.step_id or current.status != "running":
                if not step.task.done() and step.task is not asyncio.current_task():
                    step.signal.cancel("stopped")
                    step.task.cancel()
                self._step = None
        for call_id, work in list(self._tools.items()):
            record = state.tools.get(call_id)
            if record is None or record.status not in ("running", "pending", "approved"):
                if not work.task.done() and work.task is not asyncio.current_task():
                    work.signal.cancel("stopped")
                    work.task.cancel()
                    if work.child is not None and self.children is not None and record is not None and record.final:
                        self._spawn(self.children.stop(work.child))
                del self._tools[call_id]

    async def _cancel_work(self, reason: str) -> None:
        """Stop the work in flight for a pause now (``paused``) or a retry (``superseded``)."""
        step, tools = self._step, list(self._tools.values())
        for work in [step, *tools]:
            if work is not None and not work.task.done():
                work.signal.cancel(reason)
                work.task.cancel()
        for work in [step, *tools]:
            if work is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await work.task
        events: list[Event] = []
        state = self.log.state
        if step is not None and state.active is not None and state.active.step is not None:
            if state.active.step.id == step.step_id and state.active.step.status == "running":
                events.append(
                    Event(
                        "",
                        ai.STEP_SUPERSEDED,
                        {"stepId": step.step_id, "reason": reason, "restart": reason == "paused"},
                    )
                )
        for work in tools:
            record = state.tools.get(work.call_id)
            if record is None or record.status != "running":
                continue
            if work.child is not None and self.children is not None:
                if reason == "paused":
                    await self.children.pause(work.child, "now")
                else:
                    await self.children.stop(work.child)
            if reason == "paused" and (work.child is not None or self._policy(work.name) == "rerun"):
                events.append(Event("", ai.TOOL_RESET, {"callId": work.call_id, "reason": reason}))
            elif self._policy(work.name) == "report":
                events.append(
                    Event("", ai.TOOL_FAILED, {"callId": work.call_id, "error": _interrupted(), "code": "interrupted"})
                )
            else:
                events.append(
                    Event("", ai.TOOL_FAILED, {"callId": work.call_id, "error": "Cancelled.", "code": "cancelled"})
                )
        self._step = None
        self._tools.clear()
        self._cancelling = False
        if events:
            await self._append(events)
        else:
            self._kick()

    # -- commands --------------------------------------------------------------------------------

    async def submit(self, command: Command) -> Decision:
        """Persist ``command`` and its decision; the session acts on it at once.

        Ordering: commands are applied in the order this method is called. An identical
        resubmission (same id and content) replays: nothing new is written. An answer to a
        sub-agent's approval (a qualified interaction id) is decided by the sub-agent's session.
        """
        if isinstance(command, Respond) and split_nested(command.interaction_id) is not None:
            return await self._respond_nested(command)
        async with self._lock:
            for attempt in range(2):
                decision = decide(self.log.state, command, self.clock())
                if not decision.events:
                    return decision
                try:
                    await self._commit_locked(decision.events)
                except ConcurrencyConflict:
                    if attempt:
                        raise
                    continue
                except PartialDuplicateBatch:
                    # The command may be a resubmission (its events are stored, the planned ones
                    # are not): append it alone to find out.
                    try:
                        result, _ = await self.log.append(decision.events, now=self.clock())
                    except PartialDuplicateBatch:
                        # The id was used with other content, another command or in another
                        # session: a normal rejection (nothing was written), not an error.
                        return Decision((), Receipt(command.id, "rejected", PartialDuplicateBatch.code))
                    if result.duplicate:  # a replay: answer with what was decided the first time
                        return await self._replayed(command.id, decision)
                    raise
                break
        return decision

    async def _respond_nested(self, command: Respond) -> Decision:
        split = split_nested(command.interaction_id)
        assert split is not None
        call_id, rest = split
        record = self.log.state.tools.get(call_id)
        sub = self.agent.sub_agent(record.name) if record is not None else None
        if self.children is None or record is None or sub is None or record.final:
            return Decision((), Receipt(command.id, "rejected", "not-pending"))
        child_id = child_session_id(self.session_id, call_id)
        receipt = await self.children.respond(child_id, sub, replace(command, interaction_id=rest))
        return Decision((), receipt)

    async def _replayed(self, command_id: str, fallback: Decision) -> Decision:
        events = await self.log.store.read(self.session_id)
        for event in events:
            if event.type == ai.DECIDED and event.payload.get("commandId") == command_id:
                reason = event.payload.get("reason")
                receipt = Receipt(
                    command_id,
                    "applied" if event.payload.get("outcome") == "applied" else "rejected",
                    None if reason is None else str(reason),
                )
                return Decision((), receipt)
        return fallback

    async def push(self, events: Sequence[Event], *, trusted: bool = True) -> list[Applied]:
        """Append app events (``trusted``: server code; otherwise checked as a client's)."""
        contract = self.agent.contract
        checked: list[Event] = []
        for event in events:
            if not trusted:
                check_caller_event(event)
            if event.type.startswith("ai."):
                raise UsageError(f"push() takes app events; {event.type!r} is a built-in event type")
            payload: JsonObject = (
                contract.validate(event.type, event.payload) if contract is not None else event.payload
            )
            checked.append(Event(event.id, event.type, payload, event.at))
        applied = await self._append(checked)
        self._kick()
        return applied

    # -- waiting ---------------------------------------------------------------------------------

    async def wait_for(self, predicate: Callable[[AIState], bool], timeout: float | None = None) -> AIState:
        """Return the state once ``predicate`` holds for it."""

        async def wait() -> AIState:
            self._waiters += 1
            try:
                async with self._changed:
                    while not predicate(self.log.state):
                        await self._changed.wait()
                    return self.log.state
            finally:
                self._waiters -= 1

        if predicate(self.log.state):
            return self.log.state
        return await asyncio.wait_for(wait(), timeout)

    async def wait_turn(self, turn_id: str, timeout: float | None = None) -> TurnOutcome:
        """Wait until the turn ``turn_id`` has ended, and say how."""
        await self.wait_for(lambda s: turn_id in self._ledger.outcomes, timeout)
        return self._ledger.outcomes[turn_id]

    async def wait_input(self, input_id: str, timeout: float | None = None) -> TurnOutcome:
        """Wait until the turn that admits input ``input_id`` has ended (``removed`` if never admitted).

        An input this process has not seen (it was handled before the session was activated
        here) is looked up in the log.
        """
        ledger = self._ledger
        state = self.log.state
        if (
            input_id not in ledger.turn_of
            and input_id not in ledger.submitted
            and state.inbox.get(input_id) is None
            and input_id not in state.pending
        ):
            await self._ledger_from_log()

        def done(state: AIState) -> bool:
            turn = ledger.turn_of.get(input_id)
            if turn is not None:
                return turn in ledger.outcomes
            return input_id in ledger.submitted and state.inbox.get(input_id) is None and input_id not in state.pending

        await self.wait_for(done, timeout)
        turn = ledger.turn_of.get(input_id)
        if turn is None:
            return TurnOutcome("", "removed", "", "The input was removed before it was admitted.")
        return ledger.outcomes[turn]

    async def _ledger_from_log(self) -> None:
        """Rebuild the turn ledger from the whole log (a rare, slow path)."""
        events = await self.log.store.read(self.session_id, limit=self.log.index)
        rebuilt = _TurnLedger(initial_state(self.agent.contract))
        state = rebuilt.start
        for event in events:
            applied = self.log.fold([event], state)
            state = applied[-1].state
            await rebuilt.listen(applied, state, event.index)
        self._ledger.merge(rebuilt)

    def idle_now(self) -> bool:
        """Whether nothing runs and the planner has nothing to start."""
        return self._step is None and not self._tools and next_effect(self.log.state, self.limits) is None

    async def idle(self, timeout: float | None = None) -> AIState:
        """Wait until nothing is active or queued (or the session waits on approval / pause)."""
        return await self.wait_for(
            lambda s: next_effect(s, self.limits) is None and self._step is None and not self._tools, timeout
        )

    async def close(self) -> None:
        """Stop this process's work (the log keeps everything; ``open`` recovers it)."""
        self._closed = True
        for work in [self._step, *self._tools.values()]:
            if work is not None:
                work.signal.cancel("closed")
                work.task.cancel()
        for task in list(self._background):
            task.cancel()
        for task in list(self._background):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # -- model steps -----------------------------------------------------------------------------

    def _start_after_write(self, step: Callable[[AIState], _StepWork]) -> None:
        step(self.log.state)

    def _abandon(self, steps: Sequence[_StepWork]) -> None:
        """Cancel steps started with a write that failed (their start never became durable)."""
        for work in steps:
            if self._step is work:
                self._step = None
            work.signal.cancel("abandoned")
            work.task.cancel()

    def _prepare_step(
        self, effect: RunStep, state: AIState
    ) -> tuple[list[Event], Callable[[AIState], _StepWork] | None]:
        """The events that start a model step, and how to start its task (from the state they make)."""
        started: JsonObject = {
            "turnId": effect.turn_id,
            "stepId": effect.step_id,
            "turnStep": effect.turn_step,
            "sessionStep": effect.session_step,
            "attempt": effect.attempt,
        }
        context = ResolverContext(state, self.session_id, effect.turn_id, effect.turn_step)
        try:
            model = self.agent.resolve_model(context)
            instructions = self.agent.resolve_instructions(context)
        except Exception as error:  # a resolver that raises fails the turn with its message
            message = str(error) or type(error).__name__
            return [
                Event("", ai.STEP_STARTED, {**started, "model": ""}),
                Event("", ai.STEP_FAILED, {"stepId": effect.step_id, "error": message}),
                Event("", ai.TURN_FINISHED, {"turnId": effect.turn_id, "outcome": "failed", "error": message}),
            ], None

        def start(planned: AIState) -> _StepWork:
            signal = CancelSignal()
            task = asyncio.ensure_future(self._guarded_step(effect, model, instructions, signal, planned))
            self._step = work = _StepWork(effect.step_id, task, signal)
            task.add_done_callback(lambda _: self._kick())
            return work

        return [Event("", ai.STEP_STARTED, {**started, "model": model.name})], start

    async def _guarded_step(
        self, effect: RunStep, model: ModelAdapter, instructions: str | None, signal: CancelSignal, planned: AIState
    ) -> None:
        try:
            await self._run_step(effect, model, instructions, signal, planned)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a bug outside the model's stream must not leave the turn running forever
            _log.exception("step_crashed", session_id=self.session_id, step_id=effect.step_id)
            message = f"the model step could not run: {type(error).__name__}: {error}"
            state = self.log.state
            if state.active is None or state.active.id != effect.turn_id:
                return
            await self._append(
                [
                    Event("", ai.STEP_FAILED, {"stepId": effect.step_id, "error": message}),
                    Event("", ai.TURN_FINISHED, {"turnId": effect.turn_id, "outcome": "failed", "error": message}),
                ]
            )

    async def _run_step(
        self, effect: RunStep, model: ModelAdapter, instructions: str | None, signal: CancelSignal, planned: AIState
    ) -> None:
        """Stream one model step over ``planned`` (the state its start makes; it may not be written yet)."""
        state = planned
        active = state.active
        if active is None:
            return
        try:
            tools = await self.agent.list_tools(state.app)
        except Exception as error:
            message = f"listing tools failed: {error}"
            await self._append(
                [
                    Event("", ai.STEP_FAILED, {"stepId": effect.step_id, "error": message}),
                    Event("", ai.TURN_FINISHED, {"turnId": effect.turn_id, "outcome": "failed", "error": message}),
                ]
            )
            return
        specs = [t.spec for t in tools] + self.agent.delegate_specs()
        if self.agent.compaction is not None:
            await self._maybe_compact(model, instructions, specs, signal)
            state = self.log.state
        messages = prompt_messages(state)
        # The estimate calibrates compaction; without compaction it is not worth serializing the prompt.
        estimate = estimate_tokens(messages, instructions, specs) if self.agent.compaction is not None else 0
        request = ModelRequest(
            messages=messages,
            tools=specs,
            instructions=instructions,
            settings=dict(self.agent.settings),
            session_id=self.session_id,
            turn_index=active.index,
            step_index=effect.turn_step,
            session_step_index=effect.session_step,
        )
        stream = _StepStream(self, effect.step_id)
        if self.agent.message_metadata is not None:
            meta = self.agent.message_metadata(MetadataContext("start", state))
            if meta:
                stream.add(MessageMetadata(dict(meta)))
        calls: list[JsonValue] = []
        usage: JsonObject | None = None
        reason = "stop"
        try:
            async for part in model.stream(request, signal):
                if type(part) is StepFinish:
                    usage = dict(part.usage) if part.usage else None
                    reason = part.finish_reason or reason
                    continue
                if type(part) is ToolCall:
                    calls.append({"id": part.id, "name": part.name})
                await stream.put(part)
            if signal.cancelled:
                stream.cancel()
                return
            if self.agent.message_metadata is not None:
                meta = self.agent.message_metadata(MetadataContext("finish", self.log.state, usage, reason))
                if meta:
                    stream.add(MessageMetadata(dict(meta)))
            finished: JsonObject = {"stepId": effect.step_id, "finishReason": reason, "toolCalls": calls}
            if estimate:
                finished["estimate"] = estimate
            if usage is not None:
                finished["usage"] = usage
            await stream.close([Event("", ai.STEP_FINISHED, finished)])
        except asyncio.CancelledError:
            stream.cancel()
            raise
        except Exception as error:  # an adapter that throws becomes an error part with its message
            code = error.code if isinstance(error, ModelError) else None
            message = error.message if isinstance(error, ModelError) else (str(error) or type(error).__name__)
            failed: JsonObject = {"stepId": effect.step_id, "error": message}
            ended: JsonObject = {"turnId": effect.turn_id, "outcome": "failed", "error": message}
            if code is not None:
                failed["code"] = ended["code"] = code
            await stream.close([Event("", ai.STEP_FAILED, failed), Event("", ai.TURN_FINISHED, ended)])
        finally:
            stream.leave()  # however the step ended, it no longer streams

    async def _maybe_compact(
        self, model: ModelAdapter, instructions: str | None, specs: list[ToolSpec], signal: CancelSignal
    ) -> None:
        config = self.agent.compaction
        assert config is not None
        state = self.log.state
        messages = prompt_messages(state)
        estimate = calibrate(estimate_tokens(messages, instructions, specs), state, model.name)
        cut = compaction_cut(state)
        covered = (
            state.compaction.through if state.compaction is not None and state.compaction.status == "completed" else 0
        )
        if estimate <= config.threshold_tokens or cut <= covered:
            return
        compaction_id = f"{state.active.id if state.active else 'c'}.compaction.{state.session_steps}"
        base: JsonObject = {"id": compaction_id, "inputTokens": estimate, "thresholdTokens": config.threshold_tokens}
        await self._append([Event("", ai.COMPACTION, {**base, "status": "running"})])
        summary_instructions = SUMMARY_INSTRUCTIONS + (f"\n{config.instructions}" if config.instructions else "")
        previous = prompt_messages(state)
        to_cover = previous[: len(previous) - (len(state.messages) - cut)]
        request = ModelRequest(
            to_cover, specs, summary_instructions, dict(self.agent.settings), self.session_id, purpose="compact"
        )
        text: list[str] = []
        usage: JsonValue = None
        try:
            async for part in model.stream(request, signal):
                if type(part) is TextDelta:
                    text.append(part.delta)
                elif type(part) is StepFinish:
                    usage = dict(part.usage) if part.usage else None
                elif type(part) is ToolCall:
                    raise ModelError("the summary request answered with a tool call instead of a summary")
            summary = "".join(text).strip()
            if not summary:
                raise ModelError("the summary request returned an empty summary")
        except asyncio.CancelledError:
            raise
        except Exception as error:
            # A failed summary leaves the context as it was.
            await self._append([Event("", ai.COMPACTION, {**base, "status": "failed", "error": str(error)})])
            return
        done: JsonObject = {**base, "status": "completed", "summary": summary, "through": cut}
        if usage is not None:
            done["usage"] = usage
        await self._append([Event("", ai.COMPACTION, done)])

    # -- tools -------------------------------------------------------------------------------------

    def _prepare_tool(self, record: ToolRecord, state: AIState) -> tuple[list[Event], Callable[[], None] | None]:
        """The events that start (or settle) a tool call, and how to start its task.

        Checks happen here, before anything runs: an unknown tool or invalid arguments end the
        call with a ``tool-error`` the model sees (the function is never called); a call that
        needs approval asks for it. Tools from dynamic sources are checked in their task.
        """
        arguments = _arguments(state, record.id)
        sub = self.agent.sub_agent(record.name)
        started = Event("", ai.TOOL_STARTED, {"callId": record.id, "name": record.name, "attempt": record.attempts + 1})
        if sub is not None:
            task = arguments.get("task") if isinstance(arguments, dict) else None
            if self.children is None:
                return [_failed(record.id, f"{record.name} cannot run: this session has no sub-agent runtime")], None
            if not isinstance(task, str) or not task.strip():
                message = f"Invalid arguments for {record.name}: 'task' must be a non-empty string."
                return [_failed(record.id, message)], None
            child_id = child_session_id(self.session_id, record.id)
            events = [started]
            if record.child is None:
                child: JsonObject = {"callId": record.id, "sessionId": child_id, "agent": sub.name}
                events.append(Event("", ai.CHILD_STARTED, child))
            return events, lambda: self._launch(record, lambda _: self._run_delegate(record, sub, task), child_id)
        tools = self.agent.static_tools()
        if tools is None:  # a dynamic source: list it in the task
            return [], lambda: self._launch(record, lambda signal: self._run_tool(record, signal))
        tool = next((t for t in tools if t.name == record.name), None)
        if tool is None:
            return [_failed(record.id, self._unknown(record.name, tools))], None
        try:
            tool.validate(arguments)
        except ToolError as error:  # invalid arguments never reach the function
            return [_failed(record.id, error.message)], None
        if record.status == "pending":
            prompt = tool.approval_prompt(arguments)
            if prompt is not None:
                ask: JsonObject = {"interactionId": approval_id(record.id), "callId": record.id, "prompt": prompt}
                return [Event("", ai.INTERACTION_REQUESTED, ask)], None
        attempt = record.attempts + 1
        run = lambda signal: self._invoke(record, tool, arguments, attempt, signal)  # noqa: E731
        return [started], lambda: self._launch(record, run)

    def _unknown(self, name: str, tools: Sequence[ToolLike]) -> str:
        names = ", ".join(sorted([t.name for t in tools] + [s.name for s in self.agent.delegate_specs()])) or "none"
        return f"Unknown tool {name!r}. Available tools: {names}."

    def _launch(
        self, record: ToolRecord, make: Callable[[CancelSignal], Awaitable[None]], child: str | None = None
    ) -> None:
        signal = CancelSignal()
        task = asyncio.ensure_future(self._guarded(record, make(signal)))
        self._tools[record.id] = _ToolWork(record.id, record.name, task, signal, child)
        task.add_done_callback(lambda _: self._kick())

    async def _guarded(self, record: ToolRecord, work: Awaitable[None]) -> None:
        try:
            await work
        except ToolError as error:
            code = "timeout" if "timed out" in error.message else None
            await self._fail_tool(record.id, error.message, code)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a bug in the runtime must not leave the call pending forever
            await self._fail_tool(record.id, f"{record.name} could not run: {error}")

    async def _invoke(
        self, record: ToolRecord, tool: ToolLike, arguments: JsonValue, attempt: int, signal: CancelSignal
    ) -> None:
        state = self.log.state
        output = await tool.invoke(
            arguments,
            session_id=self.session_id,
            call_id=record.id,
            turn_id=record.turn_id,
            attempt=attempt,
            signal=signal,
            app=state.app,
            emit=lambda value: self._emit(record.id, value),
        )
        await self._append([Event("", ai.TOOL_FINISHED, {"callId": record.id, "output": output})])

    async def _run_tool(self, record: ToolRecord, signal: CancelSignal) -> None:
        """A call to a tool from a dynamic source: list, check, maybe ask approval, then run."""
        try:
            tools = await self.agent.list_tools(self.log.state.app)
            tool = next((t for t in tools if t.name == record.name), None)
            arguments = _arguments(self.log.state, record.id)
            if tool is None:
                await self._fail_tool(record.id, self._unknown(record.name, tools))
                return
            try:
                tool.validate(arguments)
            except ToolError as error:
                await self._fail_tool(record.id, error.message)
                return
            if record.status == "pending":
                prompt = tool.approval_prompt(arguments)
                if prompt is not None:
                    payload: JsonObject = {
                        "interactionId": approval_id(record.id),
                        "callId": record.id,
                        "prompt": prompt,
                    }
                    await self._append([Event("", ai.INTERACTION_REQUESTED, payload)])
                    return
            attempt = record.attempts + 1
            await self._append(
                [Event("", ai.TOOL_STARTED, {"callId": record.id, "name": record.name, "attempt": attempt})]
            )
            await self._invoke(record, tool, arguments, attempt, signal)
        finally:
            # The tool list is read again after every call: the call may have changed it.
            with contextlib.suppress(Exception):
                await self.agent.list_tools(self.log.state.app)

    async def _fail_tool(self, call_id: str, message: str, code: str | None = None) -> None:
        payload: JsonObject = {"callId": call_id, "error": message}
        if code is not None:
            payload["code"] = code
        await self._append([Event("", ai.TOOL_FAILED, payload)])

    async def _emit(self, call_id: str, output: JsonValue) -> None:
        part = part_to_wire(ToolResult(call_id, output, preliminary=True))
        await self._append([Event("", ai.STREAM, {"callId": call_id, "parts": [part]})])

    async def _run_delegate(self, record: ToolRecord, sub: Agent, task: str) -> None:
        assert self.children is not None
        child_id = child_session_id(self.session_id, record.id)
        result = await self.children.run(ChildRequest(self.session_id, record.id, child_id, sub, task), self.deliver)
        if result.final is not None:
            # The child's run as it ended, so the nested copy is complete when the call is done
            # (its last live batch may travel on another channel and arrive later).
            await self.deliver(result.final)
        if result.error is None:
            await self._append([Event("", ai.TOOL_FINISHED, {"callId": record.id, "output": result.text})])
        else:
            await self._fail_tool(record.id, result.error, result.code)

    async def deliver(self, batch: ChildBatch) -> None:
        """Take a sub-agent's batch; it is applied under its call, in order, once, in the next write.

        Duplicates (a ``seq`` already applied) are dropped; a batch whose ``prev`` has not been
        applied yet is held until the gap fills (async Ray calls may arrive out of order). It
        returns at once: the sub-agent never waits for its parent's store.
        """
        held = self._held.setdefault(batch.call_id, {})
        snapshot = held.get(-1)
        if snapshot is not None and batch.seq <= snapshot.seq:
            return  # older than a snapshot already waiting (a late first snapshot, say): covered
        if batch.prev is None:  # a snapshot supersedes whatever it covers, nothing after it
            for key in [k for k, b in held.items() if b.seq <= batch.seq]:
                del held[key]
        held[batch.prev if batch.prev is not None else -1] = batch
        # Nested batches are not on any latency path: wait a moment so several go out in one
        # write (a write that happens meanwhile takes them along anyway).
        if self._nested_timer is None and not self._draining:
            self._nested_timer = asyncio.get_running_loop().call_later(self.nested_delay, self._nested_due)

    def _nested_due(self) -> None:
        self._nested_timer = None
        self._request_drain()

    def _nested_ready(self) -> bool:
        tools = self.log.state.tools
        for call_id, held in self._held.items():
            record = tools.get(call_id)
            applied = record.child_seq if record is not None else 0
            if -1 in held or applied in held:
                return True
        return False

    def _take_nested(self) -> list[Event]:
        """NESTED events for every held batch that is next in its call's sequence."""
        events: list[Event] = []
        tools = self.log.state.tools
        for call_id, held in list(self._held.items()):
            record = tools.get(call_id)
            applied = record.child_seq if record is not None else 0
            while True:
                ready = held.pop(-1, None) or held.pop(applied, None)
                if ready is None:
                    break
                if ready.seq > applied:
                    payload: JsonObject = {"callId": ready.call_id, "seq": ready.seq, "actions": list(ready.actions)}
                    events.append(Event("", ai.NESTED, payload))
                    applied = ready.seq
            for key in [k for k in held if k != -1 and held[k].seq <= applied]:
                del held[key]
            if not held:
                del self._held[call_id]
        return events


def _arguments(state: AIState, call_id: str) -> JsonValue:
    """A call's input, from the newest message that holds it."""
    for message in reversed(state.messages):
        for part in message.parts:
            if type(part) is ToolPart and part.id == call_id:
                return part.input
    return None


def _stale(state: AIState, event: Event) -> bool:
    """A stream flush or step end whose step is no longer the running one."""
    kind = event.type
    if kind not in (ai.STREAM, ai.STEP_FINISHED, ai.STEP_FAILED) or "callId" in event.payload:
        return False
    active = state.active
    step = active.step if active is not None else None
    return step is None or step.id != event.payload.get("stepId") or step.status != "running"


def _failed(call_id: str, message: str) -> Event:
    return Event("", ai.TOOL_FAILED, {"callId": call_id, "error": message})


class _TurnLedger:
    """Which turn admitted each input, and how each turn ended (what ``Turn.finished`` reads)."""

    def __init__(self, state: AIState) -> None:
        self.start = state
        self.turn_of: dict[str, str] = {}
        self.outcomes: dict[str, TurnOutcome] = {}
        self.submitted: set[str] = set()
        self.reply_of: dict[str, str] = {}
        self.last_turn = state.last_turn
        if state.active is not None:
            self.reply_of[state.active.id] = state.active.message_id
            for input_id in state.active.input:
                self.turn_of[input_id] = state.active.id

    def merge(self, older: _TurnLedger) -> None:
        """Take what ``older`` (rebuilt from the log) knows and this ledger does not."""
        self.turn_of = {**older.turn_of, **self.turn_of}
        self.outcomes = {**older.outcomes, **self.outcomes}
        self.reply_of = {**older.reply_of, **self.reply_of}
        self.submitted |= older.submitted

    async def listen(self, applied: Sequence[Applied], state: AIState, index: int) -> None:
        for item in applied:
            event = item.event
            if event.type == ai.TURN_STARTED:
                turn_id = str(event.payload["turnId"])
                self.reply_of[turn_id] = str(event.payload.get("messageId"))
                for input_id in event.payload.get("inputIds", ()):  # type: ignore[union-attr]
                    self.turn_of[str(input_id)] = turn_id
            elif event.type == ai.INPUT:
                self.submitted.add(event.id)
        if state.last_turn is not None and state.last_turn != self.last_turn:
            turn_id, outcome = state.last_turn
            reply_id = self.reply_of.get(turn_id)
            reply = next((m for m in reversed(state.messages) if m.id == reply_id), None)
            error = state.error.message if outcome == "failed" and state.error is not None else None
            text = reply.final_text if reply is not None else ""
            self.outcomes[turn_id] = TurnOutcome(turn_id, outcome, text, error, index)
        self.last_turn = state.last_turn


class _StepStream:
    """The running step's buffer: flushed on size, on a timer, and at the end of the step."""

    def __init__(self, runner: SessionRunner, step_id: str) -> None:
        self.runner = runner
        self.step_id = step_id
        self.parts: list[AgentStreamPart] = []
        self.timer: asyncio.TimerHandle | None = None
        self.flushing: asyncio.Task[None] | None = None
        self.interval = runner.flush_interval  # the first text goes out fast; later batches grow
        self.pacer: StreamPacer | None = runner.pacer
        self.pacer.enter()

    def add(self, part: AgentStreamPart) -> None:
        self.parts.append(part)

    async def put(self, part: AgentStreamPart) -> None:
        parts = self.parts
        parts.append(part)
        if len(parts) >= self.runner.flush_parts:
            await self._flush()
        elif self.timer is None:
            self.timer = asyncio.get_running_loop().call_later(self.interval, self._on_timer)
            if self.pacer is not None:
                self.interval = self.pacer.interval(self.runner.flush_every)

    def _on_timer(self) -> None:
        self.timer = None
        if self.parts and (self.flushing is None or self.flushing.done()):
            self.flushing = asyncio.ensure_future(self._flush())

    def _take(self) -> tuple[AgentStreamPart, ...]:
        parts, self.parts = self.parts, []
        return tuple(coalesce(parts))  # typed: the fold applies them as they are; the store encodes once

    async def _flush(self, extra: Sequence[Event] = ()) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        parts = self._take()
        events = [Event("", ai.STREAM, data=Stream(self.step_id, parts=parts))] if parts else []
        if events or extra:
            # Queued with whatever else the session writes next; if the step was stopped or
            # superseded meanwhile, these are dropped when the write is assembled.
            await self.runner._append([*events, *extra])

    async def close(self, final: Sequence[Event]) -> None:
        """Flush what is left together with the step's final events, in one batch."""
        self.leave()
        if self.flushing is not None and not self.flushing.done():
            await self.flushing
        await self._flush(final)

    def cancel(self) -> None:
        self.leave()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def leave(self) -> None:
        """The step no longer streams: its share of the write budget goes back (once)."""
        if self.pacer is not None:
            self.pacer.leave()
            self.pacer = None


def _interrupted() -> str:
    from orchestrator.core.fold import INTERRUPTED

    return INTERRUPTED
