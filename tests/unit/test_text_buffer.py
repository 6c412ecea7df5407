"""A text part's buffer keeps no list of pending appends when it has none (most never grow), nor once
its reply is finished."""

from __future__ import annotations

from orchestrator import (
    ApplyPart,
    Failure,
    Finish,
    MessageStart,
    Send,
    SessionState,
    Stop,
    TextDelta,
    ToolCall,
    session_reducer,
)
from orchestrator.core.actions import SessionAction
from orchestrator.core.mutations import ClientView
from orchestrator.core.parts import TextPart, ToolPart
from tests.unit.sizes import bytes_each


def test_a_text_that_never_grows_is_the_part_its_buffer_and_the_string() -> None:
    text = "x" * 40
    assert bytes_each(lambda: TextPart("m:0", text)) < 140  # with an empty list of appends: 176


def test_a_text_read_after_it_grew_keeps_no_list_of_appends() -> None:
    parts = [TextPart("m:0", "a")]
    for i in range(300):
        parts.append(parts[-1].extended(f"{i:03d}"))
    last = parts[-1]
    assert last.text == "a" + "".join(f"{i:03d}" for i in range(300))
    assert parts[100].text == last.text[:301]  # an older version reads its own length
    assert last.text_from(1) == last.text[1:]
    assert last._buf._chunks is None  # joined into one string once read, and the list let go
    assert bytes_each(lambda: last.extended("").text) < 16  # reading again copies nothing (8: the list slot)


def _reply(*end: SessionAction) -> SessionState:
    """A turn whose reply streamed in 40 deltas, with a delegate call whose sub-agent did too."""
    state = SessionState()
    actions: list[SessionAction] = [Send("u-1", "hi"), ApplyPart(MessageStart("a-1"))]
    actions += [ApplyPart(TextDelta(f"a{i} ")) for i in range(20)]
    actions += [ApplyPart(ToolCall("c-1", "delegate_to_researcher", {"task": "t"}))]
    actions += [ApplyPart(MessageStart("r-1"), "c-1")]
    actions += [ApplyPart(TextDelta(f"r{i} "), "c-1") for i in range(20)]
    for action in [*actions, *end]:
        state = session_reducer(state, action)
    return state


def _texts(state: SessionState) -> list[TextPart]:
    found: list[TextPart] = []
    for message in state.messages:
        for part in message.parts:
            if isinstance(part, TextPart):
                found.append(part)
            elif isinstance(part, ToolPart) and part.agent is not None:
                found += [p for m in part.agent.messages for p in m.parts if isinstance(p, TextPart)]
    return found


def test_a_streaming_reply_keeps_its_appends_pending() -> None:
    texts = _texts(_reply())
    assert texts[1]._buf._chunks is not None and texts[2]._buf._chunks is not None  # the next delta appends in place
    assert [t.text for t in texts] == ["hi", "".join(f"a{i} " for i in range(20)), "".join(f"r{i} " for i in range(20))]


def test_a_finished_failed_or_stopped_reply_holds_each_text_as_one_string_nested_runs_too() -> None:
    for end in (ApplyPart(Finish()), ApplyPart(Failure("boom")), Stop()):
        before = _texts(_reply())
        texts = _texts(_reply(end))
        assert [t.text for t in texts] == [t.text for t in before]  # the values are the same
        assert all(t._buf._chunks is None for t in texts), end  # ~50 bytes of header a delta, let go


def test_a_settled_text_reads_the_same_from_every_version_and_grows_again() -> None:
    parts = [TextPart("m:0", "a")]
    for i in range(30):
        parts.append(parts[-1].extended(f"{i:02d}"))
    parts[-1].settle()
    assert parts[-1]._buf._chunks is None
    assert parts[10].text == "a" + "".join(f"{i:02d}" for i in range(10))  # an older version: its own length
    grown = parts[-1].extended("z")
    assert grown.text == parts[-1].text + "z" and grown._buf is parts[-1]._buf  # still appended in place


def test_a_client_view_settles_a_reply_when_its_run_stops_streaming() -> None:
    opened = session_reducer(session_reducer(SessionState(), Send("u-1", "hi")), ApplyPart(MessageStart("a-1")))
    view = ClientView.of(opened, 0)
    delta = {"type": "delta", "kind": "text", "messageId": "a-1", "partId": "a-1:0"}
    view.apply_batch([{**delta, "delta": f"a{i} ", "index": 1 + i} for i in range(20)])
    assert _texts(view.state)[1]._buf._chunks is not None
    view.apply({"type": "status", "status": "idle", "index": 21})
    assert _texts(view.state)[1]._buf._chunks is None
    assert _texts(view.state)[1].text == "".join(f"a{i} " for i in range(20))
