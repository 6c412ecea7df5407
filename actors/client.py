"""The client: a ``Session`` handle that hides ``.remote()`` and ``ray.get`` behind async methods.

Every method is safe to retry: commands carry ids (a resubmission replays), so when a host dies
mid-call the client waits for it to restart and calls again. Subscriptions long-poll the host
(one poll per host for every session this process subscribes to) and follow restarts too.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from actors.hub import WaitFailed
from actors.options import ACTOR_ERRORS
from orchestrator.core.aistate import AIState, Receipt
from orchestrator.core.commands import (
    EditInput,
    MoveInput,
    PauseSession,
    RemoveInput,
    Respond,
    ResumeSession,
    RetryTurn,
    SendInput,
    SendNow,
)
from orchestrator.core.contract import Reducer
from orchestrator.core.errors import UsageError
from orchestrator.core.events import Event
from orchestrator.core.ids import new_id
from orchestrator.core.mutations import ClientView
from orchestrator.core.parts import AgentMessage, Role
from orchestrator.core.turn import TurnOutcome
from orchestrator.run.log import Snapshot

if TYPE_CHECKING:
    from actors.base import BaseRuntime as Runtime

__all__ = ["LiveView", "Mutation", "Queue", "Session", "StopResult", "Subscription", "Turn", "TurnResult"]

T = TypeVar("T")
_ACTOR_ERRORS = ACTOR_ERRORS
WAIT_WAKE = 0.01
"""Seconds a new turn wait may ride on the next poll before the waiting poll is ended for it."""


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
class TurnResult:
    """How a prompt's turn ended."""

    success: bool
    """Whether the turn completed."""
    outcome: str
    """``completed``, ``failed``, ``stopped``, ``superseded``, ``handed-off`` or ``removed``."""
    text: str
    """The turn's final text."""
    error: str | None = None
    """Why it failed."""
    turn_id: str = ""
    """The turn that admitted the input."""
    index: int = 0
    """The log index at which the turn had ended: a subscriber at this index has seen all of it."""


@dataclass(frozen=True, slots=True)
class StopResult:
    """What ``stop()`` did."""

    receipt: Receipt | None
    """The stop's receipt (``None`` when no turn was active)."""
    cancelled_queued_prompts: int
    """Queued inputs the stop cancelled (steering for the stopped turn, or all with ``cancel_queued``)."""


class Turn:
    """A prompt in flight: ``await turn.finished`` resolves when its turn ends."""

    def __init__(self, session: Session, input_id: str, receipt: Receipt | None) -> None:
        self.session = session
        self.id = input_id
        self.receipt = receipt
        self._finished: asyncio.Task[TurnResult] | None = None

    @property
    def finished(self) -> asyncio.Task[TurnResult]:
        """Resolves to a ``TurnResult`` (success, error, text) once the turn has ended."""
        if self._finished is None:
            self._finished = asyncio.ensure_future(self._wait())
        return self._finished

    async def _wait(self) -> TurnResult:
        outcome: TurnOutcome = await self.session.runtime._turn_outcome(self.session, self.id)
        return TurnResult(outcome.success, outcome.outcome, outcome.text, outcome.error, outcome.turn_id, outcome.index)


class Queue:
    """Operations on a session's pending inputs (``session.queue``)."""

    def __init__(self, session: Session) -> None:
        self._session = session

    async def edit(self, input_id: str, text: str, *, role: Role = "user", id: str | None = None) -> Receipt:
        """Replace a pending input's content (``not-pending`` / ``role-mismatch`` otherwise)."""
        return await self._session._command(EditInput(id or new_id("edit"), input_id, text, role))

    async def move(self, input_id: str, before_id: str | None = None, *, id: str | None = None) -> Receipt:
        """Move a pending input before ``before_id`` (``None``: to the end)."""
        return await self._session._command(MoveInput(id or new_id("move"), input_id, before_id))

    async def remove(self, input_id: str, *, id: str | None = None) -> Receipt:
        """Remove a pending input."""
        return await self._session._command(RemoveInput(id or new_id("remove"), input_id))

    async def send_now(self, input_id: str, turn_id: str | None = None, *, id: str | None = None) -> Receipt:
        """Hand a queued input off to the active (or the observed) turn."""
        return await self._session._command(SendNow(id or new_id("sendnow"), input_id, turn_id))


