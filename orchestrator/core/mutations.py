"""Mutations: what changed in a session between two states, for clients to merge.

A client keeps one linear copy of the conversation and merges mutations into it (seed
``build-a-chat-ui.md``): append text, reasoning and tool-input deltas to the current part,
replace a whole part by its id, replace a whole message by id and revision. Every mutation
carries the log ``index`` of the event that produced it, so a client that subscribed first and
then loaded a snapshot drops what the snapshot already holds.

``diff(before, after, index)`` derives mutations by comparing the two states by identity, which
structural sharing makes cheap: only the path a part touched differs. Nested runs (sub-agents)
are addressed by ``path``, the delegate call ids from the top level down.

``ClientView`` is the client side: it applies mutations to a local ``SessionState``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.core._pvec import PVec
from orchestrator.core.aistate import AIState, Interaction
from orchestrator.core.parts import AgentMessage, MessagePart, NestedRun, TextPart, ToolPart, revised, settle_texts
from orchestrator.core.state import SessionError, SessionState, make_state
from orchestrator.core.wire import (
    message_from_wire,
    message_part_from_wire,
    message_to_wire,
    part_to_wire_message,
    run_status_to_wire,
)

__all__ = ["ClientView", "Mutation", "diff", "info_of", "interaction_to_wire", "turn_of", "usage_of"]

Mutation = dict[str, Any]


def turn_of(state: AIState) -> dict[str, Any] | None:
    """The wire shape of the active turn (with its current model step)."""
    active = state.active
    if active is None:
        return None
    turn: dict[str, Any] = {
        "id": active.id,
        "input": list(active.input),
        "phase": active.phase,
        "messageId": active.message_id,
    }
    step = active.step
    if step is not None:
        turn["step"] = {
            "id": step.id,
            "status": step.status,
            "finishReason": step.finish_reason,
            "index": step.turn_step,
        }
    return turn


def interaction_to_wire(interaction: Interaction) -> dict[str, Any]:
    """An interaction on the wire: ``{id, callId, name, prompt, status, reason?}``."""
    out: dict[str, Any] = {
        "id": interaction.id,
        "callId": interaction.call_id,
        "name": interaction.name,
        "prompt": interaction.prompt,
        "status": interaction.status,
    }
    if interaction.reason is not None:
        out["reason"] = interaction.reason
    return out


def info_of(state: AIState) -> dict[str, Any]:
    """What ``session.info()`` reports: executing, paused, queued inputs, the active turn.

    ``indicator`` is ``AIState.indicator``: ``"compacting"`` while a compaction runs, else ``None``.
    """
    return {
        "executing": state.active is not None and state.active.phase not in ("paused",),
        "paused": state.inbox.paused,
        "queued": [
            {"id": i.id, "role": i.role, "text": i.text, "generate": i.generate, "afterStepOf": i.after_step_of}
            for i in state.inbox.items
        ],
        "turn": turn_of(state),
        "lastTurn": None if state.last_turn is None else {"id": state.last_turn[0], "outcome": state.last_turn[1]},
        "status": state.status,
        "indicator": state.indicator,
    }


def usage_of(state: AIState) -> dict[str, int]:
    """The session's token totals on the wire (``usage`` in the state JSON and the ``usage`` mutation)."""
    return {"inputTokens": state.usage.input_tokens, "outputTokens": state.usage.output_tokens}


def _totals(state: AIState) -> tuple[int, int]:
    return state.usage.input_tokens, state.usage.output_tokens


def diff(before: AIState, after: AIState, index: int) -> list[Mutation]:
    """The mutations that take a client from ``before`` to ``after`` (all stamped ``index``)."""
    out: list[Mutation] = []
    _diff_run(before.session, after.session, (), out)
    # Identity first: most events leave these values as they were (the same objects), and a
    # dataclass's ``!=`` builds a tuple of every field on each side before it compares.
    turn_changed = _changed(before.active, after.active) or _changed(before.last_turn, after.last_turn)
    info: dict[str, Any] | None = None
    if turn_changed:
        # The ``info`` that follows repeats the turn: both hold the same dicts (read-only, as
        # every mutation is), so a poll reply pickles them once and its reader unpickles one copy.
        info = info_of(after)
        out.append({"type": "turn", "turn": info["turn"], "lastTurn": info["lastTurn"]})
    if before.interactions is not after.interactions:
        for key, interaction in after.interactions.items():
            if before.interactions.get(key) != interaction:
                out.append({"type": "interaction", "interaction": interaction_to_wire(interaction)})
    if turn_changed or _changed(before.inbox, after.inbox) or before.indicator != after.indicator:
        out.append({"type": "info", "info": info if info is not None else info_of(after)})
    if before.app is not after.app and before.app != after.app:
        out.append({"type": "app", "app": dict(after.app)})
    if before.usage is not after.usage and _totals(before) != _totals(after):
        out.append({"type": "usage", "usage": usage_of(after)})
    for mutation in out:
        mutation["index"] = index
    return out


