"""Compaction: estimate the prompt, decide when to summarize, and build the compacted prompt.

The estimate is the serialized prompt's UTF-8 bytes divided by four, calibrated by the previous
same-model step (actual prompt tokens over what was estimated then). It is not a tokenizer and
makes no remote calls. Over the threshold, one summary request goes to the same model, with the
step's own instructions, tools and settings and the guidance as a last user message
(``guidance_message``); later requests send the summary plus everything after what it covers.
The log and ``messages`` stay complete: compaction only changes what the model is sent. How a
step decides, and what a failed summary does, is ``orchestrator.run.agent.Compaction``'s docstring.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from itertools import islice

from orchestrator.core._json import JsonValue
from orchestrator.core.aistate import AIState
from orchestrator.core.parts import AgentMessage, TextPart
from orchestrator.core.wire import message_to_wire
from orchestrator.models.base import GUIDANCE_ID, ToolSpec

__all__ = [
    "SUMMARY_INSTRUCTIONS",
    "calibrate",
    "compaction_cut",
    "estimate_tokens",
    "guidance_message",
    "output_budget",
    "prompt_messages",
    "summary_message",
]

SUMMARY_INSTRUCTIONS = (
    "Summarize the conversation so far for yourself, to continue it without the full history: "
    "the user's goals, decisions made, facts learned (keep names, ids and numbers exact), tool "
    "results that still matter, and what is left to do. Reply with the summary only."
)


_OUTPUT_SETTINGS = ("max_output_tokens", "max_completion_tokens", "max_tokens")


def guidance_message(extra: str | None) -> AgentMessage:
    """The summary request's last message: the built-in guidance, then ``Compaction.instructions``.

    It goes last, as a user message, so everything before it is the prefix the generation sent
    (the provider's prompt cache still matches) and the model answers it as the next turn.
    """
    text = SUMMARY_INSTRUCTIONS + (f"\n{extra}" if extra else "")
    return AgentMessage(GUIDANCE_ID, "user", (TextPart(f"{GUIDANCE_ID}:0", text),))


def output_budget(settings: Mapping[str, JsonValue]) -> int | None:
    """The answer size the settings ask for (``max_output_tokens`` or a provider's spelling)."""
    for key in _OUTPUT_SETTINGS:
        value = settings.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def estimate_tokens(messages: Sequence[AgentMessage], instructions: str | None, tools: Sequence[ToolSpec]) -> int:
    """Serialized UTF-8 bytes of the prompt, divided by four."""
    body = {
        "instructions": instructions or "",
        "messages": [message_to_wire(m) for m in messages],
        "tools": [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools],
    }
    return len(json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()) // 4


def calibrate(estimate: int, state: AIState, model: str) -> int:
    """``estimate`` scaled by how the last same-model estimate compared with real usage."""
    previous = state.usage.calibration.get(model)
    if not previous:
        return estimate
    estimated, actual = previous
    return estimate * actual // max(estimated, 1)


def summary_message(summary: str) -> AgentMessage:
    """The message that stands for everything a summary covers."""
    return AgentMessage(
        "troupe:summary", "system", (TextPart("troupe:summary:0", f"Summary of the earlier conversation:\n{summary}"),)
    )


def prompt_messages(state: AIState) -> Sequence[AgentMessage]:
    """What the model is sent: the summary (if any) plus the messages after what it covers.

    Without a summary, the conversation itself (an immutable vector): a copy per model step
    grew with the conversation, ~0.2 ms a step at 3,500 messages, for adapters that only read it.
    """
    messages = state.messages
    compaction = state.compaction
    if compaction is None or compaction.status != "completed" or not compaction.summary:
        return messages
    return [summary_message(compaction.summary), *islice(messages, compaction.through, None)]


def compaction_cut(state: AIState) -> int:
    """How many messages a compaction now would cover: everything before the active turn."""
    messages = state.messages
    active = state.active
    if active is None:
        return len(messages)
    first_input = set(active.input)
    for i, message in enumerate(messages):
        if message.id in first_input or message.id == active.message_id:
            return i
    return len(messages)
