"""``Agent``: what a session runs. Instructions, a model, tools, sub-agents and limits.

``model``, ``instructions`` and ``compaction`` may be resolvers: functions of a
``ResolverContext`` (the session's state, the contract's app state included) called before
every model step, so a change during a turn applies from the next step. A resolver that raises
fails the turn with its message; retry runs it again. Each sub-agent appears to the model as a
``delegate_to_<name>`` tool.

``handlers`` maps app event types to ``async def handler(context)`` side effects, run after the
event is durable, at least once per event, and never again once finished
(``orchestrator.run.handlers`` has the guarantees).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from orchestrator.core._json import JsonValue
from orchestrator.core.aistate import AIState
from orchestrator.core.contract import Contract
from orchestrator.core.errors import UsageError
from orchestrator.core.events import BUILTIN_PREFIX
from orchestrator.core.parts import AgentMessage
from orchestrator.models.base import ModelAdapter, ToolSpec
from orchestrator.run.handlers import Handler
from orchestrator.run.toolport import ToolLike, ToolSourceLike

__all__ = [
    "DELEGATE_PREFIX",
    "Agent",
    "Compaction",
    "CompactionContext",
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
class CompactionContext:
    """What custom ``should_compact`` and ``compact`` callbacks see before a model step."""

    state: AIState
    """The session's state (``state.app``: the contract's app state)."""
    session_id: str
    """The session."""
    turn_id: str
    """The turn the step belongs to."""
    model: str
    """The step's model (its name)."""
    messages: Sequence[AgentMessage]
    """The typed conversation, complete (``state.messages``: compaction never shortens it)."""
    model_messages: Sequence[AgentMessage]
    """What the step would send the model now: the latest summary (if any) and what follows it."""
    to_cover: Sequence[AgentMessage]
    """The leading part of ``model_messages`` a compaction now would replace (all but the active
    turn's input and work, which always go to the model as they are)."""
    instructions: str | None
    """The step's instructions."""
    estimate: int
    """The estimated prompt size in tokens (UTF-8 bytes / 4, calibrated by the last usage)."""
    threshold_tokens: int | None
    """The threshold in force: ``threshold_tokens``, else the catalog's default once known."""


ShouldCompact: TypeAlias = Callable[[CompactionContext], bool | Awaitable[bool]]
CompactFn: TypeAlias = Callable[[CompactionContext], str | Awaitable[str]]


