"""``LiveView``: subscribe, then snapshot, then merge; a local copy of a session that stays current.

What the view sends shows at once (``orchestrator.core.optimistic``) until the server confirms it.

It wraps a ``Session`` (``session.live()`` makes one), known here only as the ``LiveSession`` it
must be: so this module stands below ``actors.client``, which imports it, and not beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Generic, Protocol, TypeVar

from actors.mutation import Mutation, StopResult
from orchestrator.core.aistate import ActiveTurn, AIState, Inbox, InboxItem, Interaction, Receipt, StepState, changed
from orchestrator.core.commands import (
    Command,
    EditInput,
    MoveInput,
    RemoveInput,
    SendInput,
    SendNow,
    StopTurn,
    check_command,
)
from orchestrator.core.ids import new_id
from orchestrator.core.mutations import ClientView
from orchestrator.core.optimistic import optimistic, settled
from orchestrator.core.parts import Role
from orchestrator.run.log import Snapshot
from orchestrator.run.waiting import Flag

__all__ = ["LiveQueue", "LiveSession", "LiveView"]

R = TypeVar("R")


class _Receipted(Protocol):
    """A prompt's handle, as far as the view reads it."""

    @property
    def receipt(self) -> Receipt | None:
        """The prompt's receipt."""
        ...


TurnT_co = TypeVar("TurnT_co", bound=_Receipted, covariant=True)


class _Feed(Protocol):
    """A subscription, as far as the view reads it."""

    async def ready(self, timeout: float = ...) -> int:
        """Wait until the host has registered it."""
        ...

    def attach(self, sink: Callable[[list[Mutation] | None], None]) -> None:
        """Hand every batch to ``sink`` as it comes (those waiting first), and ``None`` at the close."""
        ...

    def close(self) -> None:
        """Stop receiving."""
        ...


class _QueuePort(Protocol):
    """``session.queue``, as far as the view sends through it."""

    async def edit(self, input_id: str, text: str, *, role: Role = ..., id: str | None = ...) -> Receipt:
        """Edit a pending input."""
        ...

    async def move(self, input_id: str, before_id: str | None = ..., *, id: str | None = ...) -> Receipt:
        """Move a pending input."""
        ...

    async def remove(self, input_id: str, *, id: str | None = ...) -> Receipt:
        """Remove a pending input."""
        ...

    async def send_now(self, input_id: str, turn_id: str | None = ..., *, id: str | None = ...) -> Receipt:
        """Hand a queued input off to the observed turn."""
        ...


class LiveSession(Protocol[TurnT_co]):
    """What a ``LiveView`` needs of the session it wraps (``actors.client.Session`` is one)."""

    @property
    def queue(self) -> _QueuePort:
        """The session's pending inputs."""
        ...

    def subscribe(self) -> _Feed:
        """Its mutations from now on."""
        ...

    async def subscribe_and_snapshot(self) -> tuple[_Feed, Snapshot | None]:
        """Subscribe, and the snapshot it starts after when one call can give both (else ``None``)."""
        ...

    async def state(self) -> Snapshot:
        """Its state and the log index it reflects."""
        ...

    async def send(self, text: str, *, id: str | None = ..., role: Role = ..., generate: bool = ...) -> Receipt:
        """Put an input in the inbox."""
        ...

    async def prompt(self, text: str, *, id: str | None = ...) -> TurnT_co:
        """Send a user message; its turn's handle."""
        ...

    async def steer(self, text: str, *, id: str | None = ..., turn_id: str | None = ...) -> Receipt:
        """Steer the observed turn."""
        ...

    async def stop(self, *, cancel_queued: bool = ..., id: str | None = ...) -> StopResult:
        """Stop the active turn."""
        ...


SessionT = TypeVar("SessionT", bound="LiveSession[Any]")
TurnT = TypeVar("TurnT", bound=_Receipted)


