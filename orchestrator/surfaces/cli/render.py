"""How the ``troupe`` command line draws a conversation, turn results and event logs (rich).

Everything here is a pure function from values to a rich renderable: no I/O, no clock, nothing
that needs Ray. ``run``, ``chat``, ``sessions show`` and ``sessions replay`` all draw with
``render_conversation``; the tests render to ``Console(record=True)`` and read the text back.

A conversation looks like this (colours aside)::

    user
      Add two mugs.
    assistant
      Adding them now.
      ⚙ add_to_cart {"slug": "mug", "qty": 2} → Added.  ✓ done
      ⚙ delegate_to_researcher {"task": "compare mug prices"} → Mugs cost $4.99.  ✓ done
          task
            compare mug prices
          researcher
            ⚙ lookup_price {"slug": "mug"} → 4.99  ✓ done
            Mugs cost $4.99.
      Done: two mugs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Final

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from orchestrator.core._json import JsonValue
from orchestrator.core.events import Event
from orchestrator.core.parts import AgentMessage, CompactionPart, DataPart, ReasoningPart, TextPart, ToolPart
from orchestrator.core.state import SessionError
from orchestrator.core.turn import TurnOutcome
from orchestrator.run.agent import DELEGATE_PREFIX

__all__ = [
    "TOOL_STATES",
    "event_summary",
    "one_line",
    "render_conversation",
    "render_events",
    "render_results",
    "render_tool",
]

TOOL_STATES: Final[Mapping[str, tuple[str, str]]] = {
    "running": ("⋯ running", "cyan"),
    "awaiting-confirmation": ("? awaiting approval", "yellow"),
    "done": ("✓ done", "green"),
    "error": ("✗ error", "red"),
    "cancelled": ("⊘ cancelled", "magenta"),
}
"""Each tool state's marker and colour."""

_ROLE_STYLES: Final = {"user": "bold cyan", "assistant": "bold magenta", "system": "bold white"}
_INDENT: Final = 2
_NESTED_INDENT: Final = 4


def one_line(value: str, limit: int) -> str:
    """``value`` on one line, cut to ``limit`` characters with an ellipsis."""
    flat = " ".join(value.split())
    return flat if len(flat) <= limit else flat[: max(limit - 1, 0)] + "…"


def _json(value: JsonValue) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _shown(value: JsonValue, limit: int) -> str:
    return one_line(value if isinstance(value, str) else _json(value), limit)


def render_conversation(
    messages: Iterable[AgentMessage],
    *,
    error: SessionError | None = None,
    assistant: str = "assistant",
    max_output: int = 160,
) -> RenderableType:
    """The conversation: a heading per message, its parts under it, sub-agents under their calls.

    Args:
        messages: the conversation (``SessionState.messages``, or a slice of it).
        error: the run's failure, drawn in red after the messages.
        assistant: the heading for assistant messages (a sub-agent's runs use the agent's name).
        max_output: how much of a tool's input and output to show on its line.
    """
    rows: list[RenderableType] = []
    for message in messages:
        label = assistant if message.role == "assistant" else message.role
        rows.append(Text(label, style=_ROLE_STYLES.get(message.role, "bold")))
        body = [row for part in message.parts for row in _part(part, max_output)]
        if body:
            rows.append(Padding(Group(*body), (0, 0, 0, _INDENT)))
    if error is not None:
        rows.append(_error_line(error))
    return Group(*rows)


def _error_line(error: SessionError) -> Text:
    code = f" ({error.code})" if error.code else ""
    return Text(f"✗ {error.message}{code}", style="bold red")


def _part(part: object, max_output: int) -> list[RenderableType]:
    if isinstance(part, TextPart):
        text = part.text
        return [Text(text)] if text else []
    if isinstance(part, ReasoningPart):
        return [Text(part.text, style="dim italic")] if part.text else []
    if isinstance(part, ToolPart):
        return render_tool(part, max_output=max_output)
    if isinstance(part, CompactionPart):
        return [Text(f"⟲ context compaction: {part.status}", style="dim")]
    if isinstance(part, DataPart):
        return [Text(f"▣ {part.name} {_shown(part.data, max_output)}", style="blue")]
    return [Text(repr(part), style="dim")]  # pragma: no cover - every part type is handled above


