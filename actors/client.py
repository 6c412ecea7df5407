"""The client: a ``Session`` handle that hides ``.remote()`` and ``ray.get`` behind async methods.

Every method is safe to retry: commands carry ids (a resubmission replays), so when a host dies
mid-call the client waits for it to restart and calls again. Subscriptions long-poll the host
(one poll per host for every session this process subscribes to, ``actors.poller``) and follow
restarts too. A ``Session`` needs only a ``SessionBackend`` of its runtime (``BaseRuntime`` is
one), so this module names neither Ray nor the runtimes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol, TypeVar

from actors.transport import Transport
from orchestrator.core.aistate import ActiveTurn, AIState, Inbox, InboxItem, Interaction, Receipt, StepState
from orchestrator.core.commands import (
    Command,
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
    check_command,
)
from orchestrator.core.contract import Reducer
from orchestrator.core.errors import UsageError
from orchestrator.core.events import Event
from orchestrator.core.ids import new_id
from orchestrator.core.mutations import ClientView, info_of
from orchestrator.core.optimistic import optimistic, settled
from orchestrator.core.parts import AgentMessage, Role
from orchestrator.core.turn import TurnOutcome
from orchestrator.run.log import Snapshot
from orchestrator.store.base import EventStore

__all__ = [
    "LiveQueue",
    "LiveView",
    "Mutation",
    "Queue",
    "Session",
    "SessionBackend",
    "StopResult",
    "Subscription",
    "Turn",
    "TurnOutcome",
    "TurnResult",
]

R = TypeVar("R")

TurnResult = TurnOutcome
"""How a prompt's turn ended (the name this module had for ``TurnOutcome``; kept for users)."""


class SessionBackend(Protocol):
    """What a ``Session`` needs of its runtime (``BaseRuntime`` provides it)."""

    @property
    def transport(self) -> Transport:
        """How calls reach the session's host."""
        ...

    @property
    def store(self) -> EventStore:
        """The event store (read directly for a replay under another reducer)."""
        ...

    async def ready_agent(self, key: str) -> None:
        """Make sure the hosts know the agent registered as ``key`` (idempotent)."""
        ...

    async def turn_outcome(self, session: Session, input_id: str) -> TurnOutcome:
        """How the turn that admits ``input_id`` ended (waits until it has)."""
        ...

    def subscribe(self, session: Session) -> Subscription:
        """A subscription to ``session``'s mutations from now on."""
        ...


class Mutation(dict[str, Any]):
    """One change to a session (a dict in the wire shape), with ``.type`` and ``.index``."""

    @property
    def type(self) -> str:
        """The kind of change (``reset`` means: re-read the snapshot).

        One of ``message``, ``part``, ``delta``, ``status``, ``truncate``, ``turn``,
        ``interaction``, ``info``, ``app`` or ``reset``.
        """
        return str(self.get("type"))

    @property
    def index(self) -> int:
        """The log index of the event that produced it."""
        return int(self.get("index", 0))


@dataclass(frozen=True, slots=True)
class StopResult:
    """What ``stop()`` did."""

    receipt: Receipt | None
    """The stop's receipt (``None`` when no turn was active)."""
    cancelled_queued_prompts: int
    """Queued inputs the stop cancelled (steering for the stopped turn, or all with ``cancel_queued``)."""


