"""What the Ray runtime and the in-process runtime share: sessions, agents, subscriptions.

``BaseRuntime`` is the ``SessionBackend`` of the sessions it hands out (``actors.client``): it
makes their agents known to the hosts once, keeps one ``Poller`` per host for every subscription
and turn wait of this process, and resolves ``Turn.finished``. How an agent gets to the hosts is
the runtime's (``_agent_key`` and ``_register_agent``): the Ray runtime pickles it, the in-process
one hands its host the very object.
"""

from __future__ import annotations

import asyncio
from typing import Any

from actors.client import Session, Subscription
from actors.host import TURN_WAIT_LIMIT
from actors.hub import WaitFailed
from actors.logs import default_logging
from actors.poller import Poller
from actors.store_feed import StoreFeed
from actors.transport import Transport
from orchestrator.core.contract import Contract
from orchestrator.core.errors import UsageError
from orchestrator.core.turn import TurnOutcome
from orchestrator.run.agent import Agent
from orchestrator.run.background import run_kept
from orchestrator.run.log import Snapshot
from orchestrator.store.base import EventStore, Followable

__all__ = ["BaseRuntime"]


class BaseRuntime:
    """Hands out ``Session`` handles over a ``Transport`` (see ``Runtime`` and ``LocalRuntime``)."""

    transport: Transport
    store: EventStore
    follow: str = "hosts"
    """``hosts``: subscriptions long-poll the session's host; ``store``: they follow the store's
    log instead when it pushes commits (PostgreSQL; ``actors.store_feed``), else the host."""

    def __init__(self) -> None:
        default_logging()  # stderr, warnings: unless the program configured structlog (actors.logs)
        self._agents: dict[int, tuple[str, Agent]] = {}
        self._registered: set[str] = set()
        self._pollers: dict[str, Poller] = {}
        self._later: set[asyncio.Future[Any]] = set()
        """Work started on its own (a subscription placed later, a turn's outcome asked of its host)."""
        self._feeds: dict[int, StoreFeed] = {}

    def session(self, session_id: str, *, agent: Agent) -> Session:
        """A handle on session ``session_id`` running ``agent`` (created on its first command)."""
        if not isinstance(agent, Agent):
            raise UsageError(f"rt.session(..., agent=...) needs an Agent, got {type(agent).__name__}")
        known = self._agents.get(id(agent))
        if known is None:
            known = self._agents[id(agent)] = (self._agent_key(agent), agent)
        return Session(self, session_id, known[0])

    def _agent_key(self, agent: Agent) -> str:
        """The key ``agent`` is registered under (the runtime's; called once per agent object)."""
        raise NotImplementedError

    async def _register_agent(self, key: str, agent: Agent) -> None:
        """Make ``agent`` known to the hosts under ``key`` (the runtime's)."""
        raise NotImplementedError

    async def ready_agent(self, key: str) -> None:
        """Make sure the hosts know the agent registered as ``key`` (once per runtime; idempotent)."""
        if key in self._registered:
            return
        for agent_key, agent in self._agents.values():
            if agent_key == key:
                await self._register_agent(key, agent)
                self._registered.add(key)
                return

    def subscribe(self, session: Session) -> Subscription:
        """A subscription to ``session``'s mutations, fed by the poller of its host (or the store: ``follow``)."""
        subscription = Subscription(session, self._unsubscribe)
        if self.follow == "store" and isinstance(self.store, Followable):
            feed = self._feeds[id(subscription)] = StoreFeed(
                self.store, self.store, subscription, self._contract_of(session.agent_key)
            )
            feed.start()
            return subscription
        name = self.transport.host_now(session.id)
        if name is None:
            subscription.placing = run_kept(self._later, self._subscribe_later(session, subscription))
        else:
            self._poller(name).add(subscription)
        return subscription

    async def subscribe_and_snapshot(self, session: Session) -> tuple[Subscription, Snapshot | None]:
        """A subscription and, where the host can register it with the snapshot, that snapshot.

        One call instead of three (a wake of the waiting poll, a poll to register, a snapshot):
        the host reads the state and registers this process's poller in one turn of its loop.
        ``None``: subscribe, then read the snapshot (the host did not know the poller yet, the
        session is followed here already or is not placed, or subscriptions follow the store).
        """
        if self.follow == "store" and isinstance(self.store, Followable):
            return self.subscribe(session), None
        name = self.transport.host_now(session.id)
        poller = None if name is None else self._poller(name)
        if poller is None or not poller.fresh(session.id):
            return self.subscribe(session), None
        await self.ready_agent(session.agent_key)
        state, index, followed = await self.transport.call(session.id, "snapshot_follow", session.agent_key, poller.id)
        subscription = Subscription(session, self._unsubscribe)
        if followed and poller.adopt(subscription, index):
            return subscription, Snapshot(state, index)
        poller.add(subscription)  # registered by the next poll (from "now"): the view reads the snapshot after
        return subscription, None

    async def _subscribe_later(self, session: Session, subscription: Subscription) -> None:
        name = await self.transport.host_of(session.id)
        self._poller(name).add(subscription)

    def turn_finished(self, session: Session, input_id: str) -> asyncio.Future[TurnOutcome]:
        """``turn_outcome`` as a future: ``Turn.finished``.

        Where the session's host is known and its agent registered (after a prompt, always), it
        is a future fed by the poller's shared wait, with no task or coroutine of its own: every
        prompt in flight holds one, and a task with its two frames, its context and the shield's
        future and callbacks were ~1 KB of it. As with the shield, a caller that cancels its
        future leaves the shared wait to the others.
        """
        name = self.transport.host_now(session.id) if session.agent_key in self._registered else None
        if name is None:
            return asyncio.create_task(self.turn_outcome(session, input_id))
        outcome: asyncio.Future[TurnOutcome] = asyncio.get_running_loop().create_future()

        def settle(waited: asyncio.Future[TurnOutcome | WaitFailed]) -> None:
            if outcome.done():  # the caller gave up
                if not waited.cancelled():
                    waited.exception()  # retrieved: no "never retrieved" warning for a wait given up
                return
            if waited.cancelled():
                outcome.cancel()
                return
            error = waited.exception()
            if error is not None:
                outcome.set_exception(error)
                return
            result = waited.result()
            if isinstance(result, WaitFailed):  # e.g. the session moved to another host: ask it directly
                asked = run_kept(self._later, self._ask_outcome(session, input_id))
                asked.add_done_callback(lambda done: _copy(done, outcome))
                return
            outcome.set_result(result)

        self._poller(name).wait(session, input_id).add_done_callback(settle)
        return outcome

    async def _ask_outcome(self, session: Session, input_id: str) -> TurnOutcome:
        asked: TurnOutcome = await self.transport.call(
            session.id, "wait_input", session.agent_key, input_id, TURN_WAIT_LIMIT
        )
        return asked

    async def turn_outcome(self, session: Session, input_id: str) -> TurnOutcome:
        """How the turn that admits ``input_id`` ended, delivered with the polls of its host."""
        await self.ready_agent(session.agent_key)
        name = self.transport.host_now(session.id) or await self.transport.host_of(session.id)
        # Shielded: the poller's future is shared by every waiter on this input, and a waiter that
        # gives up (an HTTP ``wait`` that timed out, a retried request) must not cancel it for the rest.
        outcome = await asyncio.shield(self._poller(name).wait(session, input_id))
        if isinstance(outcome, WaitFailed):  # e.g. the session moved to another host: ask it directly
            return await self._ask_outcome(session, input_id)
        return outcome

    def _poller(self, host: str) -> Poller:
        poller = self._pollers.get(host)
        if poller is None:
            poller = self._pollers[host] = Poller(self.transport, host)
        return poller

    def _contract_of(self, key: str) -> Contract | None:
        return next((agent.contract for agent_key, agent in self._agents.values() if agent_key == key), None)

    def _unsubscribe(self, subscription: Subscription) -> None:
        feed = self._feeds.pop(id(subscription), None)
        if feed is not None:
            feed.stop()
            return
        for poller in self._pollers.values():
            poller.remove(subscription)

    async def _close_pollers(self) -> None:
        for feed in self._feeds.values():
            feed.stop()
        self._feeds.clear()
        for poller in self._pollers.values():
            await poller.close()
        self._pollers.clear()

    async def __aenter__(self) -> Any:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Start serving sessions."""
        raise NotImplementedError

    async def close(self) -> None:
        """Stop what this runtime started."""
        raise NotImplementedError


def _copy(done: asyncio.Future[TurnOutcome], into: asyncio.Future[TurnOutcome]) -> None:
    """``into`` ends as ``done`` did (unless its caller gave up on it first)."""
    if into.done():  # given up
        if not done.cancelled():
            done.exception()
        return
    if done.cancelled():
        into.cancel()
    elif (error := done.exception()) is not None:
        into.set_exception(error)
    else:
        into.set_result(done.result())