def render_tool(part: ToolPart, *, max_output: int = 160) -> list[RenderableType]:
    """A tool call's line (name, input, result, state), then its prompt and its sub-agent's run."""
    marker, color = TOOL_STATES.get(part.state, (part.state, "white"))
    streaming = part.input_text
    arguments = one_line(streaming, max_output) if streaming is not None else _shown(part.input, max_output)
    line = Text.assemble(("⚙ ", color), (part.name, "bold"), " ", (arguments, "dim"))
    if part.state == "done" or (part.state == "running" and part.output is not None):
        # A sub-agent's answer is drawn in full below the call: its line needs only the start.
        limit = min(max_output, 48) if part.agent is not None else max_output
        line.append(f" → {_shown(part.output, limit)}")
    line.append(f"  {marker}", style=color)
    if part.state in ("error", "cancelled") and part.error:
        line.append(f": {one_line(part.error, max_output)}", style=color)
    if part.state == "error":
        line.stylize("red")
    rows: list[RenderableType] = [line]
    if part.state == "awaiting-confirmation":
        rows.append(Text(f"  ⚠ {part.prompt or f'Run {part.name}?'}", style="bold yellow"))
    run = part.agent
    if run is not None:
        name = part.name.removeprefix(DELEGATE_PREFIX) if part.name.startswith(DELEGATE_PREFIX) else part.name
        nested: list[RenderableType] = [_nested_messages(run.messages, name, max_output)]
        if run.status == "error" and run.error is not None:
            nested.append(_error_line(run.error))
        rows.append(Padding(Group(*nested), (0, 0, 0, _NESTED_INDENT)))
    return rows


def _nested_messages(messages: Sequence[AgentMessage], agent: str, max_output: int) -> RenderableType:
    # A sub-agent's first user message is the task its parent gave it: label it so.
    rows: list[RenderableType] = []
    for i, message in enumerate(messages):
        if message.role == "user" and i == 0:
            rows.append(Text("task", style="bold cyan"))
            body = [row for part in message.parts for row in _part(part, max_output)]
            rows.append(Padding(Group(*body), (0, 0, 0, _INDENT)))
        else:
            rows.append(render_conversation([message], assistant=agent, max_output=max_output))
    return Group(*rows)


def render_results(results: Sequence[tuple[str, int, TurnOutcome]], *, width: int = 60) -> Table:
    """A table of turn results: session, turn number, outcome, and the text or the error."""
    table = Table(title="turn results", title_justify="left", show_edge=False)
    table.add_column("session")
    table.add_column("turn", justify="right")
    table.add_column("outcome")
    table.add_column("text / error", overflow="fold")
    for session_id, number, result in results:
        style = "green" if result.success else "red"
        detail = result.text if result.success else (result.error or result.text)
        table.add_row(session_id, str(number), Text(result.outcome, style=style), one_line(detail or "", width))
    return table


# -- the event log -----------------------------------------------------------------------------------


def _text(payload: Mapping[str, JsonValue], key: str) -> str:
    value = payload.get(key)
    return "" if value is None else value if isinstance(value, str) else _json(value)


