"""``Agent``: what a session runs. Instructions, a model, tools, sub-agents and limits.

``model`` and ``instructions`` may be resolvers: functions of a ``ResolverContext`` (the session's
state, the contract's app state included) called before every model step, so a change during a
turn applies from the next step. A resolver that raises fails the turn with its message; retry
runs it again. Each sub-agent appears to the model as a ``delegate_to_<name>`` tool.

``handlers`` maps app event types to ``async def handler(context)`` side effects, run after the
event is durable, at least once per event, and never again once finished
(``orchestrator.run.handlers`` has the guarantees).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from orchestrator.core._json import JsonValue
from orchestrator.core.aistate import AIState
from orchestrator.core.contract import Contract
from orchestrator.core.errors import UsageError
from orchestrator.core.events import BUILTIN_PREFIX
from orchestrator.models.base import ModelAdapter, ToolSpec
from orchestrator.run.handlers import Handler
from orchestrator.run.toolport import ToolLike, ToolSourceLike

__all__ = [
    "DELEGATE_PREFIX",
    "Agent",
    "Compaction",
    "MetadataContext",
    "ResolverContext",
]

DELEGATE_PREFIX = "delegate_to_"
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,47}$")


@dataclass(frozen=True, slots=True)
class ResolverContext:
    """What a model or instructions resolver sees before a model step."""

    state: AIState
    """The session's state (``state.app`` / ``state.plan``: the contract's app state)."""
    session_id: str
    """The session."""
    turn_id: str
    """The turn the step belongs to."""
    step: int
    """How many steps the turn has completed."""


@dataclass(frozen=True, slots=True)
class MetadataContext:
    """What the ``message_metadata`` hook sees at a step's start and finish."""

    part: str
    """``start`` or ``finish``."""
    state: AIState
    """The session's state."""
    usage: Mapping[str, JsonValue] | None = None
    """The step's usage (at ``finish``)."""
    finish_reason: str | None = None
    """Why the step ended (at ``finish``)."""


