"""The client: a ``Session`` handle that hides ``.remote()`` and ``ray.get`` behind async methods.

Every method is safe to retry: commands carry ids (a resubmission replays), so when a host dies
mid-call the client waits for it to restart and calls again. Subscriptions long-poll the host
(one poll per host for every session this process subscribes to, ``actors.poller``) and follow
restarts too. A ``Session`` needs only a ``SessionBackend`` of its runtime (``BaseRuntime`` is
one), so this module names neither Ray nor the runtimes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal, Protocol, TypeAlias, TypeVar

from actors.live import LiveQueue
from actors.live import LiveView as _LiveView
from actors.mutation import Mutation, StopResult
from actors.transport import Transport
from orchestrator.core.aistate import Receipt
from orchestrator.core.commands import (
    EditInput,
    MoveInput,
    PauseSession,
    RemoveInput,
    ResetSession,
    Respond,
    ResumeSession,
    RetryTurn,
    SendInput,
    SendNow,
)
from orchestrator.core.contract import Reducer
from orchestrator.core.errors import UsageError
from orchestrator.core.events import BUILTIN_PREFIX, Event
from orchestrator.core.ids import new_id
from orchestrator.core.mutations import info_of
from orchestrator.core.parts import AgentMessage, Role
from orchestrator.core.turn import TurnOutcome
from orchestrator.run.fork import fork_session
from orchestrator.run.log import Snapshot
from orchestrator.run.waiting import Flag, Mailbox
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

    def turn_finished(self, session: Session, input_id: str) -> asyncio.Future[TurnOutcome]:
        """``turn_outcome`` as a future (``Turn.finished``)."""
        ...

    def subscribe(self, session: Session) -> Subscription:
        """A subscription to ``session``'s mutations from now on."""
        ...

    async def subscribe_and_snapshot(self, session: Session) -> tuple[Subscription, Snapshot | None]:
        """A subscription and, where its host registers it with the snapshot, the snapshot."""
        ...


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
        self._finished: asyncio.Future[TurnOutcome] | None = None
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
    def finished(self) -> asyncio.Future[TurnOutcome]:
        """Resolves to the ``TurnOutcome`` (success, outcome, text, error) once the turn has ended.

        A prompt the session rejected (its id was used before, in another session or with other
        text) never enters a turn: ``finished`` resolves at once, ``removed``, with the reason.
        Cancelling it gives up this wait only: the turn goes on.
        """
        if self._finished is None:
            receipt = self.receipt
            if receipt is not None and receipt.outcome == "rejected":
                self._finished = asyncio.get_running_loop().create_future()
                self._finished.set_result(
                    TurnOutcome("", "removed", "", error=f"the prompt {self.id!r} was rejected ({receipt.reason})")
                )
            else:
                self._finished = self.session.runtime.turn_finished(self.session, self.id)
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

    # -- calls -------------------------------------------------------------------------------------

    @property
    def queue(self) -> Queue:
        """Operations on the pending inputs (made on use: kept, it would be a reference cycle)."""
        return Queue(self)

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

    async def reset(self, *, id: str | None = None) -> Receipt:
        """Stop the active turn and start a new conversation (``useAgentSession``'s ``reset()``).

        Durably, a reset is one ``ai.session.reset`` command in the log: the active turn ends as
        ``stopped`` (its work is cancelled, its ``Turn.finished`` resolves ``stopped``, open
        approvals close), then the conversation, the queued inputs, the approvals and the
        compaction start empty. The log keeps everything before it, so ``state(through=i)`` and
        ``fork(at=i)`` still reach the old conversation. What carries on: the turn counter (turn
        ids never repeat), usage, a pause, and the contract's app state. Idempotent by ``id``.
        """
        return await self._command(ResetSession(id or new_id("reset")))

    async def fork(self, *, at: int, id: str) -> Session:
        """A new session ``id`` whose log is this one's events ``1..at`` (time travel).

        The fork folds to exactly this session's state at ``at`` (``state(through=at)``) and then
        runs on its own, under the same agent; sub-agent sessions come along through the same
        point. Forked in the middle of a turn, the fork's turn is interrupted as a crash at ``at``
        would leave it, and it recovers by the tools' policies as soon as this returns: a
        ``report`` call that had started is not run again ("interrupted; it may have partly
        run"). Input and command ids before ``at`` belong to this session: send the fork new
        ones. The rules in full: ``orchestrator.run.fork``.

        Raises:
            UsageError: ``at`` is negative or beyond this log, or ``id`` is not a valid new
                session id (already has events, contains '/'); nothing is written.
        """
        fork = Session(self.runtime, id, self.agent_key)
        await fork_session(self.runtime.store, self.id, id, at)
        await fork.state()  # activate it: an interrupted turn recovers now, as after a crash
        return fork

    async def respond(
        self, interaction_id: str, approved: bool, *, reason: str | None = None, id: str | None = None
    ) -> Receipt:
        """Answer an approval."""
        return await self._command(Respond(id or new_id("respond"), interaction_id, approved, reason))

    async def push(self, *events: Event | tuple[str, dict[str, Any]]) -> int:
        """Append app events (trusted: this is server code). Returns the log index after them."""
        for event in events:
            kind = event.type if isinstance(event, Event) else event[0]
            if isinstance(kind, str) and kind.startswith(BUILTIN_PREFIX):
                raise UsageError(f"push() takes app events; {kind!r} is a built-in event type")
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

    async def subscribe_and_snapshot(self) -> tuple[Subscription, Snapshot | None]:
        """``subscribe``, and the snapshot it starts after when the host can give both in one call.

        With a snapshot, the subscription is registered and delivers every mutation after the
        snapshot's index. ``None``: wait for ``ready()``, then read ``state()``, as with ``subscribe``.
        """
        return await self.runtime.subscribe_and_snapshot(self)

    async def live(self) -> LiveView:
        """A local copy of the session kept current (subscribe, then snapshot); what it sends shows at once."""
        view: LiveView = _LiveView(self)
        await view.start()
        return view