class Turn:
    """A prompt in flight: ``await turn.finished`` resolves when its turn ends.

    Its controls are bound to its own turn, the one that admitted the prompt: ``stop()`` and
    ``steer()`` never reach a turn that started after it, and ``stop()`` once that turn has
    ended is ``stale-turn``.
    """

    def __init__(self, session: Session, input_id: str, receipt: Receipt | None) -> None:
        self.session = session
        self.id = input_id
        self.receipt = receipt
        self._finished: asyncio.Task[TurnOutcome] | None = None
        self._turn_id: str | None = None

    async def turn_id(self) -> str | None:
        """The id of the turn that admitted this prompt; ``None`` while it waits in the inbox (or was removed)."""
        if self._turn_id is None:  # once admitted, it never changes
            self._turn_id = await self.session._call("turn_of", self.id)
        return self._turn_id

    async def stop(self, *, cancel_queued: bool = False, id: str | None = None) -> StopResult:
        """Stop this prompt's turn: ``stale-turn`` once it has ended.

        While the prompt still waits in the inbox there is no turn to stop: nothing is written
        (``receipt`` is ``None``; ``session.queue.remove`` takes it out of the queue).
        """
        turn_id = await self.turn_id()
        if turn_id is None:
            return StopResult(None, 0)
        return await self.session.stop(turn_id=turn_id, cancel_queued=cancel_queued, id=id)

    async def steer(self, text: str, *, id: str | None = None) -> Receipt:
        """Redirect this prompt's turn after its current response and tools.

        Once that turn has ended (or while the prompt still waits in the inbox), ``text`` is sent
        like ``session.send``: steering is never lost, and never reaches another turn.
        """
        turn_id = await self.turn_id()
        if turn_id is None:
            return await self.session.send(text, id=id)
        return await self.session.steer(text, id=id, turn_id=turn_id)

    @property
    def finished(self) -> asyncio.Task[TurnOutcome]:
        """Resolves to the ``TurnOutcome`` (success, outcome, text, error) once the turn has ended."""
        if self._finished is None:
            self._finished = asyncio.ensure_future(self.session.runtime.turn_outcome(self.session, self.id))
        return self._finished


class Queue:
    """Operations on a session's pending inputs (``session.queue``)."""

    def __init__(self, session: Session) -> None:
        self._session = session

    async def edit(self, input_id: str, text: str, *, role: Role = "user", id: str | None = None) -> Receipt:
        """Replace a pending input's content (``not-pending`` / ``role-mismatch`` otherwise)."""
        return await self._session._command(EditInput(id or new_id("edit"), input_id, text, role))

    async def move(self, input_id: str, before_id: str | None = None, *, id: str | None = None) -> Receipt:
        """Move a pending input before ``before_id`` (``None``: to the end).

        Moving an input before itself leaves the queue as it is and is ``applied`` (it already is
        there). ``not-pending`` when either input is not in the queue.
        """
        return await self._session._command(MoveInput(id or new_id("move"), input_id, before_id))

    async def remove(self, input_id: str, *, id: str | None = None) -> Receipt:
        """Remove a pending input."""
        return await self._session._command(RemoveInput(id or new_id("remove"), input_id))

    async def send_now(self, input_id: str, turn_id: str | None = None, *, id: str | None = None) -> Receipt:
        """Hand a queued input off to the observed turn ``turn_id`` (``None``: whatever is active).

        ``stale-turn`` (the queue unchanged) once ``turn_id`` has ended. While the session is
        paused the input waits first in the queue until ``resume``.
        """
        return await self._session._command(SendNow(id or new_id("sendnow"), input_id, turn_id))


