"""Logs written before payloads were typed replay, on every backend, to the state they folded to then.

The fixtures are raw logs in the wire shape of commit 4714016 (before ``orchestrator.core.payloads``):
``log_v1_runner.json`` is a 3-turn session the engine wrote (a tool call, an approval, a pause,
an edit and a move of queued inputs, a failing step); ``log_v1_every_type.json`` is written by
hand to hold every built-in event type (nested batches, a duplicate one, a reset and an
interrupted call, a compaction, a superseded step with a late part, a handoff, a retry, a stop,
an app event). Each was folded by that commit's code; its ``messages`` (the session's wire
state) and ``state`` (every other field of ``AIState``, as plain data) are what these tests expect.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from orchestrator.core.aistate import AIState
from orchestrator.core.events import Event
from orchestrator.core.fold import fold_events
from orchestrator.core.payloads import payload_to_wire
from orchestrator.core.wire import state_to_wire
from orchestrator.store import EventStore
from orchestrator.store._codec import json_equal

FIXTURES = Path(__file__).parent / "fixtures"


def _dump(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _dump(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _dump(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_dump(v) for v in value]
    return value


ADDED_SINCE: dict[str, Any] = {"model_metadata": {}}
"""Fields ``AIState`` gained after the fixtures were recorded, and the value an old log folds them to."""
TOOL_RECORD_ADDED_SINCE: dict[str, Any] = {"recovery": None}
"""Fields ``ToolRecord`` gained after the fixtures were recorded (an old ``ai.tool.started`` sets none)."""


def _summary(state: AIState) -> dict[str, Any]:
    """What the fixture recorded: every field but the session (compared as wire) and pending's payloads."""
    fields = {f.name: _dump(getattr(state, f.name)) for f in dataclasses.fields(state)}
    del fields["session"]
    fields["pending"] = sorted(state.pending)
    for name, default in ADDED_SINCE.items():
        assert fields.pop(name) == default, name  # an old log holds none of the events that set it
    for record in fields["tools"].values():
        for name, default in TOOL_RECORD_ADDED_SINCE.items():
            assert record.pop(name) == default, name
    return fields


@pytest.mark.parametrize("name", ["log_v1_runner", "log_v1_every_type"])
async def test_an_old_log_folds_to_the_state_it_folded_to_before(store: EventStore, name: str) -> None:
    fixture = json.loads((FIXTURES / f"{name}.json").read_text())
    raw = fixture["events"]
    events = [Event(e["id"], e["type"], e["payload"], e["at"]) for e in raw]
    await store.append("old", events, expected_index=0)

    stored = await store.read("old")
    assert [e.payload for e in stored] == [e["payload"] for e in raw]  # stored as written
    state = fold_events(stored)
    assert state_to_wire(state.session) == fixture["messages"]
    summary, recorded = _summary(state), fixture["state"]
    # A field AIState gained after the fixture was recorded (due_handlers) folds an old log to its default.
    added = set(summary) - set(recorded)
    assert {k: summary[k] for k in added} == {k: _dump(getattr(AIState(), k)) for k in added}
    assert {k: v for k, v in summary.items() if k not in added} == recorded


@pytest.mark.parametrize("name", ["log_v1_runner", "log_v1_every_type"])
def test_the_typed_payloads_of_an_old_log_encode_to_its_wire_shape(name: str) -> None:
    """The typed payload of every event encodes back to what the old log holds.

    Exactly, except that a field an older writer left out comes back with its default (one
    hand-written ``ai.step.started`` has no ``attempt``, as logs from before attempts had none).
    """
    for e in json.loads((FIXTURES / f"{name}.json").read_text())["events"]:
        event = Event(e["id"], e["type"], e["payload"], e["at"])
        if event.data is None:
            continue
        encoded = payload_to_wire(event.data)
        old = e["payload"]
        added = set(encoded) - set(old)
        assert added <= ({"attempt"} if e["type"] == "ai.step.started" else set()), e
        assert json_equal({k: v for k, v in encoded.items() if k not in added}, old), e
