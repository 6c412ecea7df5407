"""A sub-agent's batches stay typed from the child's fold to the parent's, and say the same as their wire form.

The parent folds a batch's actions as they are and its store encodes them once (the ``ai.nested``
event's wire dict); a batch that crosses processes (a pickle, as a Ray call makes) travels as
wire dicts and is typed again on arrival. Either way the parent's live state is the fold of its
stored log, and the stored payload is the one the wire form always gave.
"""

from __future__ import annotations

import pickle

from orchestrator.core import event_types as ai
from orchestrator.core._json import JsonObject, JsonValue
from orchestrator.core.events import Event
from orchestrator.core.fold import fold_events
from orchestrator.core.payloads import Nested, payload_from_wire, payload_to_wire
from orchestrator.core.wire import action_to_wire, message_to_wire, pack, unpack
from orchestrator.run.children import ChildBatch, ChildRequest, ChildResult, Deliver
from orchestrator.run.inprocess import LocalChildren
from orchestrator.run.runner import SessionRunner
from orchestrator.store import open_store
from orchestrator.store.base import EventStore
from tests.unit.test_runner import call, delegating_agents, turn


class RecordingChildren(LocalChildren):
    """In-process sub-agents whose batches are recorded, and pickled on the way when ``pickled``."""

    def __init__(self, store: EventStore, *, pickled: bool) -> None:
        super().__init__(store)
        self.pickled = pickled
        self.batches: list[ChildBatch] = []

    async def run(self, request: ChildRequest, deliver: Deliver) -> ChildResult:
        async def record(batch: ChildBatch) -> None:
            self.batches.append(batch)
            await deliver(pickle.loads(pickle.dumps(batch)) if self.pickled else batch)

        return await super().run(request, record)


async def delegate_once(pickled: bool) -> tuple[SessionRunner, RecordingChildren, EventStore]:
    store = open_store("memory://")
    children = RecordingChildren(store, pickled=pickled)
    runner = await SessionRunner.open(store, "s-1", delegating_agents(), children=children)
    assert await turn(runner, "u-1", "compare") == "completed"
    return runner, children, store


async def test_the_parents_live_state_is_the_fold_of_its_stored_log_typed_or_pickled() -> None:
    states = []
    for pickled in (False, True):
        runner, children, store = await delegate_once(pickled)
        try:
            assert children.batches, "the sub-agent sent batches"
            assert all(not isinstance(a, dict) for b in children.batches for a in b.actions)
            stored = await store.read("s-1")
            assert any(e.type == ai.NESTED for e in stored)
            assert fold_events(stored) == runner.state  # read back from dicts == folded typed
            research = call(runner.state, "delegate_to_researcher")
            assert research.agent is not None and research.agent.messages
            states.append([_content(message_to_wire(m)) for m in runner.state.messages])
        finally:
            await runner.close()
            await children.close()
    typed, pickled_ = states
    # The same conversation. (Not the same revisions: how many of a sub-agent's live batches a
    # parent applies before the final snapshot covers the rest depends on timing, and each
    # applied batch counts; a busy machine showed 4 against 7.)
    assert typed == pickled_


def _content(value: JsonValue) -> JsonValue:
    """``value`` without its ``revision`` counts, at every depth."""
    if isinstance(value, dict):
        return {k: _content(v) for k, v in value.items() if k != "revision"}
    if isinstance(value, list):
        return [_content(v) for v in value]
    return value


async def test_a_batch_pickles_as_wire_dicts_and_is_typed_again() -> None:
    runner, children, _ = await delegate_once(False)
    try:
        for batch in children.batches:
            wire = tuple(action_to_wire(a) for a in batch.actions)
            loaded = pickle.loads(pickle.dumps(batch))
            assert loaded == batch  # the typed actions
            assert loaded.wire == wire  # kept beside them: the store reuses it
            assert pickle.loads(pickle.dumps(loaded)).wire == wire
    finally:
        await runner.close()
        await children.close()


async def test_the_nested_event_stores_what_the_wire_form_always_stored() -> None:
    runner, children, _ = await delegate_once(False)
    try:
        for batch in children.batches:
            wire: list[JsonValue] = [action_to_wire(a) for a in batch.actions]
            old: JsonObject = {"callId": batch.call_id, "seq": batch.seq, "actions": wire}  # what was stored before
            typed = Event("", ai.NESTED, data=Nested(batch.call_id, batch.seq, batch.actions))
            assert typed.payload == old
            assert unpack(pack(typed.payload)) == old
            from_dict = Event("", ai.NESTED, old)  # how a stored event is read back
            assert from_dict.data == typed.data == payload_from_wire(ai.NESTED, old)
            assert payload_to_wire(Nested(batch.call_id, batch.seq, batch.actions)) == old
    finally:
        await runner.close()
        await children.close()
