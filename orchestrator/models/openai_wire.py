"""Chat Completions on the wire.

A conversation becomes the request's ``messages`` and ``tools``; the response's
``chat.completion.chunk`` events are assembled back into stream parts (``StepAssembler``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from orchestrator.core._json import JsonObject, JsonValue
from orchestrator.core.parts import AgentMessage, TextPart, ToolPart
from orchestrator.core.stream import AgentStreamPart, Reasoning, StepFinish, TextDelta, ToolCall, ToolInputDelta
from orchestrator.models.base import ModelRequest, ToolSpec

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionChunk
    from openai.types.chat.chat_completion_chunk import ChoiceDelta, ChoiceDeltaToolCall
    from openai.types.completion_usage import CompletionUsage

__all__ = ["StepAssembler", "to_openai_messages", "to_openai_tools"]

_FINISH_REASONS: Final[Mapping[str, str]] = {
    "stop": "stop",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
    "length": "length",
    "content_filter": "content-filter",
}

_REASONING_FIELDS: Final = ("reasoning_content", "reasoning")
"""Where servers put reasoning text: vLLM/DeepSeek ``reasoning_content``, Ollama/newer vLLM ``reasoning``."""

# --- the prompt ---------------------------------------------------------------------------------


def to_openai_messages(messages: Sequence[AgentMessage], instructions: str | None = None) -> list[JsonObject]:
    """The Chat Completions ``messages`` for a conversation.

    Tool calls that are still open (``running``, ``awaiting-confirmation``) are left out with
    their results: the API rejects a call without a result. Reasoning, data and compaction parts
    never enter the prompt; a message with nothing left is omitted.
    """
    out: list[JsonObject] = []
    if instructions:
        out.append({"role": "system", "content": instructions})
    for message in messages:
        if message.role == "assistant":
            out.extend(_assistant_messages(message))
        else:
            text = message.text
            if text:
                out.append({"role": message.role, "content": text})
    return out


def _assistant_messages(message: AgentMessage) -> list[JsonObject]:
    out: list[JsonObject] = []
    text: list[str] = []
    calls: list[ToolPart] = []

    def flush() -> None:
        if not text and not calls:
            return
        entry: JsonObject = {"role": "assistant", "content": "".join(text) if text else None}
        if calls:
            entry["tool_calls"] = [_tool_call(call) for call in calls]
        out.append(entry)
        out.extend({"role": "tool", "tool_call_id": call.id, "content": _tool_result(call)} for call in calls)
        text.clear()
        calls.clear()

    for part in message.parts:
        if isinstance(part, TextPart):
            if calls:  # text after tool calls answers their results: a new assistant message
                flush()
            if part.text:
                text.append(part.text)
        elif isinstance(part, ToolPart) and not part.is_open:
            calls.append(part)
    flush()
    return out


def _tool_call(call: ToolPart) -> JsonObject:
    arguments = call.input if call.input is not None else {}
    function: JsonObject = {"name": call.name, "arguments": json.dumps(arguments)}
    return {"id": call.id, "type": "function", "function": function}


def _tool_result(call: ToolPart) -> str:
    if call.state == "done":
        return call.output if isinstance(call.output, str) else json.dumps(call.output)
    if call.state == "error":
        return f"Error: {call.error or 'the tool failed'}"
    return call.error or "Cancelled by the user."


def to_openai_tools(tools: Sequence[ToolSpec]) -> list[JsonObject]:
    """The Chat Completions ``tools`` for tool specs."""
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": dict(t.parameters)},
        }
        for t in tools
    ]


# --- the response -------------------------------------------------------------------------------


@dataclass(slots=True)
class _PendingCall:
    """A tool call while its fragments arrive."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)
    streamed: int = 0
    """How many argument fragments were already sent as ``ToolInputDelta``."""