@dataclass(frozen=True, slots=True)
class Compaction:
    """When to compact the context, and how to summarize it.

    Over the threshold, before a model step, Troupe sends one summary request to the step's
    model with the step's own instructions, tools and settings (so the provider's prompt cache
    still matches the prefix), followed by one user message holding the summary guidance and
    ``instructions``. Its tools are offered but never run. Later requests send the summary
    plus everything after what it covers; the log and ``state.messages`` stay complete.

    By default (``Compaction()``, an agent's default) the threshold is 75% of the model's
    context window from the model catalog (``orchestrator.models.catalog``), lowered for a
    larger ``max_output_tokens`` setting. The first generation with each model records
    ``ai.model.metadata.requested``; the lookup records ``ai.model.metadata.resolved`` without
    delaying the generation, and the session does not compact before it lands (so an oversized
    first prompt is sent as it is). A model the catalog does not know (``unavailable``) never
    compacts by default, and neither does an adapter that takes no part in the catalog (any
    adapter but ``OpenAIChatModel``; the scripted and function models unless given a
    ``context_window``), with no lookup: set ``threshold_tokens``. ``Agent(compaction=False)``
    turns compaction and the lookup off (recorded summaries are kept). The summary request runs
    no ``message_metadata`` hook and no tool.

    Settings that force the answer's shape (a ``tool_choice`` other than ``auto``/``none``, a
    ``response_format`` other than text) would force the summary's too: automatic compaction
    skips such an agent, and a threshold or ``should_compact`` without ``compact`` is refused.
    Write the summary yourself with ``compact``.
    """

    threshold_tokens: int | None = None
    """Compact when the estimated prompt exceeds this; ``None``: from the model catalog."""
    instructions: str | None = None
    """Extra guidance for the summary (e.g. ``"Preserve exact IDs."``)."""
    should_compact: ShouldCompact | None = None
    """Decides instead of the threshold whether to compact before a step (sync or async)."""
    compact: CompactFn | None = None
    """Writes the summary instead of the summary request (sync or async; returns its text)."""
    on_failure: Literal["fail", "continue"] = "fail"
    """What a failed summary does. ``fail`` (the default): an empty summary, a tool call instead
    of one, or a model error fails the generation like any failed step (retry runs it again),
    and the previous context (and summary) stays as it was. ``continue``: the compaction is
    marked failed and the step goes on with the uncompacted context; choose it when a long
    answer now is worth more than the risk that the full prompt no longer fits."""

    def __post_init__(self) -> None:
        threshold = self.threshold_tokens
        if threshold is not None and (not isinstance(threshold, int) or isinstance(threshold, bool) or threshold < 1):
            raise UsageError(
                f"Compaction(threshold_tokens=...) must be a positive integer (or None: from the model catalog), "
                f"not {threshold!r}"
            )
        if self.instructions is not None and not isinstance(self.instructions, str):
            raise UsageError("Compaction(instructions=...) must be text")
        for name in ("should_compact", "compact"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise UsageError(f"Compaction({name}=...) must be a function of a CompactionContext")
        if self.on_failure not in ("fail", "continue"):
            raise UsageError(f"Compaction(on_failure=...) must be 'fail' or 'continue', not {self.on_failure!r}")


ModelRef: TypeAlias = ModelAdapter | Callable[[ResolverContext], ModelAdapter]
InstructionsRef: TypeAlias = str | Callable[[ResolverContext], str | None] | None
ToolRef: TypeAlias = ToolLike | ToolSourceLike
CompactionRef: TypeAlias = Compaction | bool | Callable[[ResolverContext], "Compaction | bool | None"] | None


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
    compaction: CompactionRef = Compaction()
    """When to compact long conversations: a ``Compaction`` (the default, ``Compaction()``, takes
    its threshold from the model catalog), ``False`` or ``None`` (never; recorded summaries are
    kept), or a resolver returning one of those per step."""
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
    _delegates: tuple[ToolSpec, ...] = field(default=(), init=False, repr=False, compare=False)

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
        compaction = self.compaction
        if compaction is True:
            object.__setattr__(self, "compaction", Compaction())
        elif compaction is None:
            object.__setattr__(self, "compaction", False)
        elif not isinstance(compaction, Compaction | bool) and not callable(compaction):
            raise UsageError(
                f"agent {self.name!r}: compaction must be a Compaction, False, or a resolver returning one, "
                f"not {type(compaction).__name__}"
            )
        if isinstance(self.compaction, Compaction):
            _check_shaping(self.name, self.compaction, self.settings)
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
        object.__setattr__(self, "_delegates", self._delegate_specs())
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

    def resolve_compaction(self, context: ResolverContext) -> Compaction | None:
        """The compaction config for this step (``None``: no compaction; a resolver is called now)."""
        compaction = self.compaction
        if isinstance(compaction, Compaction):
            return None if compaction.compact is None and _shaping(self.settings) else compaction
        if compaction is False or compaction is None or compaction is True:
            return Compaction() if compaction is True else None
        resolved = compaction(context)
        if resolved is True:
            return Compaction()
        if resolved is False or resolved is None:
            return None
        if not isinstance(resolved, Compaction):
            raise UsageError(
                f"agent {self.name!r}: the compaction resolver returned {type(resolved).__name__}, "
                "not a Compaction, False or None"
            )
        _check_shaping(self.name, resolved, self.settings)
        return None if resolved.compact is None and _shaping(self.settings) else resolved

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
        """The ``delegate_to_<name>`` tools the model sees (made once: every model step asks)."""
        return list(self._delegates)

    def _delegate_specs(self) -> tuple[ToolSpec, ...]:
        return tuple(
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
        )

    def find(self, name: str) -> Agent | None:
        """This agent or a descendant by name (the first found, depth first)."""
        if self.name == name:
            return self
        for sub in self.agents:
            found = sub.find(name)
            if found is not None:
                return found
        return None


def _shaping(settings: Mapping[str, JsonValue]) -> str | None:
    """The setting that forces every answer's shape (so a summary's too), if any."""
    choice = settings.get("tool_choice")
    if choice is not None and choice not in ("auto", "none"):
        return "tool_choice"
    shape = settings.get("response_format")
    if shape is not None and not (isinstance(shape, Mapping) and shape.get("type") == "text"):
        return "response_format"
    return None


def _check_shaping(agent: str, compaction: Compaction, settings: Mapping[str, JsonValue]) -> None:
    """Refuse a model-written summary the settings would force into a tool call or a schema."""
    shaping = _shaping(settings)
    if shaping is None or compaction.compact is not None:
        return
    if compaction.threshold_tokens is not None or compaction.should_compact is not None:
        raise UsageError(
            f"agent {agent!r}: settings.{shaping} forces every answer's shape, so the summary request "
            "could not answer with a summary; write it with Compaction(compact=...), or drop the compaction"
        )