class LiveView(Generic[SessionT, TurnT]):
    """Subscribe, then snapshot, then merge: a local copy of a session that stays current.

    Three views of the same session:

    - ``view``: the conversation as the mutations have it (a ``ClientView``; ``wait_for``).
    - ``confirmed``: the server's ``AIState`` as this client knows it. The conversation, the
      inbox, the active and the last turn, the approvals, the app state and the token totals
      follow every mutation; the rest (tool records, compaction) is as of the last snapshot.
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

    def __init__(self, session: SessionT) -> None:
        self.session = session
        self.view = ClientView()
        self.changed = Flag()
        self._subscription: _Feed | None = None
        self._task: asyncio.Task[None] | None = None
        """What awaits for the view: a snapshot re-read, or an async listener."""
        self._backlog: list[list[Mutation] | None] | None = None
        """Batches that came while ``_task`` awaits, applied after it in order (``None``: nothing awaits)."""
        self._following = False
        self._error: Exception | None = None
        self.listeners: list[Callable[[list[Mutation]], Awaitable[None] | None]] = []
        """Called with each batch once it is applied, in order. A plain function runs in the call
        that delivered the batch (keep it quick); an async one holds the later batches until it
        returns. One that raises stops this view (``close`` raises it)."""
        self._known = AIState()  # the snapshot, kept current from mutations (but the conversation)
        self._pending: list[Command] = []
        self._answered: set[str] | None = None
        """Pending commands whose receipt came back applied (made at the first: an empty set is 216 bytes a view)."""
        self._shown: AIState | None = None  # ``state``, computed when read
        self.index = 0
        """The log index ``confirmed`` reflects (past the last mutation's when later events changed nothing shown)."""
        self.indicator: str | None = None
        """``AIState.indicator`` as the server has it (``"compacting"`` while a compaction runs)."""

    @property
    def queue(self) -> LiveQueue:
        """``Session.queue`` through this view (made on use: kept, it would be a reference cycle)."""
        return LiveQueue(self)

    async def start(self) -> None:
        """Subscribe first, then load the snapshot, then apply what arrived after it."""
        self._subscription, snapshot = await self.session.subscribe_and_snapshot()
        if snapshot is None:
            await self._subscription.ready()
            snapshot = await self.session.state()
        self._adopt(snapshot)
        self._following = True
        self._subscription.attach(self._deliver)

    @property
    def running(self) -> bool:
        """Whether the view still follows the session (started, and not closed)."""
        return self._following

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
        self._adopt(await self.session.state())

    def _adopt(self, snapshot: Snapshot) -> None:
        self.view = ClientView.of(snapshot.state.session, snapshot.index)
        self._known = snapshot.state
        self.index = snapshot.index
        self.indicator = snapshot.state.indicator
        self._settle()

    # A batch is applied when it comes, in the poller's own call (``_deliver``): a view keeps no
    # task, and no batch waits in a queue for one. Only what must await (a reset's snapshot, an
    # async listener) runs in a task, and the batches that come meanwhile wait for it, in order.

    def _deliver(self, batch: list[Mutation] | None) -> None:
        """The feed's next batch (``None``: it closed). Never raises: the feed serves other views."""
        if self._backlog is not None:
            self._backlog.append(batch)
            return
        try:
            if batch is None:
                self._end()
            elif any(m.type == "reset" for m in batch):
                self._await(self._take(batch))
            else:
                self._apply(batch)
                self._tell(batch, 0)
        except Exception as error:
            self._fail(error)

    def _apply(self, batch: list[Mutation]) -> None:
        view = self.view
        last = len(batch) - 1
        for i, mutation in enumerate(batch):
            if view.apply(mutation) and not (i < last and _repeated_by_info(mutation, batch[i + 1])):
                self._track(mutation)
        self.index = max(self.index, self.view.index, getattr(batch, "cursor", -1))
        self._shown = None

    def _tell(self, batch: list[Mutation], start: int) -> None:
        """Call the listeners from ``start`` on; from an async one on, the rest runs in a task."""
        result, position = self._call_listeners(batch, start)
        if result is None:
            self.changed.set()
        else:
            self._await(self._told(result, batch, position))

    async def _told(self, result: Awaitable[None] | None, batch: list[Mutation], start: int) -> None:
        """Await ``result`` (an async listener's), and the listeners from ``start`` on, in order."""
        while result is not None:
            await result
            result, start = self._call_listeners(batch, start)
        self.changed.set()

    def _call_listeners(self, batch: list[Mutation], start: int) -> tuple[Awaitable[None] | None, int]:
        """Call the listeners from ``start`` until one returns a coroutine: it and the next position."""
        listeners = self.listeners
        position = start
        while position < len(listeners):
            result = listeners[position](batch)
            position += 1
            if asyncio.iscoroutine(result):
                return result, position
        return None, position

    async def _take(self, batch: list[Mutation]) -> None:
        """Apply one batch (a reset re-reads the snapshot), tell the listeners, wake ``changed``."""
        if any(m.type == "reset" for m in batch):
            await self._snapshot()
            self.index = max(self.index, getattr(batch, "cursor", -1))
            self._shown = None
        else:
            self._apply(batch)
        result, position = self._call_listeners(batch, 0)
        await self._told(result, batch, position)

    def _await(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in a task; batches that come meanwhile wait in ``_backlog``."""
        self._backlog = []
        self._task = asyncio.ensure_future(self._catch_up(work))

    async def _catch_up(self, work: Coroutine[Any, Any, None]) -> None:
        try:
            await work
            backlog = self._backlog
            while backlog:
                batch = backlog.pop(0)
                if batch is None:
                    self._end()
                    return
                await self._take(batch)
                del batch  # not held while the next one is awaited
        except Exception as error:
            self._fail(error)
        finally:
            self._backlog = None

    def _end(self) -> None:
        self._following = False
        # A listener is usually a bound method of an object that holds this view (an HTTP
        # server's ``Followed``, the terminal chat): kept after the view stopped, the two would
        # be a reference cycle, freed only by the cyclic collector (``test_no_cycles``).
        self.listeners.clear()

    def _fail(self, error: Exception) -> None:
        """A batch could not be applied, or a listener raised: stop following (``close`` raises it)."""
        self._error = error
        self._end()
        if self._subscription is not None:
            self._subscription.close()

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
            self.indicator = info.get("indicator")
        elif kind == "turn":
            known = _with_turn(known, mutation["turn"], mutation["lastTurn"])
        elif kind == "interaction":
            wire = mutation["interaction"]
            interaction = Interaction(
                wire["id"], wire["callId"], wire["name"], wire["prompt"], wire["status"], wire.get("reason")
            )
            known = known.with_(interactions={**known.interactions, interaction.id: interaction})
        elif kind == "app":
            known = known.with_(app=dict(mutation["app"]))
        elif kind == "usage":
            usage = mutation["usage"]
            known = known.with_(
                usage=changed(
                    known.usage, input_tokens=int(usage["inputTokens"]), output_tokens=int(usage["outputTokens"])
                )
            )
        self._known = known
        if self._answered and kind not in ("delta", "part"):
            self._settle()

    def _settle(self) -> None:
        """Drop the answered commands that ``confirmed`` now shows."""
        if not self._answered:
            return
        confirmed = self.confirmed
        answered = self._answered
        done = {c.id for c in self._pending if c.id in answered and settled(confirmed, c)}
        if done:
            self._drop(done)

    def _drop(self, ids: set[str]) -> None:
        self._pending = [c for c in self._pending if c.id not in ids]
        if self._answered is not None:
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
            if self._answered is None:
                self._answered = set()
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

    async def prompt(self, text: str, *, id: str | None = None) -> TurnT:
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
        """Stop following the session; raises what stopped it, if a batch or a listener failed."""
        if self._subscription is not None:
            self._subscription.close()
        if self._task is not None:  # the close's None waits behind it in the backlog
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._error is not None:
            error, self._error = self._error, None
            raise error


class LiveQueue:
    """``Session.queue`` through a ``LiveView`` (``live.queue``): each change shows at once in ``live.state``."""

    def __init__(self, live: LiveView[Any, Any]) -> None:
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


def _turn_receipt(turn: _Receipted) -> Receipt | None:
    return turn.receipt


def _stop_receipt(result: StopResult) -> Receipt | None:
    return result.receipt


def _repeated_by_info(mutation: Mutation, following: Mutation) -> bool:
    """Whether ``mutation`` is a ``turn`` that the ``info`` right after it repeats.

    ``mutations.diff`` sends both, at one index, for a turn that changed: tracking the ``info``
    alone leaves ``confirmed`` the same.
    """
    return (
        mutation.get("type") == "turn"
        and following.get("type") == "info"
        and following.get("index") == mutation.get("index")
    )


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
            active = changed(previous, input=tuple(turn["input"]), phase=turn["phase"], step=step)
        else:
            active = ActiveTurn(turn["id"], tuple(turn["input"]), turn["phase"], turn["messageId"], turns, step=step)
            turns += 1
    last_turn = None if last is None else (str(last["id"]), str(last["outcome"]))
    return state.with_(active=active, last_turn=last_turn, turns=turns)
