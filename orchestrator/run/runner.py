"""``SessionRunner``: executes one session's effects, in process. The Ray shell drives this too.

Everything that changes the session goes through one lock and the log: commands (decided, then
appended), the model's stream parts (buffered and flushed every few milliseconds or few hundred
parts as one ``ai.stream`` event), tool runs, sub-agent batches and lifecycle events from the
planner. After every append the runner asks the planner what to do next, cancels work the state
no longer wants (a stop, a pause now, a superseded turn), and tells its listeners (subscribers,
a parent session) what was applied.

On open it re-folds the log and applies ``recover``: a crash costs at most the work in flight.

The work itself lives with collaborators that reach the session only through ``_append`` and
``_kick`` (and what their host Protocol names): ``steps.Steps`` (model steps and their stream
buffers), ``tool_calls.ToolCalls`` (tool and delegate calls), ``nested.NestedInbox`` (sub-agent
batches, reordered) and ``ledger.TurnLedger`` (how turns ended, for ``wait_turn``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

from orchestrator.core import event_types as ai
from orchestrator.core._json import JsonObject
from orchestrator.core.aistate import AIState, Receipt
from orchestrator.core.approvals import split_nested
from orchestrator.core.commands import Command, Decision, Respond, decide
from orchestrator.core.errors import ConcurrencyConflict, PartialDuplicateBatch, UsageError
from orchestrator.core.events import Event, check_caller_event, check_payload
from orchestrator.core.payloads import CommandPayload, Decided
from orchestrator.core.plan import Append, Cancel, Limits, RunStep, RunTool, next_effect
from orchestrator.core.recovery import recover
from orchestrator.core.turn import TurnOutcome
from orchestrator.run.agent import Agent
from orchestrator.run.background import run_kept
from orchestrator.run.children import ChildBatch, Children
from orchestrator.run.handlers import Handlers
from orchestrator.run.ledger import TurnLedger, Watcher
from orchestrator.run.log import Applied, SessionLog
from orchestrator.run.nested import NestedInbox, respond_nested
from orchestrator.run.pacing import FIRST_FLUSH, NESTED_DELAY, StreamPacer
from orchestrator.run.steps import Steps, StepWork, stale
from orchestrator.run.tool_calls import ToolCalls, recovery_policy
from orchestrator.run.waiting import Flag, Mutex
from orchestrator.store.base import EventStore

__all__ = ["Listener", "Recorded", "SessionRunner"]

Listener = Callable[[Sequence[Applied], AIState, int], Awaitable[None]]
"""Told after every append: what was applied, the state after it, and its log index."""


@dataclass(frozen=True, slots=True)
class Recorded:
    """A command as the log holds it (``SessionRunner.recorded``)."""

    payload: CommandPayload
    """What was stored."""
    receipt: Receipt
    """How it was decided."""
    index: int
    """The log index of the command event."""


class _Staging:
    """The batch ``_commit_locked`` assembles: events stamped and folded one by one, in order.

    A small object rather than a closure that calls itself: a recursive closure is a reference
    cycle (the function, its cell), so every write's states and events would wait for the cyclic
    garbage collector instead of being freed at once.
    """

    __slots__ = ("batch", "now", "runner", "staged", "starts", "state")

    def __init__(self, runner: SessionRunner, state: AIState, now: float) -> None:
        self.runner = runner
        self.state = state
        self.now = now
        self.batch: list[Event] = []
        self.staged: list[Applied] = []
        self.starts: list[Callable[[], None]] = []
        """What runs once the batch is durable (handlers, steps that wait for the write, tools)."""

    def add(self, new: Sequence[Event]) -> None:
        runner = self.runner
        log = runner.log
        for event in new:
            state = self.state
            if stale(state, event):
                continue  # a late part or end of a step that was stopped or superseded: dropped
            if event.type == ai.DECIDED:  # a stop ends its running report calls as interrupted first
                self.add(runner._calls.cut_by_stop(event, state))
                state = self.state
            stamped = log.stamp(event, len(self.batch), self.now)
            folded = log.fold([stamped], state)[0]
            self.batch.append(stamped)
            self.staged.append(folded)
            self.state = state = folded.state
            scheduled = runner._handlers.schedule(stamped)
            if scheduled is not None:  # its handler runs once this batch is durable
                self.add([scheduled])
                self.starts.append(partial(runner._handlers.start, self.state.due_handlers[stamped.id], stamped))


class SessionRunner:
    """Runs a session's turns (see the module docstring). Create with ``open``."""

    def __init__(
        self,
        log: SessionLog,
        agent: Agent,
        *,
        children: Children | None = None,
        clock: Callable[[], float] = time.time,
        flush_interval: float = FIRST_FLUSH,
        flush_every: float = 0.02,
        flush_parts: int = 256,
        nested_delay: float = NESTED_DELAY,
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
        self.limits = Limits(agent.max_steps)
        self.listeners: list[Listener] = []
        self._lock = Mutex()
        self._changed = Flag()  # pulsed after every write that someone waits on (wait_for)
        # The parts of the run loop reach the runner through a weak proxy, and the runner drops its
        # listeners when it closes: a closed session is then no reference cycle, so reference
        # counting frees it at once. Hosts collect cycles rarely (run/gc_tuning.py), and a cycle
        # kept every deactivated session's state in memory until the next full collection.
        me = cast("SessionRunner", weakref.proxy(self))
        self._steps = Steps(me)
        self._calls = ToolCalls(me)
        self._handlers = Handlers(me, agent.handlers)
        self._plan = False
        """Whether the pump (``_drain``) must plan again even with nothing queued."""
        self._closed = False
        self._cancelling = False
        self._waiters = 0
        self._queue: list[tuple[Sequence[Event], asyncio.Future[list[Applied]]]] = []
        self._draining = False
        self._drainer: asyncio.Task[None] | None = None
        """The pump's task while it runs (one at a time)."""
        self._background: set[asyncio.Future[Any]] | None = None
        """Other work in the background, made at its first (most sessions never have any: an
        empty set is 216 bytes, and a host holds thousands of sessions)."""
        self._nested: NestedInbox | None = None
        """Sub-agents' batches held for the next write: made at the first (a sub-agent never has one)."""
        self._ledger = TurnLedger(log.state)
        self.listeners.append(self._ledger.listen)

    @classmethod
    async def open(
        cls,
        store: EventStore,
        session_id: str,
        agent: Agent,
        *,
        start: bool = True,
        fresh: bool = False,
        **options: Any,
    ) -> SessionRunner:
        """Load the session from the store, recover unfinished work, and start driving it.

        ``fresh``: its log is known to be empty (``SessionLog.open``); nothing is read.
        """
        log = await SessionLog.open(store, session_id, agent.contract, fresh=fresh)
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
        events = recover(self.log.state, partial(recovery_policy, self.agent))
        if events:
            await self._append(events)
        self._handlers.start_due(self.log.state)  # at least once: a crash left these unfinished
        self._kick()

    # -- the one way anything changes ----------------------------------------------------------

    async def _append(self, events: Sequence[Event]) -> list[Applied]:
        """Queue ``events`` for the session's next write and wait until it is durable.

        Everything queued while a write is in flight (stream flushes, sub-agent batches, tool
        results) goes out together in the next one: group commit at the session level, so the
        number of writes follows what the store can take rather than how many producers there are.
        """
        return await self._queue_write(events)

    def _queue_write(self, events: Sequence[Event]) -> asyncio.Future[list[Applied]]:
        """``_append`` without waiting: the future resolves once the write holding ``events`` is durable."""
        future: asyncio.Future[list[Applied]] = asyncio.get_running_loop().create_future()
        self._queue.append((events, future))
        self._request_drain()
        return future

    def _request_drain(self) -> None:
        if not self._draining and not self._closed:
            self._draining = True
            self._drainer = asyncio.create_task(self._drain())

    async def _drain(self) -> None:
        """The session's one pump: writes what is queued, and plans again when asked (``_kick``).

        A write plans too (``_commit_locked`` runs the planner over the state it makes), so a
        request to plan that arrives while events are queued costs no pass of its own.

        Sub-agents' held batches go along with queued events, or on their own once due (a call's
        first visible part, or the nested delay over); a planning pass alone leaves them held.
        (One that took them wrote a child's first snapshot on its own as the parent's step ended
        beside its delegate call's start, a write ahead of the child's first text: one parent
        write in nine of a ``bench shop`` turn.)
        """
        try:
            while self._queue or self._plan or (self._nested is not None and self._nested.due()):
                async with self._lock:
                    plan, self._plan = self._plan, False
                    items, self._queue = self._queue, []
                    events = [e for batch, _ in items for e in batch]
                    nested = self._nested  # made at the first batch, perhaps during this drain
                    if nested is not None and (events or nested.due()):
                        nested.cancel_timer()  # this write takes them along
                        events[:0] = nested.take()
                    try:
                        applied = await self._commit_locked(events) if events or plan else []
                    except BaseException as error:
                        for _, future in items:
                            if not future.done():
                                future.set_exception(error)
                        if not isinstance(error, Exception) or not items:
                            raise  # a planning pass alone fails its own task
                        self._plan = self._plan or plan  # the failed write's events are not the plan's fault
                        continue
                    for _, future in items:
                        if not future.done():
                            future.set_result(applied)
        finally:
            self._draining = False
            self._drainer = None  # it ends now: nothing awaits here any more
            if self._queue and not self._closed:
                self._request_drain()
            elif self._nested is not None and not self._closed and self._nested.ready():
                self._nested.wait()  # batches still held: after the nested delay (a timer armed already runs on)

    async def _commit_locked(self, events: Sequence[Event]) -> list[Applied]:
        """Append ``events`` and whatever the planner decides follows them, as one batch.

        The planner runs over the state the batch would produce (a pure fold; nothing is written
        yet), so a command, the turn it starts and that turn's first step are one write; so are a
        step's last parts, its finish and the next tool's start. Work (a model step, a tool run)
        starts only once the batch is durable. Call with the lock held.
        """
        log = self.log
        staging = _Staging(self, log.state, self.clock())
        add = staging.add
        starts = staging.starts
        add(events)
        early: list[Callable[[AIState], StepWork]] = []
        cancel: str | None = None
        claimed: set[str] = set()
        for _ in range(64):
            effect = next_effect(staging.state, self.limits)
            if isinstance(effect, Append):
                add(effect.events)
                continue
            if isinstance(effect, RunStep):
                current = self._steps.current
                if current is not None and current.step_id == effect.step_id:
                    break
                new, step, may_start_early = self._steps.prepare(effect, staging.state)
                add(new)
                if step is not None:
                    if may_start_early:
                        early.append(step)
                    else:  # compaction reads and appends to the log: start after the write
                        starts.append(partial(self._steps.start_after_write, step))
                continue
            if isinstance(effect, RunTool):
                call = effect.call
                if call.id in self._calls.running or call.id in claimed:
                    break
                claimed.add(call.id)
                new, start = self._calls.prepare(call, staging.state)
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
        speculative = [step(staging.state) for step in early]
        batch, staged = staging.batch, staging.staged
        if batch:
            try:
                result = await log.commit(batch, staged)
            except BaseException as error:
                self._steps.abandon(speculative)
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
                if self._ledger.watchers:
                    self._ledger.settle(state)
                if self._waiters:
                    self._changed.pulse()
        for start in starts:
            start()
        if cancel is not None and not self._cancelling:
            self._cancelling = True
            self._spawn(self._cancel_work(cancel))
        return applied

    def _kick(self) -> None:
        """Ask the session to plan again (a step or a tool ended, a command was decided)."""
        if self._closed:
            return
        self._plan = True
        self._request_drain()

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Future[Any]:
        if self._background is None:
            self._background = set()
        return run_kept(self._background, coro)

    def _reconcile(self) -> None:
        """Cancel, without writing anything, work the state no longer wants (a stop ended it)."""
        state = self.log.state
        self._steps.reconcile(state)
        for child in self._calls.reconcile(state):
            if self.children is not None:
                self._spawn(self.children.stop(child))

    async def _cancel_work(self, reason: str) -> None:
        """Stop the work in flight for a pause now (``paused``) or a retry (``superseded``)."""
        step, tools = self._steps.current, list(self._calls.running.values())
        # A call that has queued its outcome is left to write it (as ``ToolCalls.reconcile``
        # leaves it): it is awaited with the rest, and ``stopped`` then finds it ended.
        for work in [step, *(t for t in tools if not t.settling)]:
            if work is not None and not work.task.done():
                work.signal.cancel(reason)
                work.task.cancel()
        for work in [step, *tools]:
            if work is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await work.task
        state = self.log.state
        events = [
            *self._steps.superseded(step, reason, state),
            *await self._calls.stopped(tools, reason, state),
        ]
        self._steps.current = None
        self._calls.running.clear()
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
            return await respond_nested(self.log.state, self.session_id, self.agent, self.children, command)
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

    async def _replayed(self, command_id: str, fallback: Decision) -> Decision:
        found = await self.recorded(command_id)
        return fallback if found is None else Decision((), found.receipt)

    async def recorded(self, command_id: str) -> Recorded | None:
        """The command this session stored under ``command_id`` and how it was decided, or ``None``.

        Read from the log (a slow path, for resubmissions: a host that fills in part of a command,
        such as the active turn, asks here before it calls a differing repeat a reuse).
        """
        events = await self.log.store.read(self.session_id)
        found: tuple[CommandPayload, int] | None = None
        for event in events:
            data = event.data
            if event.id == command_id and isinstance(data, CommandPayload):
                found = (data, event.index)
            elif found is not None and isinstance(data, Decided) and data.command_id == command_id:
                return Recorded(found[0], Receipt(command_id, data.outcome, data.reason), found[1])
        return None

    async def turn_of(self, input_id: str) -> str | None:
        """The turn that admitted input ``input_id``; ``None`` while it waits (or was never admitted)."""
        ledger = self._ledger
        if not ledger.knows(input_id, self.log.state):
            ledger.merge(await TurnLedger.from_log(self.log, self.agent.contract))
        return ledger.turn_of.get(input_id)

    async def push(self, events: Sequence[Event], *, trusted: bool = True) -> list[Applied]:
        """Append app events (``trusted``: server code; otherwise checked as a client's)."""
        contract = self.agent.contract
        checked: list[Event] = []
        for event in events:
            if not trusted:
                check_caller_event(event)
            if event.type.startswith("ai."):
                raise UsageError(f"push() takes app events; {event.type!r} is a built-in event type")
            check_payload(event.id, event.payload)  # as given: a clear word before the model's own
            payload: JsonObject = (
                contract.validate(event.type, event.payload) if contract is not None else event.payload
            )
            check_payload(event.id, payload)  # as the contract made it: before anything is written
            checked.append(Event(event.id, event.type, payload, event.at))
        applied = await self._append(checked)
        self._kick()
        return applied

    # -- waiting ---------------------------------------------------------------------------------

    async def wait_for(self, predicate: Callable[[AIState], bool], timeout: float | None = None) -> AIState:
        """Return the state once ``predicate`` holds for it; ``TimeoutError`` after ``timeout`` seconds."""
        if predicate(self.log.state):
            return self.log.state
        self._waiters += 1
        try:
            # ``asyncio.timeout`` times the waiting task itself. ``asyncio.wait_for`` would run the
            # wait as a task of its own: a task and a coroutine more per waited turn, on every host.
            async with asyncio.timeout(timeout):
                while not predicate(self.log.state):
                    await self._changed.wait()
        finally:
            self._waiters -= 1
        return self.log.state

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
        if not ledger.knows(input_id, self.log.state):
            self._ledger.merge(await TurnLedger.from_log(self.log, self.agent.contract))
        await self.wait_for(lambda state: ledger.input_done(input_id, state), timeout)
        return ledger.input_outcome(input_id)

    def knows_input(self, input_id: str) -> bool:
        """Whether this process has seen input ``input_id`` (``watch_input`` takes only those)."""
        return self._ledger.knows(input_id, self.log.state)

    def watch_input(self, input_id: str, done: Watcher) -> Callable[[], None]:
        """Call ``done`` once the turn that admits ``input_id`` has ended, with how (``wait_input``'s answer).

        The callback form of ``wait_input``, for a host that waits on many turns for its clients:
        no task, and nothing runs on the writes before the turn ends. ``done`` gets ``None`` when
        the runner closes first. Takes inputs that ``knows_input`` (``turn_of`` reads the log for
        another); one whose turn has ended already is answered at the loop's next turn. Returns a
        function that cancels the watch.
        """
        if not self.knows_input(input_id):
            raise UsageError(f"watch_input: input {input_id!r} is not known here; look it up with turn_of first")
        if self._closed:
            return asyncio.get_running_loop().call_soon(done, None).cancel
        ledger = self._ledger
        if ledger.input_done(input_id, self.log.state):
            return asyncio.get_running_loop().call_soon(done, ledger.input_outcome(input_id)).cancel
        return ledger.watch(input_id, done)

    def idle_now(self) -> bool:
        """Whether nothing runs and the planner has nothing to start."""
        return not self._busy_now() and next_effect(self.log.state, self.limits) is None

    async def idle(self, timeout: float | None = None) -> AIState:
        """Wait until nothing is active or queued (or the session waits on approval / pause)."""
        return await self.wait_for(lambda s: next_effect(s, self.limits) is None and not self._busy_now(), timeout)

    def _busy_now(self) -> bool:
        """Whether a model step, a tool call or an app-event handler runs in this process now.

        A running handler keeps the session active: deactivating it would cut the handler off.
        """
        return self._steps.current is not None or bool(self._calls.running) or bool(self._handlers.running)

    async def close(self) -> None:
        """Stop this process's work (the log keeps everything; ``open`` recovers it)."""
        self._closed = True
        for work in [self._steps.current, *self._calls.running.values()]:
            if work is not None:
                work.signal.cancel("closed")
                work.task.cancel()
        tasks = [*(self._background or ()), *([self._drainer] if self._drainer is not None else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._handlers.close()
        await self.log.settle()  # a snapshot on its way is let finish: the next open reads it
        self._ledger.fail()
        self.listeners.clear()  # a host's listener holds the session it serves: no cycle once closed

    # -- sub-agents --------------------------------------------------------------------------------

    async def deliver(self, batch: ChildBatch) -> None:
        """Take a sub-agent's batch; it is applied under its call, in order, once, in the next write.

        Duplicates (a ``seq`` already applied) are dropped; a batch whose ``prev`` has not been
        applied yet is held until the gap fills (async Ray calls may arrive out of order). It
        returns at once: the sub-agent never waits for its parent's store.
        """
        nested = self._nested
        if nested is None:
            nested = self._nested = NestedInbox(cast("SessionRunner", weakref.proxy(self)))
        nested.deliver(batch)
