"""The session state machine: ``session_reducer(state, action)`` and ``resumable(messages)``.

Pure and cheap. It runs once per stream part for every session in the cluster, so a part copies
only the path it changes (the message list is a persistent vector; a text part's text is a rope)
and no step of it grows with the length of the conversation on the streaming path.

Parts that refer to nothing never raise and never corrupt state: the reducer returns the state
it was given, unchanged (the same object), for

- a part addressed to a message id that is not in the run, or with no message id while the last
  message is not an assistant message (e.g. a ``text-delta`` before any ``message-start``);
- a ``tool-result`` or ``tool-error`` for a call id that is not in the run, or for a call that
  already has its final result (``done`` or ``error``: the first final result wins, later ones
  are duplicates of an at-least-once delivery);
- a ``tool-input-delta`` for a call whose complete input is already known;
- a ``message-start`` or ``send`` whose message id already exists (message ids stay unique);
- a ``within`` that names no tool call (or a path that does not lead to one);
- ``step-finish``, an empty delta, and a ``toolPhase`` that matches no open call or changes nothing.

A model or a network may send garbage; the conversation stays what it was.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeAlias, assert_never

from orchestrator.core._fast import slot_setter
from orchestrator.core._hotpath import append_text, with_call_agent
from orchestrator.core._pvec import PVec
from orchestrator.core.actions import ApplyPart, Reset, Retry, Send, SessionAction, Stop, ToolPhase, Within
from orchestrator.core.parts import (
    OPEN_TOOL_STATES,
    AgentMessage,
    CompactionPart,
    DataPart,
    MessagePart,
    NestedRun,
    ReasoningPart,
    TextPart,
    ToolPart,
    revised,
    settle_texts,
    with_metadata,
)
from orchestrator.core.state import SessionError, SessionState, make_state
from orchestrator.core.stream import (
    AgentStreamPart,
    CompactionUpdate,
    DataUpdate,
    Failure,
    Finish,
    MessageMetadata,
    MessageStart,
    Reasoning,
    RunSnapshot,
    StepFinish,
    TextDelta,
    ToolCall,
    ToolFailure,
    ToolInputDelta,
    ToolResult,
)

__all__ = ["CANCELLED_BY_ERROR", "CANCELLED_BY_USER", "apply_within", "resumable", "session_reducer"]

CANCELLED_BY_USER = "Cancelled by the user."
"""The error text of a call cancelled by a stop or an aborted finish."""
CANCELLED_BY_ERROR = "Cancelled: the run failed before the call finished."
"""The error text of a call cancelled because its run failed."""

Run: TypeAlias = SessionState | NestedRun
Messages: TypeAlias = PVec[AgentMessage]

_new = object.__new__
_set_nested_messages = slot_setter(NestedRun, "messages")
_set_nested_status = slot_setter(NestedRun, "status")
_set_nested_error = slot_setter(NestedRun, "error")


def _remake(run: Run, messages: Messages, status: Any, error: SessionError | None) -> Any:
    """A run of the same kind as ``run`` (a session or a nested run) with new fields."""
    if type(run) is SessionState:
        return make_state(messages, status, error)
    nested: NestedRun = _new(NestedRun)
    _set_nested_messages(nested, messages)
    _set_nested_status(nested, status)
    _set_nested_error(nested, error)
    return nested


def session_reducer(state: SessionState, action: SessionAction) -> SessionState:
    """The next state after ``action``; the same object when nothing changed.

    See the module docstring for what happens to parts that refer to nothing.
    """
    if type(action) is ApplyPart:
        if action.within is None:
            part = action.part
            if type(part) is TextDelta:
                appended = append_text(state, part)
                if appended is not None:
                    return appended
            result: SessionState = _apply(state, part)
            return result
        return apply_within(state, (action.part,), action.within)
    match action:
        case Send(id=message_id, text=text):
            if _index_of(state.messages, message_id) is not None:
                return state
            message = AgentMessage(message_id, "user", (TextPart(f"{message_id}:0", text),))
            return make_state(state.messages.append(message), "streaming", None)
        case ToolPhase():
            return _tool_phase(state, action)
        case Stop():
            settle_texts(state.messages)  # the reply ends here, as at a finish
            messages = _cancel_open(state.messages, CANCELLED_BY_USER, end_nested=True)
            if messages is state.messages and state.status == "idle":
                return state
            return make_state(messages, "idle", state.error)
        case Retry():
            if not any(m.role == "user" for m in reversed(state.messages)):
                return state
            return make_state(resumable(state.messages), "streaming", None)
        case Reset():
            return SessionState()
        case ApplyPart():  # pragma: no cover - handled above
            return state
        case _:
            assert_never(action)


# -- resumable ---------------------------------------------------------------------------------


def resumable(messages: Sequence[AgentMessage]) -> PVec[AgentMessage]:
    """What Retry sends: the conversation through the last finished tool call of the last turn.

    A call is finished when ``done`` or ``error``. Everything after that call goes: unfinished
    calls (dropped, not reported to the model as cancelled) and a reply cut short. With no finished
    call after the last user message, the result is the messages through that user message, so
    the turn starts over. Without any user message, ``messages`` comes back unchanged. Applying
    it twice gives the same result as once.
    """
    vec = messages if isinstance(messages, PVec) else PVec(messages)
    last_user = None
    for i in range(len(vec) - 1, -1, -1):
        if vec[i].role == "user":
            last_user = i
            break
    if last_user is None:
        return vec
    for i in range(len(vec) - 1, last_user, -1):
        message = vec[i]
        parts = message.parts
        for j in range(len(parts) - 1, -1, -1):
            part = parts[j]
            if type(part) is ToolPart and part.state in ("done", "error"):
                kept = vec.take(i + 1)
                if j == len(parts) - 1:
                    return kept
                return kept.set(i, revised(message, parts[: j + 1]))
    return vec.take(last_user + 1)


# -- top-level and nested application -----------------------------------------------------------


def _apply(run: Any, part: AgentStreamPart) -> Any:
    handler = _HANDLERS.get(type(part))
    if handler is None:
        return run
    return handler(run, part)


def apply_within(state: SessionState, parts: Sequence[AgentStreamPart], within: Within) -> SessionState:
    """``parts``, in order, each applied as ``ApplyPart(part, within)`` would be: the same state.

    The path to the delegate call is followed once, and the tree above the call rebuilt once, for
    all of them: a part applied inside a call's run changes nothing outside it, so every part
    would find the call where the first one did. (A sub-agent's batch is such a run of parts.)
    Each message on the path still moves one revision for every part that changed the run.
    """
    found = _find_call(state, within) if isinstance(within, str) else _follow(state, within)
    if found is None:
        return state
    _, _, _, _, call = found[0]
    run: Any = call.agent
    changes = 0
    for part in parts:
        applied = _apply(run if run is not None else NestedRun(), part)
        if applied is not run:
            changes += 1
            run = applied
    if not changes:
        return state
    for outer, index, message, at, call in found:
        run = with_call_agent(outer, index, message, at, call, run, changes)
    return run  # type: ignore[no-any-return]


_Frame: TypeAlias = tuple[Run, int, AgentMessage, int, ToolPart]
"""One level of a path to a delegate call: the run, the message's index, the message, the part's
index, the call. Paths are lists of frames, innermost first."""


def _find_call(run: Run, call_id: str) -> list[_Frame] | None:
    """The path to the tool call ``call_id`` anywhere in the tree, newest first."""
    messages = run.messages
    for mi in range(len(messages) - 1, -1, -1):
        message = messages.at(mi)
        parts = message.parts
        for pi in range(len(parts) - 1, -1, -1):
            part = parts[pi]
            if type(part) is not ToolPart:
                continue
            if part.id == call_id:
                return [(run, mi, message, pi, part)]
            if part.agent is not None:
                below = _find_call(part.agent, call_id)
                if below is not None:
                    below.append((run, mi, message, pi, part))
                    return below
    return None


def _follow(run: Run, ids: tuple[str, ...]) -> list[_Frame] | None:
    """The path along call ids ``ids``, each one inside the previous one's nested run."""
    path: list[_Frame] = []
    for call_id in ids:
        if path:
            call = path[-1][4]
            if call.agent is None:
                return None
            run = call.agent
        messages = run.messages
        last = messages.last
        if last is not None:  # the usual place first: the call the last message ends with
            parts = last.parts
            tail = parts[-1] if parts else None
            if type(tail) is ToolPart and tail.id == call_id:
                path.append((run, len(messages) - 1, last, len(parts) - 1, tail))
                continue
        found = _find_top_call(messages, call_id)
        if found is None:
            return None
        path.append((run, *found))
    path.reverse()
    return path or None


def _find_top_call(messages: Messages, call_id: str) -> tuple[int, AgentMessage, int, ToolPart] | None:
    """The newest top-level call ``call_id``: its message's index, the message, its part's index, it."""
    at = messages.at
    for mi in range(len(messages) - 1, -1, -1):
        message = at(mi)
        parts = message.parts
        for pi in range(len(parts) - 1, -1, -1):
            part = parts[pi]
            if type(part) is ToolPart and part.id == call_id:
                return mi, message, pi, part
    return None


# -- helpers -----------------------------------------------------------------------------------


def _put(messages: Messages, index: int, message: AgentMessage) -> Messages:
    if index == len(messages) - 1:
        return messages.set_last(message)
    return messages.set(index, message)


def _index_of(messages: Messages, message_id: str) -> int | None:
    return messages.index_of_id(message_id)


def _target(messages: Messages, message_id: str | None) -> int | None:
    """The index of the message a part addresses (see the module docstring)."""
    last = messages.last
    if last is None:
        return None
    if message_id is None or last.id == message_id:
        if message_id is None and last.role != "assistant":
            return None
        return len(messages) - 1
    return _index_of(messages, message_id)


def _with_part(
    run: Any, message_id: str | None, build: Callable[[AgentMessage], tuple[MessagePart, ...] | None]
) -> Any:
    """Replace the parts of the addressed message with ``build(message)`` (``None``: no change)."""
    messages: Messages = run.messages
    index = _target(messages, message_id)
    if index is None:
        return run
    message = messages[index]
    parts = build(message)
    if parts is None:
        return run
    return _remake(run, _put(messages, index, revised(message, parts)), run.status, run.error)


def _part_id(message: AgentMessage) -> str:
    return f"{message.id}:{len(message.parts)}"


def _find_part(parts: tuple[MessagePart, ...], kind: type, part_id: str) -> int | None:
    for j in range(len(parts) - 1, -1, -1):
        part = parts[j]
        if type(part) is kind and part.id == part_id:
            return j
    return None


def _update_call(run: Any, call_id: str, change: Callable[[ToolPart], ToolPart | None]) -> Any:
    """Apply ``change`` to the top-level call ``call_id`` of this run (newest first)."""
    messages: Messages = run.messages
    found = _find_top_call(messages, call_id)
    if found is None:
        return run
    mi, message, pi, call = found
    new_call = change(call)
    if new_call is None:
        return run
    parts = message.parts
    new_message = revised(message, (*parts[:pi], new_call, *parts[pi + 1 :]))
    return _remake(run, _put(messages, mi, new_message), run.status, run.error)


def _cancel_open(messages: Messages, reason: str, *, end_nested: bool) -> Messages:
    """Every open call in the tree becomes ``cancelled``; ``end_nested`` also idles nested runs."""
    result = messages
    for mi in range(len(messages) - 1, -1, -1):
        message = messages[mi]
        parts = message.parts
        new_parts: list[MessagePart] | None = None
        for pi, part in enumerate(parts):
            if type(part) is not ToolPart:
                continue
            new_part = part
            agent = part.agent
            if agent is not None:
                nested_messages = _cancel_open(agent.messages, reason, end_nested=end_nested)
                status = "idle" if end_nested and agent.status == "streaming" else agent.status
                if nested_messages is not agent.messages or status != agent.status:
                    new_part = new_part.replace(agent=_remake(agent, nested_messages, status, agent.error))
            if part.state in OPEN_TOOL_STATES:
                new_part = new_part.replace(state="cancelled", error=reason, prompt=None)
            if new_part is not part:
                if new_parts is None:
                    new_parts = list(parts)
                new_parts[pi] = new_part
        if new_parts is not None:
            result = result.set(mi, revised(message, tuple(new_parts)))
    return result


# -- stream part handlers: (run, part) -> run ------------------------------------------------------


def _on_message_start(run: Any, part: MessageStart) -> Any:
    messages: Messages = run.messages
    if _index_of(messages, part.message_id) is not None:
        return run
    message = AgentMessage(part.message_id, "assistant", (), 0, part.metadata)
    return _remake(run, messages.append(message), run.status, run.error)


def _on_text_delta(run: Any, part: TextDelta) -> Any:
    # The general case; the common one (appending to the last text part) is _hotpath.append_text.
    delta = part.delta
    messages: Messages = run.messages
    last = messages.last
    if not delta or last is None:
        return run
    message_id = part.message_id
    if message_id is None or last.id == message_id:
        if message_id is None and last.role != "assistant":
            return run
        index = len(messages) - 1
        message = last
    else:
        found = _index_of(messages, message_id)
        if found is None:
            return run
        index, message = found, messages[found]
    parts = message.parts
    tail = parts[-1] if parts else None
    if type(tail) is TextPart:
        new_parts: tuple[MessagePart, ...] = (*parts[:-1], tail.extended(delta))
    else:
        new_parts = (*parts, TextPart(_part_id(message), delta))
    return _remake(run, _put(messages, index, revised(message, new_parts)), run.status, run.error)


def _on_text_delta_fast(run: Any, part: TextDelta) -> Any:
    """A text delta in a nested run: the hot path when it applies, else the general one."""
    appended = append_text(run, part)
    return _on_text_delta(run, part) if appended is None else appended


def _on_reasoning(run: Any, part: Reasoning) -> Any:
    return _with_part(run, part.message_id, lambda m: (*m.parts, ReasoningPart(_part_id(m), part.text)))


def _on_tool_call(run: Any, part: ToolCall) -> Any:
    def build(message: AgentMessage) -> tuple[MessagePart, ...] | None:
        parts = message.parts
        j = _find_part(parts, ToolPart, part.id)
        if j is None:
            return (*parts, ToolPart(part.id, part.name, part.input))
        call = parts[j]
        assert type(call) is ToolPart
        if call.input_text is None:  # already complete: a duplicate
            return None
        completed = call.replace(input=part.input, name=part.name)
        return (*parts[:j], completed, *parts[j + 1 :])

    return _with_part(run, part.message_id, build)


def _on_tool_input_delta(run: Any, part: ToolInputDelta) -> Any:
    if not part.delta:
        return run

    def build(message: AgentMessage) -> tuple[MessagePart, ...] | None:
        parts = message.parts
        j = _find_part(parts, ToolPart, part.id)
        if j is None:
            return (*parts, ToolPart(part.id, part.name or "", input_text=part.delta))
        call = parts[j]
        assert type(call) is ToolPart
        if call.input_text is None or not call.is_open:
            return None
        return (*parts[:j], call.with_input_delta(part.delta), *parts[j + 1 :])

    return _with_part(run, part.message_id, build)


def _on_tool_result(run: Any, part: ToolResult) -> Any:
    def change(call: ToolPart) -> ToolPart | None:
        if call.state in ("done", "error"):
            return None
        if part.preliminary:
            return call.replace(output=part.output)
        return call.replace(state="done", output=part.output, error=None, prompt=None)

    return _update_call(run, part.id, change)


def _on_tool_error(run: Any, part: ToolFailure) -> Any:
    state = "cancelled" if part.is_cancelled else "error"

    def change(call: ToolPart) -> ToolPart | None:
        if call.state in ("done", "error"):
            return None
        return call.replace(state=state, error=part.error, prompt=None)

    return _update_call(run, part.id, change)


def _on_step_finish(run: Any, part: StepFinish) -> Any:
    return run


def _on_finish(run: Any, part: Finish) -> Any:
    messages: Messages = run.messages
    settle_texts(messages)  # the reply is complete: its texts held as one string each
    if part.reason == "aborted":
        messages = _cancel_open(messages, CANCELLED_BY_USER, end_nested=True)
    if messages is run.messages and run.status == "idle":
        return run
    return _remake(run, messages, "idle", run.error)


def _on_error(run: Any, part: Failure) -> Any:
    settle_texts(run.messages)
    messages = _cancel_open(run.messages, CANCELLED_BY_ERROR, end_nested=True)
    return _remake(run, messages, "error", SessionError(part.error, part.code))


def _on_metadata(run: Any, part: MessageMetadata) -> Any:
    messages: Messages = run.messages
    index = _target(messages, part.message_id)
    if index is None or not part.metadata:
        return run
    return _remake(run, _put(messages, index, with_metadata(messages[index], part.metadata)), run.status, run.error)


def _on_data(run: Any, part: DataUpdate) -> Any:
    def build(message: AgentMessage) -> tuple[MessagePart, ...]:
        parts = message.parts
        j = None if part.id is None else _find_part(parts, DataPart, part.id)
        if j is None:
            return (*parts, DataPart(part.id or _part_id(message), part.name, part.data))
        return (*parts[:j], DataPart(part.id or "", part.name, part.data), *parts[j + 1 :])

    return _with_part(run, part.message_id, build)


def _on_compaction(run: Any, part: CompactionUpdate) -> Any:
    def build(message: AgentMessage) -> tuple[MessagePart, ...] | None:
        parts = message.parts
        record = CompactionPart(
            part.id, part.status, part.summary, part.input_tokens, part.threshold_tokens, part.usage
        )
        j = _find_part(parts, CompactionPart, part.id)
        if j is None:
            return (*parts, record)
        if parts[j] == record:
            return None
        return (*parts[:j], record, *parts[j + 1 :])

    return _with_part(run, part.message_id, build)


def _on_snapshot(run: Any, part: RunSnapshot) -> Any:
    if type(run) is not NestedRun or run == part.run:
        return run
    return part.run


_HANDLERS: dict[type, Callable[[Any, Any], Any]] = {
    MessageStart: _on_message_start,
    TextDelta: _on_text_delta_fast,
    Reasoning: _on_reasoning,
    ToolCall: _on_tool_call,
    ToolInputDelta: _on_tool_input_delta,
    ToolResult: _on_tool_result,
    ToolFailure: _on_tool_error,
    StepFinish: _on_step_finish,
    Finish: _on_finish,
    Failure: _on_error,
    MessageMetadata: _on_metadata,
    DataUpdate: _on_data,
    CompactionUpdate: _on_compaction,
    RunSnapshot: _on_snapshot,
}


# -- toolPhase -------------------------------------------------------------------------------------


def _tool_phase(state: SessionState, action: ToolPhase) -> SessionState:
    path = _find_open_call(state.messages, action)
    if path is None:
        return state
    return _phase_at(state, path, 0, action)  # type: ignore[no-any-return]


def _find_open_call(messages: Messages, action: ToolPhase) -> list[tuple[int, int]] | None:
    """The newest open call matching ``action`` (nested calls are newer than their delegate)."""
    for mi in range(len(messages) - 1, -1, -1):
        parts = messages[mi].parts
        for pi in range(len(parts) - 1, -1, -1):
            part = parts[pi]
            if type(part) is not ToolPart:
                continue
            if part.agent is not None and part.agent.messages:
                below = _find_open_call(part.agent.messages, action)
                if below is not None:
                    return [(mi, pi), *below]
            matches = part.id == action.id if action.id is not None else part.name == action.name
            if matches and part.state in OPEN_TOOL_STATES:
                return [(mi, pi)]
    return None


def _phase_at(run: Any, path: list[tuple[int, int]], depth: int, action: ToolPhase) -> Any:
    mi, pi = path[depth]
    message = run.messages[mi]
    call = message.parts[pi]
    assert type(call) is ToolPart
    if depth + 1 == len(path):
        prompt = action.prompt if action.state == "awaiting-confirmation" else None
        if call.state == action.state and call.prompt == prompt:
            return run
        new_call = call.replace(state=action.state, prompt=prompt)
    else:
        assert call.agent is not None
        nested = _phase_at(call.agent, path, depth + 1, action)
        if nested is call.agent:
            return run
        new_call = call.replace(agent=nested)
    parts = message.parts
    new_message = revised(message, (*parts[:pi], new_call, *parts[pi + 1 :]))
    return _remake(run, _put(run.messages, mi, new_message), run.status, run.error)
