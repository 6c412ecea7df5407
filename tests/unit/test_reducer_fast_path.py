"""The reducer's hot paths (orchestrator/core/_hotpath.py) give what its general path gives.

The reference below applies every part through the general handlers and rebuilds nested runs with
the general helpers (``ToolPart.with_agent``, ``revised``, ``PVec.set``): the code paths the fast
ones replace. Over random conversations full of text deltas (top level and nested, addressed by
a call id or by a path), both must give equal states, the same wire form (revisions, part ids)
and the same client mutations.
"""

from __future__ import annotations

import pickle
from dataclasses import FrozenInstanceError, dataclass, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator import (
    ApplyPart,
    MessageStart,
    NestedRun,
    Send,
    SessionState,
    TextDelta,
    TextPart,
    ToolCall,
    session_reducer,
)
from orchestrator.core import fold as fold_module
from orchestrator.core import reducer
from orchestrator.core._fast import check_draft, replacer
from orchestrator.core._hotpath import append_text
from orchestrator.core._pvec import PVec
from orchestrator.core.actions import SessionAction
from orchestrator.core.aistate import ToolRecord, changed
from orchestrator.core.fold import initial_state
from orchestrator.core.mutations import _diff_run
from orchestrator.core.parts import AgentMessage, ToolPart, revised
from orchestrator.core.payloads import PAYLOAD_CLASSES
from orchestrator.core.wire import state_to_wire

from .strategies import actions, message_ids, stream_parts, texts

_KINDS = ["start", "delta", "delta", "delta", "delta", "delta", "call", "part", "noise"]
_mostly_last = st.one_of(st.none(), st.none(), st.none(), message_ids)  # None: the last message


@st.composite
def conversations(draw: st.DrawFn) -> list[SessionAction]:
    """Mostly text deltas, at the top level and into delegate calls opened along the way.

    Parts go to a known call (by its path or by its id) often enough that nested runs grow
    several levels deep, and other parts and actions come in between (messages with several
    parts, a delta for a message that is not the last, a stop, a retry...).
    """
    out: list[SessionAction] = [Send("u-1", "hi")]
    paths: list[tuple[str, ...]] = [()]
    for n in range(draw(st.integers(0, 80))):
        path = draw(st.sampled_from(paths))
        within = (path if draw(st.booleans()) else path[-1]) if path else None
        kind = draw(st.sampled_from(_KINDS))
        if kind == "start":
            out.append(ApplyPart(MessageStart(draw(message_ids)), within))
        elif kind == "delta":
            out.append(ApplyPart(TextDelta(draw(texts), draw(_mostly_last)), within))
        elif kind == "call":
            call_id = f"c-{n}"
            out.append(ApplyPart(ToolCall(call_id, "delegate_to_helper", {}, draw(_mostly_last)), within))
            paths.append((*path, call_id))
        elif kind == "part":
            out.append(ApplyPart(draw(stream_parts), within))
        else:
            out.append(draw(actions))
    return out


def _general_apply(run: Any, part: Any) -> Any:
    if type(part) is TextDelta:
        return reducer._on_text_delta(run, part)
    return reducer._apply(run, part)


def _general_rebuild(run: Any, index: int, message: AgentMessage, at: int, call: ToolPart, agent: NestedRun) -> Any:
    parts = message.parts
    new_message = revised(message, (*parts[:at], call.with_agent(agent), *parts[at + 1 :]))
    messages: PVec[AgentMessage] = run.messages
    return reducer._remake(run, messages.set(index, new_message), run.status, run.error)


def general_reducer(state: SessionState, action: SessionAction) -> SessionState:
    """``session_reducer`` without its hot paths."""
    if type(action) is not ApplyPart:
        return session_reducer(state, action)
    if action.within is None:
        result: SessionState = _general_apply(state, action.part)
        return result
    within = action.within
    found = reducer._find_call(state, within) if isinstance(within, str) else reducer._follow(state, within)
    if found is None:
        return state
    call = found[0][4]
    nested = call.agent
    run = _general_apply(nested if nested is not None else NestedRun(), action.part)
    if run is nested:
        return state
    for outer, index, message, at, call in found:
        run = _general_rebuild(outer, index, message, at, call, run)
    return run  # type: ignore[no-any-return]


def _mutations(before: SessionState, after: SessionState) -> list[Any]:
    out: list[Any] = []
    _diff_run(before, after, (), out)
    return out


@settings(max_examples=400, deadline=None)
@given(conversations())
def test_the_hot_paths_agree_with_the_general_path(actions_: list[SessionAction]) -> None:
    fast = general = SessionState()
    for action in actions_:
        next_fast = session_reducer(fast, action)
        next_general = general_reducer(general, action)
        assert next_fast == next_general
        assert state_to_wire(next_fast) == state_to_wire(next_general)
        assert _mutations(fast, next_fast) == _mutations(general, next_general)
        assert (next_fast is fast) == (next_general is general)
        fast, general = next_fast, next_general
    for message in fast.messages:  # the message vector the fast path built still finds every id
        assert fast.messages.index_of_id(message.id) == general.messages.index_of_id(message.id)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), texts), max_size=40))