@dataclass(frozen=True, slots=True)
class Compaction:
    """When to compact the context, and how to summarize it."""

    threshold_tokens: int
    """Compact when the estimated prompt exceeds this (estimate: UTF-8 bytes / 4, calibrated)."""
    instructions: str | None = None
    """Extra guidance for the summary (e.g. ``"Preserve exact IDs."``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.threshold_tokens, int) or self.threshold_tokens < 1:
            raise UsageError("Compaction(threshold_tokens=...) must be a positive integer")


ModelRef: TypeAlias = ModelAdapter | Callable[[ResolverContext], ModelAdapter]
InstructionsRef: TypeAlias = str | Callable[[ResolverContext], str | None] | None
ToolRef: TypeAlias = ToolLike | ToolSourceLike


@dataclass(frozen=True, slots=True)
class Agent:
    """An agent definition. Immutable and picklable (it travels to Ray actors)."""

    name: str
    """The agent's name (sub-agents are called as ``delegate_to_<name>``)."""
    instructions: InstructionsRef
    """The system instructions, or a resolver of them."""
    model: ModelRef
    """The model, or a resolver choosing one per step."""
    tools: Sequence[ToolRef] = ()
    """Tools and tool sources (read again before every step and after every call)."""
    agents: Sequence[Agent] = ()
    """Sub-agents, each a ``delegate_to_<name>`` tool."""
    max_steps: int = 20
    """Model steps a turn may take."""
    compaction: Compaction | None = None
    """When to compact long conversations (``None``: never)."""
    contract: Contract | None = None
    """App events and state."""
    message_metadata: Callable[[MetadataContext], Mapping[str, JsonValue] | None] | None = None
    """Merged onto the assistant message at each step's start and finish."""
    settings: Mapping[str, JsonValue] = field(default_factory=dict)
    """Provider settings for every step."""
    description: str = ""
    """What the agent does (the delegate tool's description, for a parent's model)."""
    handlers: Mapping[str, Handler] = field(default_factory=dict)
    """App event type -> ``async def handler(context)``: run after each such event is durable, at
    least once (again after a crash: key its effect on ``context.event.id``), never again once it
    finished; a failure is recorded (``ai.handler.finished``) and does not fail the turn."""
    _static: tuple[ToolLike, ...] | None = field(default=None, init=False, repr=False, compare=False)
    _adapter: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise UsageError(
                f"agent name {self.name!r} is not valid: start with a letter, then letters, digits, '_' or '-' (max 48)"
            )
        if not isinstance(self.max_steps, int) or self.max_steps < 1:
            raise UsageError(f"agent {self.name!r}: max_steps must be a positive integer, not {self.max_steps!r}")
        if self.model is None:
            raise UsageError(
                f"agent {self.name!r} needs a model (e.g. ScriptedModel([...]) or OpenAIChatModel('gpt-4o-mini'))"
            )
        self._check_handlers()
        object.__setattr__(self, "tools", tuple(self.tools))
        object.__setattr__(self, "agents", tuple(self.agents))
        seen: set[str] = set()
        for sub in self.agents:
            if not isinstance(sub, Agent):
                raise UsageError(f"agent {self.name!r}: agents=[...] must hold Agent objects, got {type(sub).__name__}")
            if sub.name in seen:
                raise UsageError(f"agent {self.name!r} has two sub-agents named {sub.name!r}; rename one")
            seen.add(sub.name)
        names = {DELEGATE_PREFIX + a.name for a in self.agents}
        static = all(isinstance(r, ToolLike) for r in self.tools)
        object.__setattr__(self, "_static", tuple(self.tools) if static else None)
        object.__setattr__(self, "_adapter", isinstance(self.model, ModelAdapter))
        for ref in self.tools:
            if isinstance(ref, ToolLike):
                if ref.name in names:
                    raise UsageError(f"agent {self.name!r} has two tools named {ref.name!r}; rename one")
                names.add(ref.name)
            elif not isinstance(ref, ToolSourceLike):
                raise UsageError(
                    f"agent {self.name!r}: tools=[...] must hold @tool functions or tool sources, "
                    f"got {type(ref).__name__}"
                )

    def _check_handlers(self) -> None:
        if not isinstance(self.handlers, Mapping):
            raise UsageError(f"agent {self.name!r}: handlers must map app event types to async functions")
        known = None if self.contract is None else set(self.contract.events)
        for event_type, handler in self.handlers.items():
            if not isinstance(event_type, str) or not event_type or event_type.startswith(BUILTIN_PREFIX):
                raise UsageError(
                    f"agent {self.name!r}: handlers[{event_type!r}]: handlers take app event types "
                    f"(e.g. 'ticket.flagged'), never a built-in {BUILTIN_PREFIX!r} type"
                )
            if known is not None and event_type not in known:
                raise UsageError(
                    f"agent {self.name!r}: handlers[{event_type!r}]: the contract has no such event type "
                    f"(its types: {', '.join(sorted(known)) or 'none'})"
                )
            if not inspect.iscoroutinefunction(handler):
                raise UsageError(
                    f"agent {self.name!r}: handlers[{event_type!r}] must be an async function "
                    "(async def handler(context): ...)"
                )
        object.__setattr__(self, "handlers", dict(self.handlers))

    # -- resolution, per step ------------------------------------------------------------------

    def resolve_model(self, context: ResolverContext) -> ModelAdapter:
        """The model for this step (a resolver is called now)."""
        model = self.model
        if self._adapter:  # decided once: isinstance on a Protocol is slow on the hot path
            return model  # type: ignore[return-value]
        assert not isinstance(model, ModelAdapter)
        resolved = model(context)
        if not isinstance(resolved, ModelAdapter):
            raise UsageError(f"agent {self.name!r}: the model resolver returned {type(resolved).__name__}, not a model")
        return resolved

    def resolve_instructions(self, context: ResolverContext) -> str | None:
        """The instructions for this step (a resolver is called now)."""
        instructions = self.instructions
        if instructions is None or isinstance(instructions, str):
            return instructions
        return instructions(context)

    def static_tools(self) -> tuple[ToolLike, ...] | None:
        """The tools, when they are a fixed list (``None`` when a dynamic source is among them)."""
        return self._static

    async def list_tools(self, app: Mapping[str, Any]) -> list[ToolLike]:
        """Every tool available now, sources included (delegate tools are separate)."""
        if self._static is not None:
            return list(self._static)
        tools: list[ToolLike] = []
        for ref in self.tools:
            if isinstance(ref, ToolLike):
                tools.append(ref)
            else:
                tools.extend(await ref.list_tools(app))
        return tools

    def sub_agent(self, tool_name: str) -> Agent | None:
        """The sub-agent behind ``delegate_to_<name>``, if that is what ``tool_name`` is."""
        if not tool_name.startswith(DELEGATE_PREFIX):
            return None
        wanted = tool_name[len(DELEGATE_PREFIX) :]
        return next((a for a in self.agents if a.name == wanted), None)

    def delegate_specs(self) -> list[ToolSpec]:
        """The ``delegate_to_<name>`` tools the model sees."""
        return [
            ToolSpec(
                DELEGATE_PREFIX + sub.name,
                sub.description or f"Delegate a task to the {sub.name} agent; it answers with its final text.",
                {
                    "type": "object",
                    "properties": {"task": {"type": "string", "description": f"What the {sub.name} agent should do."}},
                    "required": ["task"],
                    "additionalProperties": False,
                },
            )
            for sub in self.agents
        ]

    def find(self, name: str) -> Agent | None:
        """This agent or a descendant by name (the first found, depth first)."""
        if self.name == name:
            return self
        for sub in self.agents:
            found = sub.find(name)
            if found is not None:
                return found
        return None
