"""Troupe: a durable, actor-model orchestrator for LLM agent sessions on Ray.

``orchestrator`` is the public API over the layers below it (``core/``, ``run/``, ``models/``,
``store/``; ``surfaces/`` sits on top). It never imports Ray: ``Runtime`` (from ``actors``), ``tool``
/ ``ToolContext`` (from ``tools``) and the heavier modules are loaded on first use (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from orchestrator.core.actions import ApplyPart, Reset, Retry, Send, SessionAction, Stop, ToolPhase
from orchestrator.core.errors import (
    ConcurrencyConflict,
    ConfigError,
    ModelError,
    ParseError,
    PartialDuplicateBatch,
    RunError,
    StoreError,
    ToolError,
    TroupeError,
    UsageError,
)
from orchestrator.core.parts import (
    AgentMessage,
    CompactionPart,
    DataPart,
    MessagePart,
    NestedRun,
    ReasoningPart,
    TextPart,
    ToolPart,
)
from orchestrator.core.reducer import resumable, session_reducer
from orchestrator.core.state import SessionError, SessionState
from orchestrator.core.stream import (
    AgentStreamPart,
    CompactionUpdate,
    DataUpdate,
    Failure,
    Finish,
    MessageMetadata,
    MessageStart,
    Reasoning,
    StepFinish,
    TextDelta,
    ToolCall,
    ToolFailure,
    ToolInputDelta,
    ToolResult,
)
from orchestrator.core.wire import parse_action, parse_message, parse_part, parse_state

if TYPE_CHECKING:
    from actors.local import LocalRuntime
    from actors.runtime import Runtime
    from orchestrator.core.approvals import PendingApproval, pending_approvals
    from orchestrator.core.contract import Contract, Reducer
    from orchestrator.core.turn import TurnOutcome
    from orchestrator.models.catalog import ModelLimits, register_model, unregister_model
    from orchestrator.models.openai import OpenAIChatModel
    from orchestrator.models.scripted import ScriptedModel
    from orchestrator.run.agent import Agent, Compaction, CompactionContext, ResolverContext
    from orchestrator.run.handlers import HandlerContext
    from orchestrator.store import open_store
    from tools import ToolContext, tool

__all__ = [
    "Agent",
    "AgentMessage",
    "AgentStreamPart",
    "ApplyPart",
    "Compaction",
    "CompactionContext",
    "CompactionPart",
    "CompactionUpdate",
    "ConcurrencyConflict",
    "ConfigError",
    "Contract",
    "DataPart",
    "DataUpdate",
    "Failure",
    "Finish",
    "HandlerContext",
    "LocalRuntime",
    "MessageMetadata",
    "MessagePart",
    "MessageStart",
    "ModelError",
    "ModelLimits",
    "NestedRun",
    "OpenAIChatModel",
    "ParseError",
    "PartialDuplicateBatch",
    "PendingApproval",
    "Reasoning",
    "ReasoningPart",
    "Reducer",
    "Reset",
    "ResolverContext",
    "Retry",
    "RunError",
    "Runtime",
    "ScriptedModel",
    "Send",
    "SessionAction",
    "SessionError",
    "SessionState",
    "StepFinish",
    "Stop",
    "StoreError",
    "TextDelta",
    "TextPart",
    "ToolCall",
    "ToolContext",
    "ToolError",
    "ToolFailure",
    "ToolInputDelta",
    "ToolPart",
    "ToolPhase",
    "ToolResult",
    "TroupeError",
    "TurnOutcome",
    "UsageError",
    "open_store",
    "parse_action",
    "parse_message",
    "parse_part",
    "parse_state",
    "pending_approvals",
    "register_model",
    "resumable",
    "session_reducer",
    "tool",
    "unregister_model",
]

# name -> module that defines it, imported on first access so `import orchestrator` stays light
# and never imports Ray (the dependency direction of DESIGN.md §1).
_LAZY = {
    "Agent": "orchestrator.run.agent",
    "Compaction": "orchestrator.run.agent",
    "CompactionContext": "orchestrator.run.agent",
    "ModelLimits": "orchestrator.models.catalog",
    "ResolverContext": "orchestrator.run.agent",
    "Contract": "orchestrator.core.contract",
    "HandlerContext": "orchestrator.run.handlers",
    "LocalRuntime": "actors.local",
    "OpenAIChatModel": "orchestrator.models.openai",
    "PendingApproval": "orchestrator.core.approvals",
    "Reducer": "orchestrator.core.contract",
    "Runtime": "actors.runtime",
    "ScriptedModel": "orchestrator.models.scripted",
    "ToolContext": "tools",
    "TurnOutcome": "orchestrator.core.turn",
    "open_store": "orchestrator.store",
    "pending_approvals": "orchestrator.core.approvals",
    "register_model": "orchestrator.models.catalog",
    "tool": "tools",
    "unregister_model": "orchestrator.models.catalog",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