def _changed(old: object, new: object) -> bool:
    """``old != new``, answered by identity when they are the same object."""
    return old is not new and old != new


def _diff_run(
    old: SessionState | NestedRun, new: SessionState | NestedRun, path: tuple[str, ...], out: list[Mutation]
) -> None:
    if old is new:
        return
    # The messages first: a diff can span a whole write (a run's last text and its end), and a
    # client that sees the run end has its last text by then (and settles it: ``ClientView``).
    _diff_messages(old.messages, new.messages, path, out)
    if old.status != new.status or old.error != new.error:
        out.append({"type": "status", "path": list(path), **run_status_to_wire(new)})


def _diff_messages(
    old: PVec[AgentMessage], new: PVec[AgentMessage], path: tuple[str, ...], out: list[Mutation]
) -> None:
    if old is new:
        return
    n_old, n_new = len(old), len(new)
    start = min(n_old, n_new)
    # Walk back over the shared tail-changed region: messages change near the end.
    while start > 0 and new.at(start - 1) is not old.at(start - 1):
        start -= 1
    if n_new < n_old:
        out.append({"type": "truncate", "path": list(path), "length": n_new})
    for i in range(start, n_new):
        message = new.at(i)
        previous = old.at(i) if i < n_old else None
        if previous is None or previous.id != message.id:
            out.append({"type": "message", "path": list(path), "message": message_to_wire(message)})
        elif previous is not message:
            _diff_message(previous, message, path, out)


def _diff_message(old: AgentMessage, new: AgentMessage, path: tuple[str, ...], out: list[Mutation]) -> None:
    if len(new.parts) < len(old.parts) or new.metadata != old.metadata or new.role != old.role:
        out.append({"type": "message", "path": list(path), "message": message_to_wire(new)})
        return
    base = {"path": list(path), "messageId": new.id, "revision": new.revision}
    for j, part in enumerate(new.parts):
        previous = old.parts[j] if j < len(old.parts) else None
        if part is previous:
            continue
        if _text_grew(previous, part):
            assert type(part) is TextPart and type(previous) is TextPart
            delta = part.text_from(previous.length)
            out.append({"type": "delta", "kind": "text", "partId": part.id, "delta": delta, **base})
            continue
        if type(part) is ToolPart and type(previous) is ToolPart and previous.id == part.id:
            if _only_agent_changed(previous, part):
                assert part.agent is not None and previous.agent is not None
                _diff_nested(previous.agent, part.agent, (*path, part.id), new.revision, out)
                continue
            rope, old_rope = part.input_rope, previous.input_rope
            if (
                rope is not None
                and old_rope is not None
                and _same_but_input(previous, part)
                and len(rope) >= len(old_rope)
            ):
                delta = rope.tail(len(old_rope))
                out.append({"type": "delta", "kind": "tool_input", "partId": part.id, "delta": delta, **base})
                continue
            whole = part_to_wire_message(part, with_agent=previous.agent is None)
            out.append({"type": "part", "part": whole, **base})
            if previous.agent is not None and part.agent is not None and previous.agent is not part.agent:
                _diff_nested(previous.agent, part.agent, (*path, part.id), new.revision, out)
            continue
        out.append({"type": "part", "part": part_to_wire_message(part), **base})


def _diff_nested(old: NestedRun, new: NestedRun, path: tuple[str, ...], revision: int, out: list[Mutation]) -> None:
    """A nested run's mutations, each saying the revision its ancestors' messages end at (``above``).

    The fold counts a message's revision once per change under it, and one event can change a
    nested run several times over what a diff sends as one mutation (two batches' deltas of one
    text, a message with its first text): ``above`` lets a client end at the host's revision
    rather than count mutations. Outermost first; a deeper run's mutations get theirs in front.
    """
    mark = len(out)
    _diff_run(old, new, path, out)
    for mutation in out[mark:]:
        mutation["above"] = [revision, *mutation.get("above", ())]


def _text_grew(old: object, new: object) -> bool:
    return type(new) is TextPart and type(old) is TextPart and old.id == new.id and new.length >= old.length


def _only_agent_changed(old: ToolPart, new: ToolPart) -> bool:
    return (
        old.agent is not None
        and new.agent is not None
        and old.state == new.state
        and old.output == new.output
        and old.error == new.error
        and old.prompt == new.prompt
        and old.input_rope is new.input_rope
        and old.name == new.name
    )


def _same_but_input(old: ToolPart, new: ToolPart) -> bool:
    return old.state == new.state and old.agent is new.agent and old.output == new.output and old.name == new.name


