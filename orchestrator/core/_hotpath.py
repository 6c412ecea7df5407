"""The reducer's hot paths: a text delta appended at the end, and a nested change wrapped back up.

Nearly every stream part a session sees is a ``text-delta`` for the last text part of the last
(assistant) message, at the top level or inside a sub-agent's run, and the reducer runs once per
part for every session in the cluster. ``append_text`` builds that one case's next run directly:
no dispatch, no closures, no re-validation, each frozen value filled in a plain draft class and
sealed into its class (``orchestrator.core._fast``: plain stores instead of a descriptor call
per field), the text appended in place to the buffer its versions share, and the message vector
rebuilt without copying a tuple (``PVec`` keeps its last item apart for this). ``with_call_agent``
does the same for each level a nested run's change is wrapped back into (the delegate call, its
message, the enclosing run).

This module knows the private layouts of ``PVec``, ``TextPart`` and ``ToolPart`` (the reason it
is a module of its own). ``append_text`` declines, returning ``None``, whenever the case is not
exactly its own, and the general path in ``reducer.py`` handles the part; a property test checks
that both give equal states over random conversations.
"""

from __future__ import annotations

from typing import Any, TypeAlias, overload

from orchestrator.core._fast import check_draft
from orchestrator.core._json import JsonValue
from orchestrator.core._pvec import PVec
from orchestrator.core._rope import FLATTEN_CHUNKS, Rope, TextBuffer, lock_acquire, lock_release
from orchestrator.core.parts import AgentMessage, MessagePart, NestedRun, RunStatus, SessionError, TextPart, ToolPart
from orchestrator.core.state import SessionState
from orchestrator.core.stream import TextDelta

__all__ = ["append_text", "with_call_agent"]

Run: TypeAlias = SessionState | NestedRun

_new = object.__new__


class _TextDraft:
    __slots__ = ("_buf", "_size", "id")
    _buf: TextBuffer
    _size: int
    id: str


class _MessageDraft:
    __slots__ = ("id", "metadata", "parts", "revision", "role")
    id: str
    metadata: Any
    parts: tuple[MessagePart, ...]
    revision: int
    role: str


class _RunDraft:  # a SessionState or a NestedRun
    __slots__ = ("error", "messages", "status")
    error: SessionError | None
    messages: PVec[AgentMessage]
    status: RunStatus


class _ToolDraft:
    __slots__ = ("_input", "_input_text", "agent", "error", "id", "name", "output", "prompt", "state")
    _input: JsonValue
    _input_text: Rope | None
    agent: NestedRun | None
    error: str | None
    id: str
    name: str
    output: JsonValue
    prompt: str | None
    state: str


check_draft(_TextDraft, TextPart)
check_draft(_MessageDraft, AgentMessage)
check_draft(_RunDraft, SessionState)
check_draft(_RunDraft, NestedRun)
check_draft(_ToolDraft, ToolPart)


@overload
def append_text(run: SessionState, part: TextDelta) -> SessionState | None: ...


@overload
def append_text(run: NestedRun, part: TextDelta) -> NestedRun | None: ...


def append_text(run: Run, part: TextDelta) -> Run | None:
    """``run`` with ``part``'s delta appended to its last message's last text part, or ``None``.

    ``None`` (the general path decides) unless the delta is not empty, the last message is the one
    ``part`` addresses (``message_id`` ``None``: the last message, if an assistant's) and that
    message's last part is a text part.
    """
    delta = part.delta
    messages: PVec[AgentMessage] = run.messages
    size = messages._size
    if not delta or not size:
        return None
    last: AgentMessage = messages._last
    message_id = part.message_id
    if last.id != message_id if message_id is not None else last.role != "assistant":
        return None
    parts: tuple[MessagePart, ...] = last.parts
    text = parts[-1] if parts else None
    if type(text) is not TextPart:
        return None

    draft = _TextDraft()
    draft.id = text.id
    length = text._size
    buf = text._buf
    end = length + len(delta)
    lock_acquire()
    try:
        newest = length == buf._size
        if newest:  # TextBuffer.grow's usual case, written out
            buf._size = end
            chunks = buf._chunks
            if chunks is None:
                buf._chunks = [delta]
            else:
                chunks.append(delta)
                if end >= buf._flatten_at and len(chunks) >= FLATTEN_CHUNKS:
                    buf._flatten()
    finally:
        lock_release()
    draft._buf = buf if newest else buf.grow(length, delta)
    draft._size = end
    draft.__class__ = TextPart  # type: ignore[assignment]  # sealed
    new_text: TextPart = draft  # type: ignore[assignment]

    message = _MessageDraft()
    message.id = last.id
    message.role = last.role
    message.parts = (new_text,) if len(parts) == 1 else (*parts[:-1], new_text)
    message.revision = last.revision + 1
    message.metadata = last.metadata
    message.__class__ = AgentMessage  # type: ignore[assignment]  # sealed

    # PVec.set_last, written out; the id stays the same object, so the id map needs no entry.
    vec: PVec[AgentMessage] = _new(PVec)
    vec._size = size
    vec._shift = messages._shift
    vec._root = messages._root
    vec._tail = messages._tail
    vec._last = message
    vec._ids = messages._ids

    new_run = _RunDraft()
    new_run.messages = vec
    new_run.status = run.status
    new_run.error = run.error
    new_run.__class__ = type(run)  # type: ignore[assignment]  # sealed
    return new_run  # type: ignore[return-value]


def with_call_agent(
    run: Any, index: int, message: AgentMessage, at: int, call: ToolPart, agent: NestedRun, changes: int = 1
) -> Any:
    """``run`` with the call ``call`` (part ``at`` of ``message``, message ``index``) running ``agent``.

    ``ToolPart.with_agent``, ``revised`` and ``PVec.set`` in one: the message ``changes`` revisions
    on (one per change made to ``agent`` since ``call``), every other field kept.
    """
    draft = _ToolDraft()
    draft.id = call.id
    draft.name = call.name
    draft._input = call._input
    draft._input_text = call._input_text
    draft.state = call.state
    draft.output = call.output
    draft.error = call.error
    draft.prompt = call.prompt
    draft.agent = agent
    draft.__class__ = ToolPart  # type: ignore[assignment]  # sealed
    new_call: ToolPart = draft  # type: ignore[assignment]  # sealed above

    parts: tuple[MessagePart, ...] = message.parts
    new_message = _MessageDraft()
    new_message.id = message.id
    new_message.role = message.role
    if at == len(parts) - 1:
        new_message.parts = (new_call,) if at == 0 else (*parts[:-1], new_call)
    else:
        new_message.parts = (*parts[:at], new_call, *parts[at + 1 :])
    new_message.revision = message.revision + changes
    new_message.metadata = message.metadata
    new_message.__class__ = AgentMessage  # type: ignore[assignment]  # sealed

    messages: PVec[AgentMessage] = run.messages
    size = messages._size
    if index == size - 1:  # PVec.set_last, written out (the id is the same object)
        vec: PVec[AgentMessage] = _new(PVec)
        vec._size = size
        vec._shift = messages._shift
        vec._root = messages._root
        vec._tail = messages._tail
        vec._last = new_message
        vec._ids = messages._ids
    else:
        vec = messages.set(index, new_message)  # type: ignore[arg-type]

    new_run = _RunDraft()
    new_run.messages = vec
    new_run.status = run.status
    new_run.error = run.error
    new_run.__class__ = type(run)  # sealed
    return new_run