class Session:
    """A handle on one session (cheap; create as many as you like)."""

    def __init__(self, runtime: SessionBackend, session_id: str, agent_key: str) -> None:
        if not session_id or "/" in session_id:
            raise UsageError(
                f"session id {session_id!r} is not valid: use a non-empty id without '/' ('/' joins sub-agent sessions)"
            )
        self.runtime = runtime
        self.id = session_id
        self.agent_key = agent_key
        self.queue = Queue(self)

    # -- calls -------------------------------------------------------------------------------------

    async def _call(self, method: str, *args: Any) -> Any:
        await self.runtime.ready_agent(self.agent_key)
        return await self.runtime.transport.call(self.id, method, self.agent_key, *args)

    async def _command(self, command: Any) -> Receipt:
        receipt: Receipt | None = await self._call("command", command)
        assert receipt is not None
        return receipt

    # -- inputs and controls -------------------------------------------------------------------------

    async def send(self, text: str, *, id: str | None = None, role: Role = "user", generate: bool = True) -> Receipt:
        """Put an input in the durable inbox (admitted one at a time; starts a turn when idle).

        ``id`` is the input's message id; an identical resubmission replays (see idempotent_id).
        """
        return await self._command(SendInput(id or new_id(), text, role, generate))

    async def prompt(self, text: str, *, id: str | None = None) -> Turn:
        """``send`` a user message and return its ``Turn`` (``await turn.finished``)."""
        input_id = id or new_id()
        receipt = await self._command(SendInput(input_id, text))
        # Waiting starts when ``finished`` is first awaited: the host keeps every outcome (in its
        # log), so a late waiter still learns how the turn ended.
        return Turn(self, input_id, receipt)

    async def steer(self, text: str, *, id: str | None = None, turn_id: str | None = None) -> Receipt:
        """Redirect the turn ``turn_id`` after its current response and tools.

        ``turn_id`` is the turn the caller saw (``Turn.steer`` passes its own); once it has
        ended, ``text`` is sent like ``send`` instead. Without it, the host steers whatever turn
        is active when the call arrives (and sends when none is). Idempotent by ``id``: a repeat
        returns the first receipt, even after the active turn changed.
        """
        receipt: Receipt = await self._call("steer", id or new_id("steer"), text, turn_id)
        return receipt

    async def stop(
        self, *, turn_id: str | None = None, cancel_queued: bool = False, id: str | None = None
    ) -> StopResult:
        """End the turn now; open calls are cancelled. Returns how many queued prompts it cancelled.

        ``turn_id`` is the turn the caller saw (``Turn.stop`` passes its own): once it has
        ended the stop is ``stale-turn`` and changes nothing, so a late click never stops the
        next turn. Without it, the stop ends whatever turn is active when the call arrives
        (``receipt`` is ``None`` when none is). Idempotent by ``id``: a repeat returns the first
        receipt and count, even after the active turn changed.
        """
        receipt, cancelled = await self._call("stop", id or new_id("stop"), cancel_queued, turn_id)
        return StopResult(receipt, cancelled)

    async def retry(self, *, turn_id: str | None = None, id: str | None = None) -> Receipt:
        """Resume from the last finished tool call (supersedes a running turn).

        ``turn_id`` is the turn the caller saw (the active one, or the last to end): once
        another turn has started since, the retry is ``stale-turn``. Without it, the latest
        turn is retried.
        """
        return await self._command(RetryTurn(id or new_id("retry"), turn_id))

    async def pause(
        self, when: Literal["after-turn", "now"] = "after-turn", *, tree: bool = True, id: str | None = None
    ) -> Receipt:
        """Pause this session (and, with ``tree``, its running sub-agents).

        ``after-turn`` closes admission and lets the active turn finish; ``now`` also cancels its
        current model and tool work. Either way steering and Send now wait, first in the queue,
        until ``resume``: a turn they target stops at the handoff point and goes ``paused``.
        """
        receipt = await self._command(PauseSession(id or new_id("pause"), when))
        if tree:
            await self.runtime.transport.control_tree(self.id, "pause", when)
        return receipt

    async def resume(self, *, tree: bool = True, id: str | None = None) -> Receipt:
        """Resume this session (and its paused sub-agents)."""
        if tree:
            await self.runtime.transport.control_tree(self.id, "resume", "now")
        return await self._command(ResumeSession(id or new_id("resume")))

    async def respond(
        self, interaction_id: str, approved: bool, *, reason: str | None = None, id: str | None = None
    ) -> Receipt:
        """Answer an approval."""
        return await self._command(Respond(id or new_id("respond"), interaction_id, approved, reason))

    async def push(self, *events: Event | tuple[str, dict[str, Any]]) -> int:
        """Append app events (trusted: this is server code). Returns the log index after them."""
        built = [e if isinstance(e, Event) else Event(new_id("evt"), e[0], e[1]) for e in events]
        index: int = await self._call("push", built, True)
        return index

    # -- reading -------------------------------------------------------------------------------------

    async def state(self, reducer: Reducer[Any] | None = None, *, through: int | None = None) -> Snapshot:
        """The session's state and the log index it reflects (any reducer, at any point)."""
        if reducer is not None:
            events = await self.runtime.store.read(self.id, after=0, limit=through)
            return Snapshot(reducer.replay(events), events[-1].index if events else 0)
        if through is not None:
            state, index = await self._call("state_at", through)
            return Snapshot(state, index)
        state, index = await self._call("snapshot")
        return Snapshot(state, index)

    async def messages(self) -> list[AgentMessage]:
        """The conversation."""
        snapshot = await self.state()
        return list(snapshot.state.messages)

    async def info(self) -> dict[str, Any]:
        """Executing, paused, queued inputs and the active turn."""
        snapshot = await self.state()
        return {**info_of(snapshot.state), "index": snapshot.index}

    def subscribe(self) -> Subscription:
        """Mutations of this session from now on, each with its ``.index``.

        Subscribe first, then read the snapshot, then drop mutations whose index the snapshot
        already holds (``LiveView`` does exactly that).
        """
        return self.runtime.subscribe(self)

    async def live(self) -> LiveView:
        """A local copy of the session kept current (subscribe, then snapshot); what it sends shows at once."""
        view = LiveView(self)
        await view.start()
        return view