# -- the client side -------------------------------------------------------------------------------------


@dataclass(slots=True)
class ClientView:
    """A client's copy of a session's conversation, kept current by mutations.

    Start it from a snapshot (``ClientView.of(state, index)``), then ``apply`` every mutation a
    subscription delivers: those whose index the snapshot already holds (``<= base``) are
    dropped, the rest are merged in order. ``index`` is the newest index merged.
    """

    state: SessionState = field(default_factory=SessionState)
    base: int = 0
    index: int = 0

    @classmethod
    def of(cls, state: SessionState, index: int) -> ClientView:
        """A view starting from a snapshot taken at ``index``."""
        return cls(state, index, index)

    def apply(self, mutation: Mapping[str, Any]) -> bool:
        """Merge one mutation; ``False`` when the snapshot already held it."""
        index = int(mutation.get("index", 0))
        if index <= self.base:
            return False
        self.state = _apply(self.state, mutation, list(mutation.get("path") or []))  # type: ignore[assignment]
        self.index = max(self.index, index)
        return True

    def apply_batch(self, mutations: Sequence[Mapping[str, Any]]) -> None:
        """Merge mutations in the order they were delivered."""
        for mutation in mutations:
            self.apply(mutation)


def _apply(run: SessionState | NestedRun, mutation: Mapping[str, Any], path: list[str]) -> SessionState | NestedRun:
    messages = run.messages
    if path:
        call_id = path[0]
        for mi in range(len(messages) - 1, -1, -1):
            message = messages.at(mi)
            for pi, part in enumerate(message.parts):
                if type(part) is ToolPart and part.id == call_id:
                    nested = part.agent if part.agent is not None else NestedRun()
                    changed = _apply(nested, mutation, path[1:])
                    assert isinstance(changed, NestedRun)
                    rebuilt = (*message.parts[:pi], part.with_agent(changed), *message.parts[pi + 1 :])
                    return _with(run, messages.set(mi, _above(message, rebuilt, mutation, path)))
        return run
    kind = mutation.get("type")
    if kind == "status":
        if mutation["status"] != "streaming":
            settle_texts(messages)  # the run's reply is complete (``parts.settle_texts``)
        error = mutation.get("error")
        session_error = None if error is None else SessionError(error["message"], error.get("code"))
        if isinstance(run, SessionState):
            return make_state(messages, mutation["status"], session_error)
        return NestedRun(messages, mutation["status"], session_error)
    if kind == "truncate":
        return _with(run, messages.take(int(mutation["length"])))
    if kind == "message":
        message = message_from_wire(mutation["message"])
        for mi in range(len(messages) - 1, -1, -1):
            if messages.at(mi).id == message.id:
                return _with(run, messages.set(mi, message))
        return _with(run, messages.append(message))
    if kind in ("delta", "part"):
        for mi in range(len(messages) - 1, -1, -1):
            message = messages.at(mi)
            if message.id != mutation["messageId"]:
                continue
            parts: list[MessagePart] = list(message.parts)
            if kind == "part":
                part = message_part_from_wire(mutation["part"])
                for j, existing in enumerate(parts):
                    if existing.id == part.id:
                        if type(part) is ToolPart and type(existing) is ToolPart and part.agent is None:
                            part = part.with_agent(existing.agent) if existing.agent is not None else part
                        parts[j] = part
                        break
                else:
                    parts.append(part)
            else:
                for j, existing in enumerate(parts):
                    if existing.id == mutation["partId"]:
                        if type(existing) is TextPart:
                            parts[j] = existing.extended(mutation["delta"])
                        elif type(existing) is ToolPart:
                            parts[j] = existing.with_input_delta(mutation["delta"])
                        break
                else:
                    if mutation.get("kind") == "text":
                        parts.append(TextPart(mutation["partId"], mutation["delta"]))
            revision = int(mutation.get("revision", message.revision))
            updated = AgentMessage(message.id, message.role, tuple(parts), revision, message.metadata)
            return _with(run, messages.set(mi, updated))
    return run


def _above(
    message: AgentMessage, parts: tuple[MessagePart, ...], mutation: Mapping[str, Any], path: list[str]
) -> AgentMessage:
    """An ancestor ``message`` of a nested change, at the revision the mutation says (``_diff_nested``)."""
    above = mutation.get("above")
    depth = len(mutation.get("path") or ()) - len(path)
    if not above or depth >= len(above):
        return revised(message, parts)  # from a host that does not say: count it
    return AgentMessage(message.id, message.role, parts, int(above[depth]), message.metadata)


def _with(run: SessionState | NestedRun, messages: PVec[AgentMessage]) -> SessionState | NestedRun:
    if isinstance(run, SessionState):
        return make_state(messages, run.status, run.error)
    return NestedRun(messages, run.status, run.error)
