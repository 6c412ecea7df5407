"""A delegate call's child opens without reading the store when the call has just started it.

The call's ``ai.child.started`` is in the write that starts the call, and the child runs only
once that write is durable, so the first run of a child has an empty log: reading it (a trip to
a SQLite reader thread, ~0.2 ms of CPU) bought nothing on every delegation. A re-attach (the
parent recovered, its call running again) reads the child's log as before.
"""

from __future__ import annotations

from collections import Counter

from orchestrator.core.commands import SendInput
from orchestrator.core.events import Event
from orchestrator.models.base import ModelAdapter
from orchestrator.run.agent import Agent
from orchestrator.run.inprocess import LocalSessions
from orchestrator.store.base import Snapshot
from orchestrator.store.memory import MemoryStore
from orchestrator.testing import ScriptedModel
from tests.fixtures.agents import GatedModel

TIMEOUT = 10.0


def delegating_shop(researcher_model: ModelAdapter | None = None) -> Agent:
    """shop -> researcher: one delegate call, then a closing text."""
    researcher = Agent(
        "researcher", "Research.", researcher_model or ScriptedModel([[{"text": "4.99"}]], per_turn=True)
    )
    script = ScriptedModel(
        [[{"tool": "delegate_to_researcher", "input": {"task": "price a mug"}}], [{"text": "Done."}]], per_turn=True
    )
    return Agent("shop", "Shop.", script, agents=[researcher])


class CountingStore(MemoryStore):
    """A memory store that counts the reads of each session's log."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: Counter[str] = Counter()

    async def read(self, session_id: str, after: int = 0, limit: int | None = None) -> list[Event]:
        self.reads[session_id] += 1
        return await super().read(session_id, after, limit)

    async def load_snapshot(self, session_id: str, reducer: str) -> Snapshot | None:
        self.reads[session_id] += 1
        return await super().load_snapshot(session_id, reducer)


async def _one_turn(sessions: LocalSessions, agent: Agent) -> None:
    runner = await sessions.open("s", agent)
    await runner.submit(SendInput("in-1", "two mugs"))
    outcome = await runner.wait_input("in-1", timeout=TIMEOUT)
    assert outcome.outcome == "completed", outcome


async def test_a_delegate_calls_child_is_opened_without_reading_its_log() -> None:
    store = CountingStore()
    sessions = LocalSessions(store)
    try:
        await _one_turn(sessions, delegating_shop())
    finally:
        await sessions.close()
    [child] = [s.session_id for s in await store.list_sessions() if "/" in s.session_id]
    assert store.reads[child] == 0
    assert store.reads["s"] > 0  # a top-level session may have a log: it is read
    assert len(await store.read(child)) > 0  # and the child wrote its run


async def test_a_reattached_child_reads_its_log() -> None:
    """The parent's delegate call runs again after a crash: its child is not fresh any more."""
    store = CountingStore()
    held = GatedModel("looking ", "found: 4.99", name="held")
    sessions = LocalSessions(store)
    try:
        runner = await sessions.open("s", delegating_shop(held))
        await runner.submit(SendInput("in-1", "two mugs"))
        await held.gate.reached(TIMEOUT)
    finally:
        await sessions.close()  # a crash, as far as the log can tell
    [child] = [s.session_id for s in await store.list_sessions() if "/" in s.session_id]
    assert store.reads[child] == 0
    held.gate.open()
    again = LocalSessions(store)
    try:
        runner = await again.open("s", delegating_shop(held))
        outcome = await runner.wait_input("in-1", timeout=TIMEOUT)
        assert outcome.outcome == "completed", outcome
    finally:
        await again.close()
    assert store.reads[child] > 0
