"""App-event handlers: an agent's side effects for its app events, run after they are durable.

``Agent(handlers={"ticket.flagged": notify})`` runs ``await notify(context)`` for every
``ticket.flagged`` event appended to the session. The guarantees (seed: conversations.md, "Add
your own events and state"):

- **After the event is durable.** The event and an ``ai.handler.scheduled`` for it are written in
  one batch; the handler starts only once that batch is in the store.
- **At least once.** A crash (of the process, the Ray host) or a shutdown while a handler runs
  leaves it due, and the session runs it again when it is next activated (a restarted Ray host
  re-activates its sessions at once; otherwise, on the session's next use). A running handler
  keeps its session from deactivating when idle. So a handler may run more than once
  for one event: make its effect idempotent with ``context.event.id`` as the key (e.g. an
  ``Idempotency-Key`` header, or ``idempotent_id(..., context.event.id)`` for an input it sends).
- **Never again once finished.** Its end is recorded as ``ai.handler.finished`` (``completed``,
  or ``failed`` with the message when it raised); a finished handler never runs for that event
  again, and a failure is not retried. A failing handler never fails the session's turn.

Handlers run concurrently with the session's turns (and with each other); the context's
``append`` and ``send`` write to this session as trusted server code.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator.core import event_types as ai
from orchestrator.core.aistate import AIState, DueHandler, Receipt
from orchestrator.core.commands import Command, Decision, SendInput
from orchestrator.core.events import Event
from orchestrator.core.ids import handler_scheduled_id, new_id
from orchestrator.core.parts import Role
from orchestrator.core.payloads import HandlerFinished, HandlerScheduled
from orchestrator.run.log import Applied, SessionLog

__all__ = ["Handler", "HandlerContext", "HandlerHost", "Handlers"]


@dataclass(frozen=True, slots=True)
class HandlerContext:
    """What an app-event handler gets: the session, the event, the app state, and a way to write."""

    session_id: str
    """The session whose log holds the event."""
    event: Event
    """The app event (``event.id``: the stable idempotency key of this handler's effect)."""
    state: AIState
    """The session's state when the handler started (``state.app``: the contract's state)."""
    _push: Callable[[Sequence[Event]], Awaitable[int]] = field(repr=False)
    _submit: Callable[[Command], Awaitable[Decision]] = field(repr=False)

    async def append(self, *events: Event | tuple[str, dict[str, Any]]) -> int:
        """Append app events to this session (trusted: server code). Returns the log index after them.

        A retried handler should give its events ids derived from ``event.id``
        (``idempotent_id``), so a second run replays instead of appending them twice.
        """
        built = [e if isinstance(e, Event) else Event(new_id("evt"), e[0], e[1]) for e in events]
        return await self._push(built)

    async def send(self, text: str, *, id: str | None = None, role: Role = "user", generate: bool = True) -> Receipt:
        """Send an input to this session (as ``session.send``). Derive ``id`` from ``event.id`` to converge on retry."""
        decision = await self._submit(SendInput(id or new_id("msg"), text, role, generate))
        assert decision.receipt is not None
        return decision.receipt


Handler = Callable[[HandlerContext], Awaitable[Any]]
"""An ``async def handler(context)``; what it returns is ignored."""


class HandlerHost(Protocol):
    """What handlers need from their session (``SessionRunner`` is one)."""

    log: SessionLog

    @property
    def session_id(self) -> str:
        """The session's id."""
        ...

    async def _append(self, events: Sequence[Event]) -> list[Applied]:
        """Queue ``events`` for the session's next write; return once it is durable."""
        ...

    async def push(self, events: Sequence[Event], *, trusted: bool = True) -> list[Applied]:
        """Append app events."""
        ...

    async def submit(self, command: Command) -> Decision:
        """Persist a command and its decision."""
        ...


class Handlers:
    """The handlers of one session that run in this process (``running``, by event id)."""

    __slots__ = ("handlers", "host", "running")  # one per active session: kept small

    def __init__(self, host: HandlerHost, handlers: Mapping[str, Handler]) -> None:
        self.host = host
        self.handlers = handlers
        self.running: dict[str, asyncio.Task[None]] = {}

    def schedule(self, event: Event) -> Event | None:
        """The ``ai.handler.scheduled`` that goes in ``event``'s batch, if its type has a handler."""
        if not self.handlers or event.data is not None or event.type not in self.handlers:
            return None  # (checked for every event the session writes: the common case first)
        return Event(handler_scheduled_id(event.id), ai.HANDLER_SCHEDULED, data=HandlerScheduled(event.id, event.type))

    def start(self, due: DueHandler, event: Event | None = None) -> None:
        """Run the handler for ``due`` (reading its event from the log when not given)."""
        if due.event_id in self.running or due.event_type not in self.handlers:
            return
        if due.event_id not in self.host.log.state.due_handlers:
            return  # finished already (a replayed batch, or another process ran it)
        task = asyncio.create_task(self._run(due, event))
        self.running[due.event_id] = task
        task.add_done_callback(lambda _: self.running.pop(due.event_id, None))

    def start_due(self, state: AIState) -> None:
        """Run every handler ``state`` says is due and does not run here (after a crash)."""
        for due in state.due_handlers.values():
            self.start(due)

    async def _run(self, due: DueHandler, event: Event | None) -> None:
        host = self.host
        try:
            if event is None:
                event = await self._read(due)
            context = HandlerContext(host.session_id, event, host.log.state, lambda e: self._push(e), host.submit)
            await self.handlers[due.event_type](context)
            finished = HandlerFinished(due.event_id)
        except asyncio.CancelledError:
            raise  # the session closed: the handler stays due and runs again on activation
        except Exception as error:
            finished = HandlerFinished(due.event_id, "failed", str(error) or type(error).__name__)
        await host._append([Event("", ai.HANDLER_FINISHED, data=finished)])

    async def _push(self, events: Sequence[Event]) -> int:
        await self.host.push(events, trusted=True)
        return self.host.log.index

    async def _read(self, due: DueHandler) -> Event:
        """The app event of ``due``: just before its schedule, written in the same batch."""
        store, session_id = self.host.log.store, self.host.session_id
        for event in await store.read(session_id, after=max(due.index - 2, 0), limit=1):
            if event.id == due.event_id:
                return event
        for event in await store.read(session_id):  # not where it is written: look it up
            if event.id == due.event_id:
                return event
        raise LookupError(f"app event {due.event_id!r} is not in session {session_id!r}'s log")

    async def close(self) -> None:
        """Stop the handlers running here (they stay due in the log)."""
        tasks = list(self.running.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