class Session:
    """A handle on one session (cheap; create as many as you like)."""

    def __init__(self, runtime: Runtime, session_id: str, agent_key: str) -> None:
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
        await self.runtime._ready_agent(self.agent_key)
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
        """Redirect the active turn after its current response and tools (sends when none is active)."""
        receipt: Receipt = await self._call("steer", id or new_id("steer"), text, turn_id)
        return receipt

    async def stop(self, *, cancel_queued: bool = False, id: str | None = None) -> StopResult:
        """End the active turn now; open calls are cancelled. Returns how many queued prompts it cancelled."""
        receipt, cancelled = await self._call("stop", id or new_id("stop"), cancel_queued)
        return StopResult(receipt, cancelled)

    async def retry(self, *, id: str | None = None) -> Receipt:
        """Resume from the last finished tool call (supersedes a running turn)."""
        return await self._command(RetryTurn(id or new_id("retry")))

    async def pause(
        self, when: Literal["after-turn", "now"] = "after-turn", *, tree: bool = True, id: str | None = None
    ) -> Receipt:
        """Pause this session (and, with ``tree``, its running sub-agents)."""
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
        from orchestrator.core.mutations import info_of

        snapshot = await self.state()
        return {**info_of(snapshot.state), "index": snapshot.index}

    def subscribe(self) -> Subscription:
        """Mutations of this session from now on, each with its ``.index``.

        Subscribe first, then read the snapshot, then drop mutations whose index the snapshot
        already holds (``LiveView`` does exactly that).
        """
        return self.runtime._subscribe(self)

    async def live(self) -> LiveView:
        """A local copy of the conversation kept current (subscribe, then snapshot)."""
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
    """Subscribe, then snapshot, then merge: a local ``SessionState`` that stays current."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.view = ClientView()
        self.state: AIState | None = None
        self.changed = asyncio.Event()
        self._subscription: Subscription | None = None
        self._task: asyncio.Task[None] | None = None
        self.listeners: list[Callable[[list[Mutation]], Awaitable[None] | None]] = []

    async def start(self) -> None:
        """Subscribe first, then load the snapshot, then apply what arrived after it."""
        self._subscription = self.session.subscribe()
        await self._subscription.ready()
        await self._snapshot()
        self._task = asyncio.ensure_future(self._run())

    async def _snapshot(self) -> None:
        snapshot = await self.session.state()
        self.state = snapshot.state
        self.view = ClientView.of(snapshot.state.session, snapshot.index)

    async def _run(self) -> None:
        assert self._subscription is not None
        async for batch in self._subscription.batches():
            if any(m.type == "reset" for m in batch):
                await self._snapshot()
            else:
                self.view.apply_batch(batch)
            for listener in self.listeners:
                result = listener(batch)
                if asyncio.iscoroutine(result):
                    await result
            self.changed.set()

    async def wait_for(self, predicate: Callable[[ClientView], bool], timeout: float | None = None) -> ClientView:
        """Wait until the local view satisfies ``predicate``."""

        async def wait() -> ClientView:
            while not predicate(self.view):
                self.changed.clear()
                await self.changed.wait()
            return self.view

        return await asyncio.wait_for(wait(), timeout)

    async def close(self) -> None:
        """Stop following the session."""
        if self._subscription is not None:
            self._subscription.close()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class Poller:
    """One long poll at a time per host, for every session this process subscribes to on it.

    The host remembers what this poller follows and how far it got (``actors.hub``), so each
    poll sends only the sessions added or removed since the last one, and brings back only the
    sessions with news. The same polls carry the turns this process waits on (``Turn.finished``)
    and bring back how they ended: a turn costs no long-held call of its own.
    """

    def __init__(self, runtime: Runtime, host: str) -> None:
        self.runtime = runtime
        self.host = host
        self.id = new_id("poller")
        self.cursors: dict[str, int] = {}
        self.subscribers: dict[str, list[Subscription]] = {}
        self.task: asyncio.Task[None] | None = None
        self._added: dict[str, int] = {}
        self._removed: set[str] = set()
        self._full = True  # the next poll registers everything (first poll, or a host restart)
        self._polling = False
        self._resets: set[str] = set()
        self.waits: dict[str, tuple[str, str, asyncio.Future[TurnOutcome | WaitFailed]]] = {}
        """Turns waited on: input id -> session id, agent key, and the future of the outcome."""
        self._new_waits: dict[str, tuple[str, str]] = {}
        self._wake_timer: asyncio.TimerHandle | None = None

    def wait(self, session: Session, input_id: str) -> asyncio.Future[TurnOutcome | WaitFailed]:
        """How the turn that admits ``input_id`` ends, delivered by a later poll."""
        known = self.waits.get(input_id)
        if known is not None:
            return known[2]
        future: asyncio.Future[TurnOutcome | WaitFailed] = asyncio.get_running_loop().create_future()
        self.waits[input_id] = (session.id, session.agent_key, future)
        self._new_waits[input_id] = (session.id, session.agent_key)
        if self._polling and self._wake_timer is None:
            # A poll waiting at the host carries no news of this wait: if no reply comes back soon
            # (which would send it with the next poll), end the waiting poll.
            self._wake_timer = asyncio.get_running_loop().call_later(WAIT_WAKE, self._wake_for_waits)
        self._ensure_running()
        return future

    def _wake_for_waits(self) -> None:
        self._wake_timer = None
        if self._new_waits and self._polling:
            self.runtime.transport.wake(self.host, self.id)

    def _ensure_running(self) -> None:
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self._run())

    def add(self, subscription: Subscription) -> None:
        session_id = subscription.session.id
        self.subscribers.setdefault(session_id, []).append(subscription)
        cursor = self.cursors.get(session_id)
        if cursor is not None and cursor >= 0:  # already followed: this subscriber starts after `cursor`
            subscription.cursor = cursor
            subscription.registered.set()
        elif cursor is None:
            self.cursors[session_id] = -1
            self._added[session_id] = -1
            self._removed.discard(session_id)
            if self._polling:
                self.runtime.transport.wake(self.host, self.id)  # the waiting poll returns; the next sends it
        self._ensure_running()

    def remove(self, subscription: Subscription) -> None:
        session_id = subscription.session.id
        subs = self.subscribers.get(session_id, [])
        if subscription in subs:
            subs.remove(subscription)
        if not subs:
            self.subscribers.pop(session_id, None)
            if self.cursors.pop(session_id, None) is not None:
                self._added.pop(session_id, None)
                self._removed.add(session_id)
            if not self.subscribers and not self.waits and self._polling:
                self.runtime.transport.wake(self.host, self.id)  # nothing left to wait for: send the removals

    async def _run(self) -> None:
        transport = self.runtime.transport
        # Removals go out even after the last subscription closed: the host then drops the
        # sessions' rings at once, not when this client polls again.
        while self.subscribers or self.waits or (self._removed and not self._full):
            full = self._full
            added = dict(self.cursors) if full else self._added
            removed = [] if full else list(self._removed)
            waits = {i: (sid, key) for i, (sid, key, _) in self.waits.items()} if full else self._new_waits
            self._added, self._removed, self._full, self._new_waits = {}, set(), False, {}
            self._polling = True
            following = bool(self.subscribers or self.waits)
            timeout = 5.0 if following and not added else 0.0
            try:
                reply = await transport.poll(self.host, self.id, added, removed, timeout, full, waits)
            except _ACTOR_ERRORS:
                # The host restarted and lost its rings: register again from "now", and once the
                # host has told us where "now" is, tell subscribers to re-read the snapshot.
                # (A snapshot read before re-registering could miss what happens in between.)
                await transport.wait_ready(self.host)
                self._restart(reset=True)
                continue
            except asyncio.CancelledError:
                return
            finally:
                self._polling = False
            if reply is None:  # the host does not know this poller (it restarted between polls)
                self._restart(reset=False)
                continue
            news, outcomes = reply
            for input_id, outcome in outcomes.items():
                entry = self.waits.pop(input_id, None)
                if entry is not None and not entry[2].done():
                    entry[2].set_result(outcome)
            for session_id, (cursor, mutations) in news.items():
                if session_id not in self.cursors:
                    continue
                self.cursors[session_id] = cursor
                batch = [Mutation(m) for m in mutations]
                if session_id in self._resets:
                    self._resets.discard(session_id)
                    batch.insert(0, Mutation(type="reset", index=cursor))
                for sub in self.subscribers.get(session_id, []):
                    if not sub.registered.is_set():
                        sub.cursor = cursor
                        sub.registered.set()
                    if batch:
                        sub.feed(batch)

    def _restart(self, *, reset: bool) -> None:
        """Register every session again; with ``reset``, from "now", and re-read the snapshot."""
        self._full = True
        self._added.clear()
        self._removed.clear()
        if reset:
            for session_id in self.cursors:
                self.cursors[session_id] = -1
                self._resets.add(session_id)

    async def close(self) -> None:
        if self._wake_timer is not None:
            self._wake_timer.cancel()
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        for _, _, future in self.waits.values():
            future.cancel()  # the runtime is closing: nobody will deliver these
        self.waits.clear()