class Subscription:
    """An async iterator over one session's mutations."""

    def __init__(self, session: Session, release: Callable[[Subscription], None]) -> None:
        self.session = session
        self.queue: asyncio.Queue[list[Mutation] | None] = asyncio.Queue()
        self.registered = asyncio.Event()
        self.cursor = -1
        self._release = release

    async def ready(self, timeout: float = 30.0) -> int:
        """Wait until the host has registered this subscription; returns the index it starts after.

        Read the snapshot after this: everything after the returned index is delivered.
        """
        await asyncio.wait_for(self.registered.wait(), timeout)
        return self.cursor

    def feed(self, mutations: list[Mutation]) -> None:
        """Called by the poller with a batch."""
        self.queue.put_nowait(mutations)

    async def next_batch(self, timeout: float | None = None) -> list[Mutation] | None:
        """The next batch, or ``None`` once closed; raises ``TimeoutError`` after ``timeout``."""
        return await asyncio.wait_for(self.queue.get(), timeout)

    async def batches(self) -> AsyncIterator[list[Mutation]]:
        """The mutations in the batches the host sent (cheaper than one at a time)."""
        while True:
            batch = await self.queue.get()
            if batch is None:
                return
            yield batch

    def __aiter__(self) -> AsyncIterator[Mutation]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Mutation]:
        async for batch in self.batches():
            for mutation in batch:
                yield mutation

    def close(self) -> None:
        """Stop receiving."""
        self._release(self)
        self.queue.put_nowait(None)

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class LiveView:
    """Subscribe, then snapshot, then merge: a local copy of a session that stays current.

    Three views of the same session:

    - ``view``: the conversation as the mutations have it (a ``ClientView``; ``wait_for``).
    - ``confirmed``: the server's ``AIState`` as this client knows it. The conversation, the
      inbox, the active and the last turn, the approvals and the app state follow every
      mutation; the rest (tool records, usage, compaction) is as of the last snapshot.
    - ``state``: what to render, ``confirmed`` plus the commands this view sent that the server
      has not confirmed yet (``orchestrator.core.optimistic``). Send through the view
      (``send``, ``prompt``, ``steer``, ``stop``, ``queue``) and the input shows at once: an idle,
      unpaused send in ``state.messages`` with ``state.starting`` true, a later send or one while
      paused in ``state.inbox.items``, steering and Send now for the active turn after its
      current response, and a Stop clears ``state.active``.

    A command stays pending until its receipt is back *and* a mutation shows its effect, so the
    display never falls back to the state before the command while its events are on the way;
    a rejected command (or a call that raised) is dropped at once, which rolls its optimistic
    effect back. ``changed`` is set whenever ``state`` may have changed (a batch arrived, or a
    pending command came or went); ``wait_state`` waits on it.
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        self.view = ClientView()
        self.changed = asyncio.Event()
        self.queue = LiveQueue(self)
        self._subscription: Subscription | None = None
        self._task: asyncio.Task[None] | None = None
        self.listeners: list[Callable[[list[Mutation]], Awaitable[None] | None]] = []
        self._known = AIState()  # the snapshot, kept current from mutations (but the conversation)
        self._pending: list[Command] = []
        self._answered: set[str] = set()  # pending commands whose receipt came back applied
        self._shown: AIState | None = None  # ``state``, computed when read

    async def start(self) -> None:
        """Subscribe first, then load the snapshot, then apply what arrived after it."""
        self._subscription = self.session.subscribe()
        await self._subscription.ready()
        await self._snapshot()
        self._task = asyncio.ensure_future(self._run())

    # -- the three views -----------------------------------------------------------------------------

    @property
    def confirmed(self) -> AIState:
        """The server's state as the mutations so far have it (no pending command in it)."""
        known = self._known
        if known.session is not self.view.state:
            known = self._known = known.with_(session=self.view.state)
        return known

    @property
    def state(self) -> AIState:
        """What to render: ``confirmed`` with this view's pending commands applied (see the class docstring)."""
        if self._shown is None:
            self._shown = optimistic(self.confirmed, self._pending)
        return self._shown

    @property
    def pending(self) -> tuple[Command, ...]:
        """The commands this view sent that the server has not confirmed yet, in the order sent."""
        return tuple(self._pending)

    # -- following the session -------------------------------------------------------------------------

    async def _snapshot(self) -> None:
        snapshot = await self.session.state()
        self.view = ClientView.of(snapshot.state.session, snapshot.index)
        self._known = snapshot.state
        self._settle()

    async def _run(self) -> None:
        assert self._subscription is not None
        async for batch in self._subscription.batches():
            if any(m.type == "reset" for m in batch):
                await self._snapshot()
            else:
                for mutation in batch:
                    if self.view.apply(mutation):
                        self._track(mutation)
            self._shown = None
            for listener in self.listeners:
                result = listener(batch)
                if asyncio.iscoroutine(result):
                    await result
            self.changed.set()

    def _track(self, mutation: Mutation) -> None:
        """Keep ``confirmed`` current past the conversation, and settle what the mutation confirms."""
        kind = mutation.type
        known = self._known
        if kind == "info":
            info = mutation["info"]
            items = tuple(
                InboxItem(q["id"], q["role"], q["text"], bool(q["generate"]), q.get("afterStepOf"))
                for q in info["queued"]
            )
            known = _with_turn(known.with_(inbox=Inbox(items, bool(info["paused"]))), info["turn"], info["lastTurn"])
        elif kind == "turn":
            known = _with_turn(known, mutation["turn"], mutation["lastTurn"])
        elif kind == "interaction":
            wire = mutation["interaction"]
            interaction = Interaction(wire["id"], wire["callId"], wire["name"], wire["prompt"], wire["status"])
            known = known.with_(interactions={**known.interactions, interaction.id: interaction})
        elif kind == "app":
            known = known.with_(app=dict(mutation["app"]))
        self._known = known
        if self._answered and kind not in ("delta", "part"):
            self._settle()

    def _settle(self) -> None:
        """Drop the answered commands that ``confirmed`` now shows."""
        if not self._answered:
            return
        confirmed = self.confirmed
        done = {c.id for c in self._pending if c.id in self._answered and settled(confirmed, c)}
        if done:
            self._drop(done)

    def _drop(self, ids: set[str]) -> None:
        self._pending = [c for c in self._pending if c.id not in ids]
        self._answered -= ids
        self._shown = None
        self.changed.set()

    # -- sending through the view ----------------------------------------------------------------------

    async def _through(
        self, command: Command, call: Callable[[], Awaitable[R]], receipt_of: Callable[[R], Receipt | None]
    ) -> R:
        """Show ``command`` at once, make ``call`` (which sends it), then keep or drop it by its receipt."""
        check_command(command)  # a malformed command raises before anything shows
        self._pending.append(command)
        self._shown = None
        self.changed.set()
        try:
            result = await call()
        except BaseException:
            self._drop({command.id})
            raise
        receipt = receipt_of(result)
        if receipt is None or receipt.outcome != "applied":
            self._drop({command.id})  # rejected, or nothing to address: roll the display back
        else:
            self._answered.add(command.id)
            self._settle()
        return result

    def _observed_turn(self) -> str | None:
        active = self.confirmed.active
        return active.id if active is not None else None

    async def send(self, text: str, *, id: str | None = None, role: Role = "user", generate: bool = True) -> Receipt:
        """``Session.send``, shown at once in ``state`` (see the class docstring)."""
        command = SendInput(id or new_id(), text, role, generate)
        return await self._through(
            command, lambda: self.session.send(text, id=command.id, role=role, generate=generate), _same
        )

    async def prompt(self, text: str, *, id: str | None = None) -> Turn:
        """``Session.prompt``, shown at once in ``state``; ``await turn.finished`` as usual."""
        command = SendInput(id or new_id(), text)
        return await self._through(command, lambda: self.session.prompt(text, id=command.id), _turn_receipt)

    async def steer(self, text: str, *, id: str | None = None, turn_id: str | None = None) -> Receipt:
        """``Session.steer`` aimed at the turn this view shows active (or ``turn_id``), shown at once.

        The steering appears after the current response; with no active turn it sends.
        """
        observed = turn_id if turn_id is not None else self._observed_turn()
        command = SendInput(id or new_id("steer"), text, steer=observed)
        return await self._through(command, lambda: self.session.steer(text, id=command.id, turn_id=observed), _same)

    async def stop(self, *, cancel_queued: bool = False, id: str | None = None) -> StopResult:
        """``Session.stop``; ``state.active`` clears at once (and comes back if nothing was stopped)."""
        command = StopTurn(id or new_id("stop"), self._observed_turn(), cancel_queued)
        return await self._through(
            command, lambda: self.session.stop(cancel_queued=cancel_queued, id=command.id), _stop_receipt
        )

    async def wait_for(self, predicate: Callable[[ClientView], bool], timeout: float | None = None) -> ClientView:
        """Wait until the local conversation (``view``) satisfies ``predicate``."""

        async def wait() -> ClientView:
            while not predicate(self.view):
                self.changed.clear()
                await self.changed.wait()
            return self.view

        return await asyncio.wait_for(wait(), timeout)

    async def wait_state(self, predicate: Callable[[AIState], bool], timeout: float | None = None) -> AIState:
        """Wait until what to render (``state``, optimistic) satisfies ``predicate``."""

        async def wait() -> AIState:
            while not predicate(self.state):
                self.changed.clear()
                await self.changed.wait()
            return self.state

        return await asyncio.wait_for(wait(), timeout)

    async def close(self) -> None:
        """Stop following the session."""
        if self._subscription is not None:
            self._subscription.close()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class LiveQueue:
    """``Session.queue`` through a ``LiveView`` (``live.queue``): each change shows at once in ``live.state``."""

    def __init__(self, live: LiveView) -> None:
        self._live = live

    async def edit(self, input_id: str, text: str, *, role: Role = "user", id: str | None = None) -> Receipt:
        """``Queue.edit``; the new text shows at once (and reverts if rejected)."""
        command = EditInput(id or new_id("edit"), input_id, text, role)
        queue = self._live.session.queue
        return await self._live._through(command, lambda: queue.edit(input_id, text, role=role, id=command.id), _same)

    async def move(self, input_id: str, before_id: str | None = None, *, id: str | None = None) -> Receipt:
        """``Queue.move`` (before ``before_id``; ``None``: to the end); the new order shows at once."""
        command = MoveInput(id or new_id("move"), input_id, before_id)
        queue = self._live.session.queue
        return await self._live._through(command, lambda: queue.move(input_id, before_id, id=command.id), _same)

    async def remove(self, input_id: str, *, id: str | None = None) -> Receipt:
        """``Queue.remove``; the input leaves ``state.inbox.items`` at once."""
        command = RemoveInput(id or new_id("remove"), input_id)
        queue = self._live.session.queue
        return await self._live._through(command, lambda: queue.remove(input_id, id=command.id), _same)

    async def send_now(self, input_id: str, turn_id: str | None = None, *, id: str | None = None) -> Receipt:
        """``Queue.send_now`` aimed at the turn the view shows active (or ``turn_id``).

        The input shows after the current response at once; a stale turn rejects it (and it goes
        back to the queue).
        """
        observed = turn_id if turn_id is not None else self._live._observed_turn()
        command = SendNow(id or new_id("sendnow"), input_id, observed)
        queue = self._live.session.queue
        return await self._live._through(command, lambda: queue.send_now(input_id, observed, id=command.id), _same)


