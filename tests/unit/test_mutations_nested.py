"""A client that merges the mutations of a nested change ends at the host's state, revisions included.

The fold counts a message's revision once per change under it; one event can change a nested
run several times (two batches' deltas to one text, a message with its first text) where the
diff sends one mutation. Nested mutations say the revision their ancestors end at (``above``).
"""

from __future__ import annotations

from orchestrator.core.actions import ApplyPart, Send, SessionAction
from orchestrator.core.aistate import AIState
from orchestrator.core.mutations import ClientView, diff
from orchestrator.core.parts import ToolPart
from orchestrator.core.reducer import session_reducer
from orchestrator.core.state import SessionState
from orchestrator.core.stream import MessageStart, TextDelta, ToolCall
from orchestrator.core.wire import state_to_wire


def _fold(state: SessionState, *actions: SessionAction) -> SessionState:
    for action in actions:
        state = session_reducer(state, action)
    return state


BEFORE = _fold(
    SessionState(),
    Send("u-1", "Compare mug prices."),
    ApplyPart(MessageStart("a-1")),
    ApplyPart(ToolCall("call-1", "delegate_to_researcher", {"task": "t"})),
    ApplyPart(MessageStart("r-1"), "call-1"),
    ApplyPart(TextDelta("R000", "r-1"), "call-1"),
    ApplyPart(ToolCall("call-2", "delegate_to_pricer", {}), "call-1"),
    ApplyPart(MessageStart("p-1"), ("call-1", "call-2")),
)


def _merged(before: SessionState, after: SessionState) -> dict[str, object]:
    view = ClientView.of(before, 1)
    for mutation in diff(AIState().with_(session=before), AIState().with_(session=after), 2):
        assert view.apply(mutation)
    return state_to_wire(view.state)


def test_several_changes_to_a_nested_run_in_one_event() -> None:
    after = _fold(
        BEFORE,
        ApplyPart(TextDelta("R001", "r-1"), "call-1"),
        ApplyPart(TextDelta("R002", "r-1"), "call-1"),
        ApplyPart(MessageStart("r-2"), "call-1"),
        ApplyPart(TextDelta("S000", "r-2"), "call-1"),
    )
    assert _merged(BEFORE, after) == state_to_wire(after)


def test_several_changes_two_levels_deep_in_one_event() -> None:
    after = _fold(
        BEFORE,
        ApplyPart(TextDelta("P000", "p-1"), ("call-1", "call-2")),
        ApplyPart(TextDelta("P001", "p-1"), ("call-1", "call-2")),
        ApplyPart(TextDelta("R001", "r-1"), "call-1"),
    )
    assert _merged(BEFORE, after) == state_to_wire(after)


def test_nested_mutations_say_their_ancestors_revisions_outermost_first() -> None:
    after = _fold(BEFORE, ApplyPart(TextDelta("P000", "p-1"), ("call-1", "call-2")))
    (mutation,) = diff(AIState().with_(session=BEFORE), AIState().with_(session=after), 2)
    top = after.messages.at(len(after.messages) - 1)
    call = top.parts[-1]
    assert mutation["path"] == ["call-1", "call-2"]
    assert mutation["above"][0] == top.revision
    assert isinstance(call, ToolPart) and call.agent is not None
    assert mutation["above"][1] == call.agent.messages.at(0).revision
