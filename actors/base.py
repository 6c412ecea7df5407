"""What the Ray runtime and the in-process runtime share: sessions, agents, subscriptions."""

from __future__ import annotations

import asyncio
from typing import Any

from actors.client import Poller, Session, Subscription
from actors.host import TURN_WAIT_LIMIT
from actors.hub import WaitFailed
from actors.registry import agent_blob
from actors.transport import Transport
from orchestrator.core.errors import UsageError
from orchestrator.core.turn import TurnOutcome
from orchestrator.run.agent import Agent
from orchestrator.store.base import EventStore

__all__ = ["BaseRuntime"]


class BaseRuntime:
    """Hands out ``Session`` handles over a ``Transport`` (see ``Runtime`` and ``LocalRuntime``)."""

    transport: Transport
    store: EventStore

    def __init__(self) -> None:
        self._agents: dict[int, tuple[str, bytes, Agent]] = {}
        self._registered: set[str] = set()
        self._pollers: dict[str, Poller] = {}
        self._later: set[asyncio.Future[None]] = set()

    def session(self, session_id: str, *, agent: Agent) -> Session:
        """A handle on session ``session_id`` running ``agent`` (created on its first command)."""
        if not isinstance(agent, Agent):
            raise UsageError(f"rt.session(..., agent=...) needs an Agent, got {type(agent).__name__}")
        known = self._agents.get(id(agent))
        if known is None:
            key, data = agent_blob(agent)
            known = self._agents[id(agent)] = (key, data, agent)
        return Session(self, session_id, known[0])

    async def _ready_agent(self, key: str) -> None:
        if key in self._registered:
            return
        for agent_key, data, _ in self._agents.values():
            if agent_key == key:
                await self.transport.register_agent(key, data)
                self._registered.add(key)
                return

    def _subscribe(self, session: Session) -> Subscription:
        name = self.transport.host_now(session.id)
        subscription = Subscription(session, self._unsubscribe)
        if name is None:
            self._later.add(asyncio.ensure_future(self._subscribe_later(session, subscription)))
        else:
            self._poller(name).add(subscription)
        return subscription

    async def _subscribe_later(self, session: Session, subscription: Subscription) -> None:
        name = await self.transport.host_of(session.id)
        self._poller(name).add(subscription)

    async def _turn_outcome(self, session: Session, input_id: str) -> TurnOutcome:
        """How the turn that admits ``input_id`` ended, delivered with the polls of its host."""
        await self._ready_agent(session.agent_key)
        name = self.transport.host_now(session.id) or await self.transport.host_of(session.id)
        outcome = await self._poller(name).wait(session, input_id)
        if isinstance(outcome, WaitFailed):  # e.g. the session moved to another host: ask it directly
            outcome = await session._call("wait_input", input_id, TURN_WAIT_LIMIT)
        return outcome

    def _poller(self, host: str) -> Poller:
        poller = self._pollers.get(host)
        if poller is None:
            poller = self._pollers[host] = Poller(self, host)
        return poller

    def _unsubscribe(self, subscription: Subscription) -> None:
        for poller in self._pollers.values():
            poller.remove(subscription)

    async def _close_pollers(self) -> None:
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