def _same(receipt: Receipt) -> Receipt:
    return receipt


def _turn_receipt(turn: Turn) -> Receipt | None:
    return turn.receipt


def _stop_receipt(result: StopResult) -> Receipt | None:
    return result.receipt


def _with_turn(state: AIState, turn: Mapping[str, Any] | None, last: Mapping[str, Any] | None) -> AIState:
    """``state`` with the active and last turn of a ``turn`` / ``info`` mutation."""
    previous = state.active
    turns = state.turns
    active: ActiveTurn | None = None
    if turn is not None:
        wire_step = turn.get("step")
        step: StepState | None = None
        if wire_step is not None:
            kept = previous.step if previous is not None and previous.id == turn["id"] else None
            step = StepState(
                wire_step["id"],
                int(wire_step["index"]),
                kept.session_step if kept is not None else state.session_steps,
                wire_step["status"],
                wire_step.get("finishReason"),
            )
        if previous is not None and previous.id == turn["id"]:
            active = replace(previous, input=tuple(turn["input"]), phase=turn["phase"], step=step)
        else:
            active = ActiveTurn(turn["id"], tuple(turn["input"]), turn["phase"], turn["messageId"], turns, step=step)
            turns += 1
    last_turn = None if last is None else (str(last["id"]), str(last["outcome"]))
    return state.with_(active=active, last_turn=last_turn, turns=turns)