def _stream_summary(payload: Mapping[str, JsonValue], limit: int) -> str:
    parts = payload.get("parts")
    if not isinstance(parts, list):
        return _json(dict(payload))
    pieces: list[str] = []
    text = ""
    for part in parts:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind in ("text-delta", "reasoning"):
            text += _text(part, "delta") or _text(part, "text")
            continue
        if text:
            pieces.append(f"text {_json(one_line(text, 40))} ({len(text)} chars)")
            text = ""
        if kind == "tool-call":
            pieces.append(f"tool-call {_text(part, 'name')} {_text(part, 'input')}")
        elif kind == "error":
            pieces.append(f"error {_text(part, 'message')}")
        elif kind == "finish":
            pieces.append(f"finish {_text(part, 'finishReason') or _text(part, 'reason')}".strip())
        else:
            pieces.append(str(kind))
    if text:
        pieces.append(f"text {_json(one_line(text, 40))} ({len(text)} chars)")
    step = _text(payload, "stepId")
    return one_line(f"{step}: {', '.join(pieces)}" if step else ", ".join(pieces), limit)


def event_summary(event: Event, limit: int = 100) -> str:
    """One line that says what ``event`` recorded (its payload, condensed)."""
    p = event.payload
    match event.type:
        case "ai.input":
            steer = " (steer)" if p.get("steer") else ""
            summary = f"{_text(p, 'role')}: {_text(p, 'text')}{steer}"
        case "ai.control.decided":
            reason = f" ({_text(p, 'reason')})" if p.get("reason") else ""
            summary = f"{_text(p, 'outcome')}{reason} {_text(p, 'commandId')}"
        case "ai.turn.started":
            inputs = p.get("inputIds")
            count = len(inputs) if isinstance(inputs, list) else 0
            summary = f"turn {_text(p, 'turnId')}, {count} input(s){' (retry)' if p.get('retry') else ''}"
        case "ai.turn.finished":
            why = f": {_text(p, 'error')}" if p.get("error") else f" {_text(p, 'reason')}"
            summary = f"turn {_text(p, 'turnId')} {_text(p, 'outcome')}{why}"
        case "ai.step.started":
            summary = f"step {_text(p, 'stepId')} on {_text(p, 'model')} (attempt {_text(p, 'attempt')})"
        case "ai.step.finished":
            calls = p.get("toolCalls")
            names = [c.get("name") for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
            summary = f"step {_text(p, 'stepId')}: {_text(p, 'finishReason')} {', '.join(map(str, names))}"
        case "ai.step.failed":
            summary = f"step {_text(p, 'stepId')} ✗ {_text(p, 'error')}"
        case "ai.interaction.requested":
            summary = f"{_text(p, 'name')} awaits approval ({_text(p, 'interactionId')}): {_text(p, 'prompt')}"
        case "ai.interaction.respond":
            answer = "approved" if p.get("approved") else "denied"
            summary = f"{_text(p, 'interactionId')} {answer} {_text(p, 'reason')}"
        case "ai.stream":
            summary = _stream_summary(p, limit)
        case "ai.tool.started":
            summary = f"{_text(p, 'name')} {_text(p, 'callId')} (attempt {_text(p, 'attempt')})"
        case "ai.tool.finished":
            summary = f"{_text(p, 'callId')} → {_text(p, 'output')}"
        case "ai.tool.failed":
            summary = f"{_text(p, 'callId')} ✗ {_text(p, 'error')}"
        case "ai.child.started":
            summary = f"{_text(p, 'agent')} as {_text(p, 'sessionId')}"
        case "ai.nested":
            actions = p.get("actions")
            count = len(actions) if isinstance(actions, list) else 0
            summary = f"{_text(p, 'callId')}: {count} action(s) from the sub-agent"
        case _:
            summary = _json(dict(p)) if p else ""
    return one_line(summary, limit)


def _when(at: float) -> str:
    return datetime.fromtimestamp(at).strftime("%H:%M:%S.%f")[:-3] if at else ""


def render_events(events: Iterable[Event], *, title: str | None = None, limit: int = 100) -> Table:
    """The events as a table: index, time, type and a one-line summary each."""
    table = Table(title=title, title_justify="left", show_edge=False)
    table.add_column("#", justify="right")
    table.add_column("at")
    table.add_column("type", style="cyan")
    table.add_column("summary", overflow="fold")
    for event in events:
        table.add_row(str(event.index), _when(event.at), event.type, event_summary(event, limit))
    return table