def test_appending_to_an_older_version_leaves_the_newer_ones_alone(steps: list[tuple[int, str]]) -> None:
    """Versions share a text buffer; a delta applied to an old state branches instead of appending."""
    start = session_reducer(SessionState(), ApplyPart(MessageStart("a-1")))
    start = session_reducer(start, ApplyPart(TextDelta("x")))
    versions = [start]
    expected = ["x"]
    for back, delta in steps:
        i = max(len(versions) - 1 - back, 0)
        versions.append(session_reducer(versions[i], ApplyPart(TextDelta(delta))))
        expected.append(expected[i] + delta)
    for state, text in zip(versions, expected, strict=True):
        part = state.messages[-1].parts[-1]
        assert isinstance(part, TextPart)
        assert part.text == text
        assert part.length == len(text)


def test_the_fast_path_declines_what_is_not_its_case() -> None:
    state = session_reducer(SessionState(), ApplyPart(MessageStart("a-1")))
    assert append_text(state, TextDelta("hi")) is None  # no text part yet: the general path adds one
    state = session_reducer(state, ApplyPart(TextDelta("hi")))
    assert append_text(state, TextDelta("")) is None
    assert append_text(state, TextDelta("x", "other")) is None
    assert append_text(SessionState(), TextDelta("x")) is None
    grown = append_text(state, TextDelta(" there", "a-1"))
    assert grown is not None
    assert grown.messages[-1].text == "hi there"
    assert grown.messages[-1].revision == state.messages[-1].revision + 1
    assert state.messages[-1].text == "hi"


def test_values_the_hot_paths_build_are_the_real_frozen_classes() -> None:
    state = session_reducer(SessionState(), Send("u-1", "hi"))
    state = session_reducer(state, ApplyPart(MessageStart("a-1")))
    state = session_reducer(state, ApplyPart(ToolCall("c-1", "delegate_to_helper", {})))
    state = session_reducer(state, ApplyPart(MessageStart("n-1"), "c-1"))
    for _ in range(2):
        state = session_reducer(state, ApplyPart(TextDelta("x"), "c-1"))
    state = session_reducer(state, ApplyPart(MessageStart("a-2")))
    for _ in range(2):
        state = session_reducer(state, ApplyPart(TextDelta("y")))
    call = state.messages[1].parts[0]
    assert type(state) is SessionState and type(call) is ToolPart and type(call.agent) is NestedRun
    text = state.messages[-1].parts[-1]
    assert type(state.messages[-1]) is AgentMessage and type(text) is TextPart
    with pytest.raises(AttributeError):
        state.status = "idle"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        state.messages[-1].revision = 0  # type: ignore[misc]
    with pytest.raises(AttributeError):
        text.id = "x"
    with pytest.raises(AttributeError):
        call.agent = None
    with pytest.raises(AttributeError):
        call.agent.status = "idle"  # type: ignore[misc,union-attr]
    assert pickle.loads(pickle.dumps(state)) == state


def test_a_draft_must_match_its_class() -> None:
    class Short:
        __slots__ = ("id", "role")

    class Exact:
        __slots__ = ("error", "messages", "status")

    with pytest.raises(TypeError, match="slots of AgentMessage"):
        check_draft(Short, AgentMessage)
    check_draft(Exact, SessionState)


@dataclass(frozen=True, slots=True)
class _Point:
    x: int
    y: int = 0
    label: str = ""


@dataclass(frozen=True, slots=True)
class _Checked:
    x: int

    def __post_init__(self) -> None:
        if self.x < 0:
            raise ValueError("x must not be negative")


def test_a_replacer_copies_like_dataclasses_replace() -> None:
    point = _Point(1, 2, "a")
    moved = replacer(_Point)(point, y=5)
    assert moved == replace(point, y=5) == _Point(1, 5, "a")
    assert type(moved) is _Point and point == _Point(1, 2, "a")  # the original is untouched
    with pytest.raises(FrozenInstanceError):
        moved.x = 3  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(moved)) == moved
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        replacer(_Point)(point, z=1)
    # A class that checks its values in __post_init__ keeps dataclasses.replace (which runs the check).
    with pytest.raises(TypeError, match="__post_init__"):
        replacer(_Checked)


def test_changed_copies_every_fold_value_and_the_fold_knows_every_payload() -> None:
    state = initial_state(None)
    assert state.with_(turns=3) == replace(state, turns=3)
    record = ToolRecord("call-1", "add_to_cart", "turn-1")
    assert changed(record, status="done") == replace(record, status="done")
    with pytest.raises(KeyError):
        changed(_Point(1), x=2)  # only the fold's own values have a replacer
    assert set(fold_module._HANDLERS) == set(PAYLOAD_CLASSES.values())