class StepAssembler:
    """Turns chunks into parts; keeps what completes only at the end (reasoning, tool calls)."""

    def __init__(self, request: ModelRequest) -> None:
        self._request = request
        self._reasoning: list[str] = []
        self._calls: dict[int, _PendingCall] = {}
        self._last_index: int | None = None
        self.finish_reason: str | None = None
        self._usage: CompletionUsage | None = None

    def feed(self, chunk: ChatCompletionChunk) -> list[AgentStreamPart]:
        """The stream parts that ``chunk`` completes (text and reasoning at once, tool calls as they grow)."""
        out: list[AgentStreamPart] = []
        if chunk.usage is not None:
            self._usage = chunk.usage
        for choice in chunk.choices or ():
            if choice.index != 0:  # n > 1: the step is the first choice
                continue
            if choice.delta is not None:
                self._feed_delta(choice.delta, out)
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
        return out

    def _feed_delta(self, delta: ChoiceDelta, out: list[AgentStreamPart]) -> None:
        # Servers that send both names repeat the same text; take the first one present.
        for key in _REASONING_FIELDS:
            reasoning = getattr(delta, key, None)
            if isinstance(reasoning, str) and reasoning:
                self._reasoning.append(reasoning)
                break
        for text in (delta.content, delta.refusal):
            if text:
                self._flush_reasoning(out)
                out.append(TextDelta(text))
        for fragment in delta.tool_calls or ():
            self._flush_reasoning(out)
            self._feed_tool_fragment(fragment, out)

    def _flush_reasoning(self, out: list[AgentStreamPart]) -> None:
        if self._reasoning:
            out.append(Reasoning("".join(self._reasoning)))
            self._reasoning.clear()

    def _feed_tool_fragment(self, fragment: ChoiceDeltaToolCall, out: list[AgentStreamPart]) -> None:
        index = self._index_of(fragment)
        call = self._calls.get(index)
        if call is None:
            call = self._calls[index] = _PendingCall(index)
        self._last_index = index
        # Some servers repeat the id and the whole name on every fragment: the first one counts.
        if fragment.id and call.id is None:
            call.id = fragment.id
        function = fragment.function
        if function is not None:
            if function.name and call.name is None:
                call.name = function.name
            if function.arguments:
                call.arguments.append(function.arguments)
        if call.name is not None and call.streamed < len(call.arguments):
            first = call.streamed == 0
            delta = "".join(call.arguments[call.streamed :])
            call.streamed = len(call.arguments)
            out.append(ToolInputDelta(self._id_of(call), delta, name=call.name if first else None))

    def _index_of(self, fragment: ChoiceDeltaToolCall) -> int:
        index = getattr(fragment, "index", None)
        if isinstance(index, int):
            return index
        # No index (a few servers): a new id starts a call, anything else continues the last one.
        known_ids = {c.id for c in self._calls.values()}
        if self._last_index is None or (fragment.id and fragment.id not in known_ids):
            return max(self._calls, default=-1) + 1
        return self._last_index

    def _id_of(self, call: _PendingCall) -> str:
        if call.id is None:
            r = self._request
            call.id = f"call_{r.session_id}_{r.turn_index}_{r.step_index}_{call.index}"
        return call.id

    def finish(self) -> list[AgentStreamPart]:
        """The parts still held when the stream ends: pending reasoning, tool calls, the step's finish."""
        out: list[AgentStreamPart] = []
        self._flush_reasoning(out)
        for index in sorted(self._calls):
            call = self._calls[index]
            if call.name is None and not call.arguments:
                continue  # an empty fragment, not a call
            arguments = "".join(call.arguments)
            out.append(ToolCall(self._id_of(call), call.name or "", _parse_arguments(arguments)))
        reason = _FINISH_REASONS.get(self.finish_reason or "", "other")
        out.append(StepFinish(usage=_usage(self._usage), finish_reason=reason))
        return out


def _parse_arguments(arguments: str) -> JsonValue:
    """The call's input; the raw text when it is not JSON (the loop's validation tells the model)."""
    if not arguments.strip():
        return {}
    try:
        value: JsonValue = json.loads(arguments)
    except ValueError:
        return arguments
    return value


def _usage(usage: CompletionUsage | None) -> JsonObject | None:
    if usage is None:
        return None
    prompt = _int(getattr(usage, "prompt_tokens", None))
    completion = _int(getattr(usage, "completion_tokens", None))
    total = getattr(usage, "total_tokens", None)
    out: JsonObject = {
        "inputTokens": prompt,
        "outputTokens": completion,
        "totalTokens": total if isinstance(total, int) else prompt + completion,
    }
    reasoning = getattr(getattr(usage, "completion_tokens_details", None), "reasoning_tokens", None)
    if isinstance(reasoning, int):
        out["reasoningTokens"] = reasoning
    cached = getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", None)
    if isinstance(cached, int):
        out["cachedInputTokens"] = cached
    return out


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0
