"""Properties of the reducer over random action sequences."""

from __future__ import annotations

import pickle
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator import SessionState, ToolPart, parse_state, resumable, session_reducer
from orchestrator.core.actions import ApplyPart, Send, SessionAction
from orchestrator.core.fold._common import apply_actions
from orchestrator.core.fold.turns import nest
from orchestrator.core.parts import AgentMessage
from orchestrator.core.stream import AgentStreamPart, MessageStart, TextDelta, ToolCall
from orchestrator.core.wire import pack, state_to_wire, unpack

from .strategies import action_lists, actions, call_ids, with_reset


def fold(actions_: Sequence[SessionAction], state: SessionState | None = None) -> SessionState:
    state = state or SessionState()
    for action in actions_:
        state = session_reducer(state, action)
    return state


def all_message_ids(messages: Sequence[AgentMessage]) -> list[list[str]]:
    """Message ids of every run in the tree, one list per run."""
    runs = [[m.id for m in messages]]
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolPart) and part.agent is not None:
                runs.extend(all_message_ids(part.agent.messages))
    return runs


@settings(max_examples=300, deadline=None)
@given(with_reset)
def test_never_raises_and_message_ids_stay_unique(actions_: list[SessionAction]) -> None:
    state = fold(actions_)
    for ids in all_message_ids(state.messages):
        assert len(ids) == len(set(ids))


@settings(max_examples=300, deadline=None)
@given(action_lists)
def test_resumable_is_idempotent(actions_: list[SessionAction]) -> None:
    messages = fold(actions_).messages
    once = resumable(messages)
    assert resumable(once) == once


@settings(max_examples=200, deadline=None)
@given(action_lists, st.lists(actions, max_size=20))
def test_a_state_round_tripped_through_msgpack_reduces_identically(
    before: list[SessionAction], after: list[SessionAction]
) -> None:
    state = fold(before)
    copy = parse_state(unpack(pack(state_to_wire(state))))
    assert copy == state
    assert state_to_wire(fold(after, copy)) == state_to_wire(fold(after, state))


@settings(max_examples=100, deadline=None)
@given(action_lists)
def test_a_state_round_tripped_through_pickle_is_equal(actions_: list[SessionAction]) -> None:
    state = fold(actions_)
    assert pickle.loads(pickle.dumps(state)) == state


@settings(max_examples=200, deadline=None)
@given(action_lists, actions)
def test_the_previous_state_is_never_mutated(actions_: list[SessionAction], last: SessionAction) -> None:
    state = fold(actions_)
    snapshot = state_to_wire(state)
    session_reducer(state, last)
    assert state_to_wire(state) == snapshot


class _Item:
    __slots__ = ("id", "n")

    def __init__(self, id: str, n: int) -> None:
        self.id = id
        self.n = n


_ops = st.lists(
    st.tuples(
        st.sampled_from(["append", "set", "set_last", "branch"]),
        st.integers(0, 40),
        st.sampled_from([f"m{i}" for i in range(12)]),
    ),
    max_size=120,
)


@given(_ops)
@settings(max_examples=200)
def test_index_of_id_agrees_with_a_scan_across_diverging_versions(ops: list[tuple[str, int, str]]) -> None:
    from orchestrator.core._pvec import PVec

    versions: list[PVec[_Item]] = [PVec()]
    for op, at, key in ops:  # ids stay unique within each version, as message ids do
        base = versions[at % len(versions)] if op == "branch" else versions[-1]
        present = [i.id for i in base]
        if op in ("append", "branch"):
            if key not in present:
                versions.append(base.append(_Item(key, at)))
            continue
        if not present:
            continue
        index = at % len(base) if op == "set" else len(base) - 1
        if key not in present or present.index(key) == index:
            replaced = base.set(index, _Item(key, at)) if op == "set" else base.set_last(_Item(key, at))
            versions.append(replaced)
    for vec in versions:
        items = list(vec)
        for key in {i.id for i in items} | {"absent"}:
            expected = next((i for i in range(len(items) - 1, -1, -1) if items[i].id == key), None)
            assert vec.index_of_id(key) == expected


@given(action_lists)
def test_the_trusted_nested_run_reader_matches_the_validating_parser(actions_: list[SessionAction]) -> None:
    from orchestrator.core.parts import NestedRun
    from orchestrator.core.stream import RunSnapshot
    from orchestrator.core.wire import parse_part, part_from_wire, part_to_wire

    state = fold(actions_)
    snapshot = RunSnapshot(NestedRun(state.messages, state.status, state.error))
    wire = unpack(pack(part_to_wire(snapshot)))
    assert part_from_wire(wire) == parse_part(wire) == snapshot


@given(action_lists, st.booleans(), call_ids, st.lists(actions, max_size=30))
@settings(max_examples=300)
def test_a_sub_agents_batch_applied_in_runs_is_the_batch_applied_one_by_one(
    before: list[SessionAction], open_call: bool, call_id: str, batch: list[SessionAction]
) -> None:
    """``apply_actions`` walks to a call once per run of parts; the result is the one-by-one fold."""
    if open_call:  # end on a running delegate call, and start a message in it: most of the batch lands there
        before = [*before, ApplyPart(MessageStart("m-9")), ApplyPart(ToolCall(call_id, "delegate_to_researcher", {}))]
        batch = [ApplyPart(MessageStart("n-9")), *batch]
    state = fold(before)
    nested = [nest(action, call_id) for action in batch]
    assert apply_actions(state, nested) == fold(nested, state)


def test_a_run_of_parts_to_one_call_lands_in_its_nested_run_in_order() -> None:
    state = fold(
        [
            Send("u-1", "hi"),
            ApplyPart(MessageStart("a-1")),
            ApplyPart(ToolCall("c-1", "delegate_to_researcher", {})),
        ]
    )
    parts: list[AgentStreamPart] = [MessageStart("n-1"), TextDelta("one "), TextDelta("two"), TextDelta(" three")]
    batch = [ApplyPart(part, ("c-1",)) for part in parts]
    applied = apply_actions(state, batch)
    assert applied == fold(batch, state)
    call = applied.messages[-1].parts[-1]
    assert isinstance(call, ToolPart) and call.agent is not None
    assert call.agent.messages[-1].text == "one two three"
