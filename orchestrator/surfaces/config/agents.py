"""The ``agents:`` section: each agent built from its spec, sub-agents in any order, tools resolved.

Agents may name sub-agents defined anywhere in the same file; ``Builder`` builds each once,
depth first, and refuses a cycle with the chain that makes it. A ``tools:`` entry is a registered
name, a ``package.module:attribute`` import path, or ``{tool: ..., timeout: ...}`` to set a
single ``@tool``'s policies for this config, or ``{mcp: {...}}``, an MCP server's tools
(``orchestrator.surfaces.config.mcp``). ``handlers:`` maps app event types to the
``package.module:function`` of an async handler (``Agent.handlers``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Final, cast

from orchestrator.core._json import JsonValue
from orchestrator.core.errors import UsageError
from orchestrator.run.agent import DELEGATE_PREFIX, Agent, Compaction, ToolRef
from orchestrator.run.toolport import ToolLike, ToolSourceLike
from orchestrator.surfaces.config.document import Document, did_you_mean, import_attribute, key_path, kind_of
from orchestrator.surfaces.config.mcp import build_mcp
from orchestrator.surfaces.config.models import MODEL_EXAMPLE, build_model
from orchestrator.surfaces.config.registry import find_tool, registered_tools
from tools.tool import Tool

__all__ = ["Builder", "OverriddenTool"]

_AGENT_KEYS: Final = tuple(
    "name instructions model tools agents max_steps compaction settings description handlers".split()
)
_TOOL_KEYS: Final = ("tool", "recovery", "needs_approval", "timeout")


@dataclass(slots=True)
class _Spec:
    name: str
    path: str
    body: dict[str, Any]


@dataclass(slots=True)
class Builder:
    """Builds the agents of one document (each once, sub-agents first)."""

    doc: Document
    specs: dict[str, _Spec] = field(default_factory=dict)
    built: dict[str, Agent] = field(default_factory=dict)
    parents: set[str] = field(default_factory=set)
    """Agents some other agent delegates to."""

    def build(self, agents: Any, main: Any) -> tuple[dict[str, Agent], str | None]:
        """Every agent of the ``agents:`` section, in file order, and the name of the main one."""
        doc = self.doc
        if isinstance(agents, dict):
            entries = [(str(key), key_path("agents", str(key)), body) for key, body in agents.items()]
        elif isinstance(agents, list):
            entries = []
            for i, body in enumerate(agents):
                at = key_path("agents", i)
                if not isinstance(body, dict) or not isinstance(body.get("name"), str):
                    doc.fail(at, "an agent in a list needs a name:", "write `- name: shop` (or make agents: a mapping)")
                entries.append((body["name"], at, body))
        else:
            doc.fail("agents", f"agents must be a mapping of name -> agent, or a list, not {kind_of(agents)}")
        if not entries:
            doc.fail("agents", "agents: is empty", "define at least one agent")
        for name, at, body in entries:
            if body is None:
                doc.fail(at, f"agent {name!r} is empty", f"give it a model: ({MODEL_EXAMPLE})")
            body = doc.mapping(body, at, _AGENT_KEYS, f"agent {name!r}")
            if "name" in body:
                name = doc.string(body["name"], key_path(at, "name"), "name")
            if name in self.specs:
                doc.fail(at, f"two agents are named {name!r} (the other at {self.specs[name].path})", "rename one")
            self.specs[name] = _Spec(name, at, body)
        for name in self.specs:
            self._agent(name, [])
        ordered = {name: self.built[name] for name in self.specs}
        return ordered, self._main(main)

    def _main(self, main: Any) -> str | None:
        if main is not None:
            name = self.doc.string(self.doc.interpolate(main, "main"), "main", "main")
            if name not in self.specs:
                self.doc.fail(
                    "main", f"main names agent {name!r}, which is not defined", did_you_mean(name, self.specs, "agents")
                )
            return name
        if len(self.specs) == 1:
            return next(iter(self.specs))
        roots = [name for name in self.specs if name not in self.parents]
        return roots[0] if len(roots) == 1 else None

    def _agent(self, name: str, chain: list[str]) -> Agent:
        done = self.built.get(name)
        if done is not None:
            return done
        doc, spec = self.doc, self.specs[name]
        at, body = spec.path, spec.body
        subs: list[Agent] = []
        refs = body.get("agents") or []
        if not isinstance(refs, list):
            doc.fail(key_path(at, "agents"), "agents must be a list of agent names", "e.g. agents: [researcher]")
        for i, ref in enumerate(refs):
            ref_at = key_path(key_path(at, "agents"), i)
            if not isinstance(ref, str):
                doc.fail(
                    ref_at, f"a sub-agent is named, not {kind_of(ref)}", "define it under agents: and list its name"
                )
            if ref not in self.specs:
                fix = did_you_mean(ref, self.specs, "agents in this file")
                doc.fail(ref_at, f"unknown sub-agent {ref!r}", f"define it under agents:, or {fix}")
            if ref == name or ref in chain:
                cycle = " -> ".join([*chain[chain.index(ref) :], name, ref] if ref in chain else [name, ref])
                doc.fail(
                    ref_at,
                    f"sub-agent cycle {cycle}",
                    f"an agent cannot delegate to itself or to an agent above it; remove {ref!r} from {name}'s agents",
                )
            self.parents.add(ref)
            subs.append(self._agent(ref, [*chain, name]))
        tools = self._tools(body.get("tools"), key_path(at, "tools"), {DELEGATE_PREFIX + sub.name for sub in subs})
        if "model" not in body or body["model"] is None:
            doc.fail(at, f"agent {name!r} has no model", MODEL_EXAMPLE)
        model = build_model(doc, body["model"], key_path(at, "model"))
        compaction = (
            self._compaction(body["compaction"], key_path(at, "compaction")) if "compaction" in body else Compaction()
        )
        settings = body.get("settings")
        if settings is not None and not isinstance(settings, dict):
            doc.fail(key_path(at, "settings"), "settings must be a mapping", "e.g. settings: {temperature: 0.2}")
        # Checked before Agent() so that its message is not wrapped in "invalid agent" below.
        settings_json = cast(dict[str, JsonValue], doc.json(settings or {}, key_path(at, "settings")))
        handlers = self._handlers(body.get("handlers"), key_path(at, "handlers"))
        try:
            agent = Agent(
                name=name,
                instructions=doc.optional_string(
                    body.get("instructions"), key_path(at, "instructions"), "instructions"
                ),
                model=model,
                tools=tools,
                agents=subs,
                max_steps=(
                    doc.integer(body["max_steps"], key_path(at, "max_steps"), "max_steps")
                    if "max_steps" in body
                    else 20
                ),
                compaction=compaction,
                settings=settings_json,
                description=doc.optional_string(body.get("description"), key_path(at, "description"), "description")
                or "",
                handlers=handlers,
            )
        except UsageError as error:
            doc.fail(at, f"invalid agent {name!r}: {error.message}")
        self.built[name] = agent
        return agent

    def _handlers(self, value: Any, at: str) -> dict[str, Any]:
        if value is None:
            return {}
        example = "e.g. handlers: {ticket.flagged: desk.handlers:notify}"
        if not isinstance(value, dict):
            self.doc.fail(at, f"handlers must map app event types to handlers, not {kind_of(value)}", example)
        handlers: dict[str, Any] = {}
        for event_type, ref in value.items():
            ref_at = key_path(at, str(event_type))
            if not isinstance(ref, str):
                self.doc.fail(ref_at, f"a handler is an import path, not {kind_of(ref)}", example)
            handlers[str(event_type)] = import_attribute(self.doc, ref, ref_at, "handler")
        return handlers

    def _compaction(self, value: Any, at: str) -> Compaction | bool:
        doc = self.doc
        if value is False or value is True:
            return value  # false: never compact (and no catalog lookup); true: the default
        keys = ("threshold_tokens", "instructions", "should_compact", "compact", "on_failure")
        body = doc.mapping(value, at, keys, "compaction")
        threshold = body.get("threshold_tokens")
        callbacks: dict[str, Any] = {}
        for name in ("should_compact", "compact"):
            if name in body:
                callbacks[name] = self._callback(body[name], key_path(at, name), name)
        on_failure = body.get("on_failure", "fail")
        if on_failure not in ("fail", "continue"):
            doc.fail(key_path(at, "on_failure"), f"on_failure must be fail or continue, not {on_failure!r}")
        try:
            return Compaction(
                None
                if threshold is None or doc.unset(threshold, key_path(at, "threshold_tokens"))
                else doc.integer(threshold, key_path(at, "threshold_tokens"), "threshold_tokens"),
                doc.optional_string(body.get("instructions"), key_path(at, "instructions"), "instructions"),
                on_failure=on_failure,
                **callbacks,
            )
        except UsageError as error:
            doc.fail(at, error.message)

    def _callback(self, ref: Any, at: str, what: str) -> Any:
        if not isinstance(ref, str) or ":" not in ref:
            self.doc.fail(at, f"{what} is a function named by import path", f"e.g. {what}: 'mypkg.policy:{what}'")
        value = import_attribute(self.doc, ref, at, f"{what} function")
        if not callable(value) or isinstance(value, type):
            self.doc.fail(
                at, f"{ref!r} is {kind_of(value)}, not a function", "point at a function of a CompactionContext"
            )
        return value

    def _tools(self, value: Any, at: str, taken: set[str]) -> list[ToolRef]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.doc.fail(at, f"tools must be a list, not {kind_of(value)}", "e.g. tools: [add_to_cart]")
        refs: list[ToolRef] = []
        names: dict[str, str] = {}
        for i, item in enumerate(value):
            ref = _tool(self.doc, item, key_path(at, i))
            if isinstance(ref, ToolLike):
                if ref.name in taken:
                    self.doc.fail(
                        key_path(at, i), f"tool {ref.name!r} clashes with a sub-agent's delegate tool", "rename"
                    )
                if ref.name in names:
                    self.doc.fail(key_path(at, i), f"tool {ref.name!r} is listed twice (also at {names[ref.name]})")
                names[ref.name] = key_path(at, i)
            refs.append(ref)
        return refs


def _tool(doc: Document, item: Any, at: str) -> ToolRef:
    if isinstance(item, dict) and "mcp" in item:
        if len(item) > 1:
            others = ", ".join(str(k) for k in item if k != "mcp")
            doc.fail(at, f"an mcp: entry takes its settings inside mcp:, not beside it ({others})")
        return build_mcp(doc, item["mcp"], key_path(at, "mcp"))
    if isinstance(item, dict):
        body = doc.mapping(item, at, _TOOL_KEYS, "a tool entry")
        if "tool" not in body:
            doc.fail(at, "a tool entry needs tool:", "e.g. {tool: add_to_cart, timeout: 5}")
        ref = _resolve_tool(doc, body["tool"], key_path(at, "tool"))
        overrides: dict[str, Any] = {key: body[key] for key in _TOOL_KEYS[1:] if key in body}
        return _override(doc, ref, overrides, at) if overrides else ref
    return _resolve_tool(doc, item, at)


def _resolve_tool(doc: Document, ref: Any, at: str) -> ToolRef:
    if not isinstance(ref, str) or not ref:
        doc.fail(at, f"a tool is named by text, not {kind_of(ref)}", "e.g. add_to_cart or 'mypkg.tools:add_to_cart'")
    known = find_tool(ref)
    if known is not None:
        return known
    if ":" not in ref:
        fix = did_you_mean(ref, registered_tools(), "registered tools")
        doc.fail(at, f"unknown tool {ref!r}", f"{fix}; or give an import path like 'mypkg.tools:{ref}'")
    value = import_attribute(doc, ref, at, "tool")
    if isinstance(value, type):
        doc.fail(at, f"{ref!r} is a class, not a tool", "point at an @tool function or a tool source instance")
    if isinstance(value, Tool) or isinstance(value, ToolSourceLike):
        return cast(ToolRef, value)
    if isinstance(value, ToolLike):
        return value
    fix = "decorate it with @tool (from tools import tool)" if callable(value) else "point at an @tool function"
    doc.fail(at, f"{ref!r} is {kind_of(value) if not callable(value) else 'a plain function'}, not a Tool", fix)


def _override(doc: Document, ref: ToolRef, overrides: Mapping[str, Any], at: str) -> ToolLike:
    if not isinstance(ref, Tool):
        doc.fail(at, "policies can be set only on a single @tool", "remove recovery/needs_approval/timeout here")
    changes: dict[str, Any] = {}
    if "recovery" in overrides:
        recovery = overrides["recovery"]
        if recovery not in ("rerun", "report"):
            doc.fail(key_path(at, "recovery"), f"recovery must be rerun or report, not {recovery!r}")
        changes["recovery"] = recovery
    if "needs_approval" in overrides:
        approval = overrides["needs_approval"]
        changes["needs_approval"] = doc.boolean(approval, key_path(at, "needs_approval"), "needs_approval")
    if "timeout" in overrides:
        timeout, timeout_at = overrides["timeout"], key_path(at, "timeout")
        changes["timeout"] = None if doc.unset(timeout, timeout_at) else doc.number(timeout, timeout_at, "timeout")
    return _with_policies(ref, changes)


def _with_policies(base: Tool, changes: Mapping[str, Any]) -> ToolLike:
    """A copy of the ``Tool`` ``base`` with ``changes`` (``dataclasses.replace``, into a picklable class)."""
    return OverriddenTool(**{**{f.name: getattr(base, f.name) for f in fields(base)}, **changes})


class OverriddenTool(Tool):
    """``Tool`` with policies set by a config, picklable as "that registered tool, these policies".

    A plain ``dataclasses.replace`` copy of a decorated tool does not pickle: ``Tool.__reduce__``
    then pickles the function by reference, and the module attribute is the original ``Tool``.
    """

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        module, qualname = getattr(self.fn, "__module__", ""), getattr(self.fn, "__qualname__", "")
        base = _lookup(module, qualname)
        if not isinstance(base, Tool) or base.fn is not self.fn or base.name != self.name:
            return super().__reduce__()
        return (_reapply, (module, qualname, self.recovery, self.needs_approval, self.timeout))


def _lookup(module: str, qualname: str) -> Any:
    if not module:
        return None
    value: Any = sys.modules.get(module) or importlib.import_module(module)
    for part in qualname.split("."):
        value = getattr(value, part, None)
    return value


def _reapply(module: str, qualname: str, recovery: str, needs_approval: Any, timeout: float | None) -> ToolLike:
    changes = {"recovery": recovery, "needs_approval": needs_approval, "timeout": timeout}
    return _with_policies(_lookup(module, qualname), changes)
