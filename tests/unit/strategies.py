"""Hypothesis strategies: random session actions over small id pools, so they collide often."""

from __future__ import annotations

from hypothesis import strategies as st

from orchestrator import (
    ApplyPart,
    CompactionUpdate,
    DataUpdate,
    Failure,
    Finish,
    MessageMetadata,
    MessageStart,
    Reasoning,
    Reset,
    Retry,
    Send,
    StepFinish,
    Stop,
    TextDelta,
    ToolCall,
    ToolFailure,
    ToolInputDelta,
    ToolPhase,
    ToolResult,
)
from orchestrator.core.actions import SessionAction
from orchestrator.core.stream import AgentStreamPart

message_ids = st.sampled_from(["m-1", "m-2", "m-3", "m-4"])
maybe_message = st.none() | message_ids
call_ids = st.sampled_from(["c-1", "c-2", "c-3", "c-4", "c-5"])
tool_names = st.sampled_from(["add_to_cart", "delegate_to_researcher", "lookup"])
texts = st.text(max_size=6)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-100, 100) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)

stream_parts: st.SearchStrategy[AgentStreamPart] = st.one_of(
    st.builds(MessageStart, message_ids),
    st.builds(TextDelta, texts, maybe_message),
    st.builds(Reasoning, texts, maybe_message),
    st.builds(ToolCall, call_ids, tool_names, json_values, maybe_message),
    st.builds(
        ToolInputDelta, call_ids, st.sampled_from(['{"a', '": 1', "}", ""]), st.none() | tool_names, maybe_message
    ),
    st.builds(ToolResult, call_ids, json_values, st.booleans()),
    st.builds(ToolFailure, call_ids, texts, st.none() | st.just("cancelled")),
    st.builds(StepFinish),
    st.builds(Finish, st.sampled_from(["stop", "aborted", "tool-calls"])),
    st.builds(Failure, texts, st.none() | st.sampled_from(["network", "rate_limited"])),
    st.builds(
        MessageMetadata, st.dictionaries(st.sampled_from(["status", "n"]), json_values, max_size=2), maybe_message
    ),
    st.builds(DataUpdate, st.just("card"), json_values, st.none() | st.just("d-1"), maybe_message),
    st.builds(CompactionUpdate, st.just("k-1"), st.sampled_from(["running", "completed"]), st.none() | texts),
)

withins = st.none() | call_ids | st.lists(call_ids, min_size=1, max_size=3).map(tuple)

actions: st.SearchStrategy[SessionAction] = st.one_of(
    st.builds(Send, st.sampled_from(["u-1", "u-2", "u-3", "m-1"]), texts),
    st.builds(ApplyPart, stream_parts, withins),
    st.builds(ApplyPart, stream_parts, withins),
    st.builds(ApplyPart, stream_parts, st.none()),
    st.builds(ToolPhase, tool_names, st.sampled_from(["running", "awaiting-confirmation"]), st.none() | texts),
    st.builds(Stop),
    st.builds(Retry),
)

action_lists = st.lists(actions, max_size=60)
with_reset = st.lists(actions | st.builds(Reset), max_size=60)