class Subscription:
    """An async iterator over one session's mutations."""

    def __init__(self, session: Session, release: Callable[[Subscription], None]) -> None:
        self.session = session
        self.queue: Mailbox[list[Mutation] | None] = Mailbox()
        self.registered = Flag()
        self.cursor = -1
        self.placing: asyncio.Future[None] | None = None
        """Finding the session's host first (dedicated placement may wait for an actor); ``None``: known."""
        self._release = release
        self._sink: Callable[[list[Mutation] | None], None] | None = None

    async def ready(self, timeout: float = 30.0) -> int:
        """Wait until the host has registered this subscription; returns the index it starts after.

        Read the snapshot after this: everything after the returned index is delivered. In
        dedicated placement the session may first wait for an actor: ``timeout`` starts once it
        has one (the wait has its own limit, ``dedicated_wait``, and its own error).

        Raises:
            DedicatedFull: no dedicated actor came free for the session.
            TimeoutError: the host did not register the subscription within ``timeout``.
        """
        if self.placing is not None:
            await self.placing
        await asyncio.wait_for(self.registered.wait(), timeout)
        return self.cursor

    def attach(self, sink: Callable[[list[Mutation] | None], None]) -> None:
        """Hand every batch to ``sink`` as it comes (those waiting first), and ``None`` at the close.

        What a ``LiveView`` does: it applies each batch in the poller's own call, so it keeps no
        task, and no batch waits in the queue. ``sink`` must not raise (other feeds share the call).
        """
        queue = self.queue
        while not queue.empty():
            sink(queue.get_nowait())
        self._sink = sink

    def feed(self, mutations: list[Mutation]) -> None:
        """Called by the poller with a batch."""
        sink = self._sink
        if sink is not None:
            sink(mutations)
        else:
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
            # Not held while the next one is awaited: a session's last batch (a turn's end is a
            # few KB) would stay in memory as long as its subscription waits, for every session.
            del batch

    def __aiter__(self) -> AsyncIterator[Mutation]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Mutation]:
        async for batch in self.batches():
            for mutation in batch:
                yield mutation

    def close(self) -> None:
        """Stop receiving."""
        self._release(self)
        sink, self._sink = self._sink, None
        if sink is not None:
            sink(None)
        else:
            self.queue.put_nowait(None)

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


LiveView: TypeAlias = _LiveView["Session", Turn]
"""A ``Session``'s live view (``session.live()``): its ``prompt`` gives this module's ``Turn``."""
