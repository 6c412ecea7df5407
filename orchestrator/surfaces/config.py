"""Agents and the runtime from YAML: ``load_config``, ``load_agent``, ``load_runtime``.

A config file defines agents, names the one ``troupe run`` starts, and may configure the runtime::

    agents:
      shop:                                   # a mapping name -> spec, or a list of specs with `name:`
        instructions: You help the user shop.
        model: {scripted: {steps: [...], per_turn: true}}   # or {openai: {...}}, a registered
        tools: [add_to_cart]                  # name, or "pkg.module:attribute"
        agents: [researcher]                  # sub-agents defined in the same file, in any order
        max_steps: 20
        compaction: {threshold_tokens: 50000, instructions: Preserve exact IDs.}
        settings: {temperature: 0.2}
        description: What a parent's model is told about this agent.
      researcher: {model: ..., tools: [{tool: lookup_price, timeout: 5}]}
    main: shop                                # default: the only agent, or the only root
    runtime: {store: "sqlite:///troupe.db", placement: pooled, api_keys: "${TROUPE_API_KEYS:-}"}

Every string value may use ``${NAME}`` and ``${NAME:-default}`` (the default also replaces an
empty value; ``$${`` is a literal ``${``). A number, flag or optional field given as
interpolated text is read as that type, and an interpolated empty string leaves an optional
field unset. Top-level keys starting with ``x-`` are ignored: they hold YAML anchors to share.

Every mistake fails at load with a ``ConfigError`` that names the file, the line, the key path
(``agents.shop.tools[1]``), what is wrong and how to fix it. ``parse_config`` does the work on
text and an environment passed in; ``load_*`` read the file and ``os.environ``.

This module does not import ``tools`` when it is imported (the dependency runs ``tools`` ->
``orchestrator``): the tool registry loads ``tools.builtin`` on first use.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import Any, Final, Literal, NoReturn, cast
from urllib.parse import urlsplit

import yaml

from orchestrator.core._json import JsonValue
from orchestrator.core.errors import ConfigError, ModelError, UsageError
from orchestrator.core.stream import AgentStreamPart
from orchestrator.models.base import CancelSignal, ModelAdapter, ModelRequest
from orchestrator.models.scripted import ScriptedModel, check_script
from orchestrator.run.agent import DELEGATE_PREFIX, Agent, Compaction, ToolRef
from orchestrator.run.toolport import ToolLike, ToolSourceLike

__all__ = [
    "DeferredModel",
    "LoadedConfig",
    "RuntimeConfig",
    "load_agent",
    "load_config",
    "load_runtime",
    "parse_config",
    "parse_runtime",
    "register_model",
    "register_tool",
    "registered_models",
    "registered_tools",
    "unregister_model",
    "unregister_tool",
]

Placement = Literal["pooled", "dedicated"]


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    """How the Ray runtime runs: where the log lives, how sessions are placed, who may connect."""

    store: str = "sqlite:///troupe.db"
    """The event store URL (``memory://``, ``sqlite:///path.db``, ``postgresql://...``)."""
    placement: Placement = "pooled"
    """``pooled``: sessions share host actors; ``dedicated``: one actor per session."""
    address: str | None = None
    """The Ray cluster to join (``auto``, ``ray://host:10001``); ``None`` starts a local Ray."""
    api_keys: tuple[str, ...] = ()
    """Keys a client must present to the HTTP surface; empty: no authentication."""
    idle_timeout: float = 300.0
    """Seconds an idle session's actor stays loaded."""
    hosts_per_node: int | None = None
    """Host actors per node when pooled; ``None``: one per CPU."""


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    """A loaded config file: its agents, the main one, and its runtime section."""

    source: str
    """The file it came from (as given)."""
    agents: Mapping[str, Agent]
    """Every agent defined, by name, in file order."""
    main: str | None
    """The agent ``troupe run`` starts; ``None`` when the file has several roots and no ``main:``."""
    runtime: RuntimeConfig | None = None
    """The ``runtime:`` section, if the file has one."""

    def agent(self, name: str | None = None) -> Agent:
        """The agent ``name``, or the main agent.

        Raises:
            ConfigError: no such agent, or no main agent to default to.
        """
        if name is None:
            if self.main is None:
                raise ConfigError(
                    f"{self.source} defines several top-level agents ({', '.join(self.agents)}) and no main:; "
                    "add `main: <name>` to the file or ask for an agent by name"
                )
            name = self.main
        agent = self.agents.get(name)
        if agent is None:
            raise ConfigError(f"no agent {name!r} in {self.source}; {_choices(name, self.agents, 'its agents')}")
        return agent


# -- registries -------------------------------------------------------------------------------

_tools: dict[str, ToolLike] = {}
_builtins_loaded = False
_models: dict[str, Callable[[], ModelAdapter]] = {}


def _tool_registry() -> dict[str, ToolLike]:
    global _builtins_loaded
    if not _builtins_loaded:
        from tools.builtin import BUILTIN_TOOLS  # lazy: orchestrator never imports tools at import

        for name, builtin in BUILTIN_TOOLS.items():
            _tools.setdefault(name, builtin)
        _builtins_loaded = True
    return _tools


def register_tool(tool: ToolLike, *, replace: bool = False) -> None:
    """Make ``tool`` available to configs under its name (the built-in tools are registered already).

    Raises:
        UsageError: another tool has that name and ``replace`` is false.
    """
    if not isinstance(tool, ToolLike) or isinstance(tool, type):
        raise UsageError(f"register_tool() takes a tool (an @tool function), not {type(tool).__name__}")
    registry = _tool_registry()
    known = registry.get(tool.name)
    if known is not None and known is not tool and not replace:
        raise UsageError(f"a tool named {tool.name!r} is already registered; pass replace=True to replace it")
    registry[tool.name] = tool


def unregister_tool(name: str) -> None:
    """Forget a registered tool (a no-op for an unknown name)."""
    _tool_registry().pop(name, None)


def registered_tools() -> list[str]:
    """The names configs may use in ``tools:``."""
    return sorted(_tool_registry())


def register_model(name: str, factory: Callable[[], ModelAdapter], *, replace: bool = False) -> None:
    """Make ``model: <name>`` build a model with ``factory()`` (called once per agent that uses it).

    Raises:
        UsageError: the name is not valid, or is taken and ``replace`` is false.
    """
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]*", name):
        raise UsageError(f"model name {name!r} is not valid: use letters, digits, '_', '.', '-' (no ':')")
    if not callable(factory) or isinstance(factory, ModelAdapter):
        raise UsageError(f"register_model({name!r}, factory): factory must be a function returning a model")
    if name in _models and _models[name] is not factory and not replace:
        raise UsageError(f"a model named {name!r} is already registered; pass replace=True to replace it")
    _models[name] = factory


def unregister_model(name: str) -> None:
    """Forget a registered model (a no-op for an unknown name)."""
    _models.pop(name, None)


def registered_models() -> list[str]:
    """The names configs may use as ``model:``."""
    return sorted(_models)


# -- entry points -------------------------------------------------------------------------------


def load_config(path: str | Path, *, env: Mapping[str, str] | None = None) -> LoadedConfig:
    """Load a config file's agents (and its runtime section).

    Args:
        path: The YAML file.
        env: The variables ``${...}`` reads; ``os.environ`` by default.

    Raises:
        ConfigError: the file is missing, not YAML, or not a valid config (the message names the
            file, line and key, and the fix).
    """
    return parse_config(_read(path), source=str(path), env=os.environ if env is None else env)


def load_agent(path: str | Path, name: str | None = None, *, env: Mapping[str, str] | None = None) -> Agent:
    """The agent ``name`` (default: the main agent) of a config file.

    Raises:
        ConfigError: as ``load_config``, or no such agent.
    """
    return load_config(path, env=env).agent(name)


def load_runtime(path: str | Path, *, env: Mapping[str, str] | None = None) -> RuntimeConfig:
    """The ``runtime:`` section of a file (which may hold nothing else); agents are not loaded.

    Raises:
        ConfigError: the file is missing, not YAML, has no ``runtime:`` or an invalid one.
    """
    return parse_runtime(_read(path), source=str(path), env=os.environ if env is None else env)


def parse_config(text: str, *, source: str = "<config>", env: Mapping[str, str]) -> LoadedConfig:
    """``load_config`` on text already read; ``source`` names it in errors."""
    doc = _Document.parse(text, source, env)
    data = doc.data
    if "agents" not in data:
        fix = "runtime-only files are read with load_runtime()" if "runtime" in data else "add an agents: section"
        doc.fail("", "no agents: section", fix)
    agents, main = _Builder(doc).build(doc.interpolate(data["agents"], "agents"), data.get("main"))
    runtime = _runtime(doc, doc.interpolate(data["runtime"], "runtime")) if "runtime" in data else None
    return LoadedConfig(source, agents, main, runtime)


def parse_runtime(text: str, *, source: str = "<config>", env: Mapping[str, str]) -> RuntimeConfig:
    """``load_runtime`` on text already read; ``source`` names it in errors."""
    doc = _Document.parse(text, source, env)
    if "runtime" not in doc.data:
        doc.fail("", "no runtime: section", "add `runtime: {store: 'sqlite:///troupe.db'}` (every key is optional)")
    return _runtime(doc, doc.interpolate(doc.data["runtime"], "runtime"))


def _read(path: str | Path) -> str:
    file = Path(path)
    try:
        return file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"config file not found: {path} (from {Path.cwd()}); check the path, or run from the project root"
        ) from None
    except IsADirectoryError:
        raise ConfigError(f"config path {path} is a directory; name a .yaml file in it") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"config file {path} is not UTF-8 text ({error.reason}); save it as UTF-8") from None
    except OSError as error:
        raise ConfigError(f"cannot read config file {path}: {error.strerror or error}") from None


# -- the document -----------------------------------------------------------------------------

_TOP_KEYS: Final = ("agents", "main", "runtime")
_VARIABLE: Final = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.DOTALL)
_PARENT: Final = re.compile(r"(\[\d+\]|\.[^.\[]*)$")


def _at(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _choices(word: str, options: Iterable[str], label: str) -> str:
    """``did you mean 'x'? <label>: a, b`` (the fix part of a message about an unknown name)."""
    choices = list(options)
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"{hint}{label}: {', '.join(choices) or 'none'}"


class _Document:
    """A parsed file: its data, where each key path sits, and how to fail with a good message."""

    def __init__(self, data: dict[str, Any], source: str, env: Mapping[str, str], lines: dict[str, int]) -> None:
        self.data = data
        self.source = source
        self.env = env
        self.lines = lines
        self.interpolated: set[str] = set()
        """Paths whose value came from ``${...}`` text (read as the type the key needs)."""

    @classmethod
    def parse(cls, text: str, source: str, env: Mapping[str, str]) -> _Document:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            lines: dict[str, int] = {}
            if node is not None:
                _walk(node, "", lines, source, set())
            data = loader.construct_document(node) if node is not None else None
        except yaml.MarkedYAMLError as error:
            mark, start = error.problem_mark or error.context_mark, error.context_mark
            where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            problem = ": ".join(p for p in (error.context, error.problem) if p)
            if start is not None and mark is not None and start.line != mark.line:
                problem += f" (it started at line {start.line + 1})"
            raise ConfigError(
                f"YAML syntax error in {source}{where}: {problem}; "
                "fix the YAML there (indentation, a space after ':', closing quotes and brackets)"
            ) from None
        except yaml.YAMLError as error:
            raise ConfigError(f"YAML error in {source}: {error}") from None
        finally:
            loader.dispose()
        doc = cls({}, source, env, lines)
        if not isinstance(data, dict):
            got = "nothing" if data is None else f"a {type(data).__name__}"
            doc.fail("", f"a config must be a mapping with agents: (and main:, runtime:), but the file holds {got}")
        for key in data:
            if not isinstance(key, str):
                doc.fail("", f"top-level key {key!r} is not a name", f"use {', '.join(_TOP_KEYS)}")
            if key not in _TOP_KEYS and not key.startswith("x-"):
                doc.unknown(key, "", _TOP_KEYS, "the config", "keys starting with 'x-' are ignored (anchors)")
        doc.data = data
        return doc

    def line(self, path: str) -> int | None:
        while path:
            if path in self.lines:
                return self.lines[path]
            shorter = _PARENT.sub("", path)
            path = "" if shorter == path else shorter
        return None

    def fail(self, path: str, what: str, fix: str | None = None) -> NoReturn:
        line = self.line(path)
        where = f" at {path}" if path else ""
        location = f"{self.source}, line {line}" if line is not None else self.source
        raise ConfigError(f"{what}{where} in {location}" + (f"; {fix}" if fix else ""))

    def unknown(self, key: str, path: str, allowed: Sequence[str], what: str, extra: str = "") -> NoReturn:
        fix = _choices(key, allowed, "allowed keys")
        self.fail(_at(path, key), f"unknown key {key!r} in {what}", f"{fix}{'; ' + extra if extra else ''}")

    # -- interpolation --------------------------------------------------------------------

    def interpolate(self, value: Any, path: str, depth: int = 0) -> Any:
        """``value`` with ``${...}`` replaced in every string, recording which paths changed."""
        if depth > 100:
            self.fail(path, "the value nests too deeply (a recursive YAML alias?)", "remove the self-reference")
        if isinstance(value, str):
            if "${" not in value:
                return value
            result, substituted = self._substitute(value, path)
            if substituted:
                self.interpolated.add(path)
            return result
        if isinstance(value, dict):
            return {k: self.interpolate(v, _at(path, str(k)), depth + 1) for k, v in value.items()}
        if isinstance(value, list):
            return [self.interpolate(v, _at(path, i), depth + 1) for i, v in enumerate(value)]
        return value

    def _substitute(self, text: str, path: str) -> tuple[str, bool]:
        out: list[str] = []
        substituted = False
        position = 0
        while True:
            start = text.find("${", position)
            if start < 0:
                out.append(text[position:])
                return "".join(out), substituted
            if start > 0 and text[start - 1] == "$":  # $${ is a literal ${
                out.append(text[position : start - 1] + "${")
                position = start + 2
                continue
            end = text.find("}", start)
            match = _VARIABLE.fullmatch(text, start + 2, end) if end >= 0 else None
            if match is None:
                shown = text[start : end + 1] if end >= 0 else text[start:]
                self.fail(
                    path, f"malformed variable {shown!r}", "write ${NAME} or ${NAME:-default} ($${ for a literal)"
                )
            name, default = match.group(1), match.group(2)
            value = self.env.get(name)
            if not value and default is not None:
                value = default
            if value is None:
                self.fail(
                    path,
                    f"environment variable {name} is not set",
                    f"set {name}, or give a default: ${{{name}:-value}}",
                )
            out.append(text[position:start] + value)
            substituted = True
            position = end + 1

    # -- typed reads -----------------------------------------------------------------------

    def mapping(self, value: Any, path: str, allowed: Sequence[str], what: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(path, f"{what} must be a mapping of {', '.join(allowed)}, not {_kind(value)}")
        for key in value:
            if not isinstance(key, str):
                self.fail(path, f"key {key!r} in {what} is not a name", f"allowed keys: {', '.join(allowed)}")
            if key not in allowed:
                self.unknown(key, path, allowed, what)
        return value

    def string(self, value: Any, path: str, what: str) -> str:
        if not isinstance(value, str):
            self.fail(path, f"{what} must be text, not {_kind(value)}", "quote it if YAML read it as something else")
        return value

    def unset(self, value: Any, path: str) -> bool:
        """Whether an optional value is absent: null, or a variable that gave nothing."""
        return value is None or (value == "" and path in self.interpolated)

    def optional_string(self, value: Any, path: str, what: str) -> str | None:
        return None if self.unset(value, path) else self.string(value, path, what)

    def _typed(self, value: Any, path: str) -> Any:
        return _scalar(value) if isinstance(value, str) and path in self.interpolated else value

    def integer(self, value: Any, path: str, what: str, *, minimum: int = 1) -> int:
        value = self._typed(value, path)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            self.fail(path, f"{what} must be a whole number of at least {minimum}, not {value!r}")
        return value

    def number(self, value: Any, path: str, what: str) -> float:
        value = self._typed(value, path)
        if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
            self.fail(path, f"{what} must be a positive number of seconds, not {value!r}")
        return float(value)

    def boolean(self, value: Any, path: str, what: str) -> bool:
        value = self._typed(value, path)
        if not isinstance(value, bool):
            self.fail(path, f"{what} must be true or false, not {value!r}")
        return value

    def json(self, value: Any, path: str, *, coerce: bool = True, depth: int = 0) -> JsonValue:
        """``value`` as JSON; with ``coerce``, interpolated text that reads as a number or flag becomes one."""
        if depth > 100:
            self.fail(path, "the value nests too deeply (a recursive YAML alias?)", "remove the self-reference")
        if coerce and isinstance(value, str) and path in self.interpolated:
            return cast(JsonValue, _scalar(value))
        if value is None or isinstance(value, str | bool | int | float):
            return cast(JsonValue, value)
        if isinstance(value, list):
            return [self.json(v, _at(path, i), coerce=coerce, depth=depth + 1) for i, v in enumerate(value)]
        if isinstance(value, dict):
            out: dict[str, JsonValue] = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    self.fail(path, f"key {key!r} is not text (JSON keys are strings)", "quote it")
                out[key] = self.json(item, _at(path, key), coerce=coerce, depth=depth + 1)
            return out
        self.fail(path, f"{_kind(value)} is not a JSON value", "quote it to make it text")


def _scalar(text: str) -> str | int | float | bool:
    """Interpolated text read as YAML reads a plain scalar, when it is a number or a flag."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return value if isinstance(value, int | float | bool) else text


def _kind(value: Any) -> str:
    if value is None:
        return "empty (null)"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    shown = repr(value) if isinstance(value, str | int | float) else str(value)
    return f"{type(value).__name__} {shown}"


def _walk(node: yaml.Node, path: str, lines: dict[str, int], source: str, stack: set[int]) -> None:
    """Record the line of every key path under ``node``, and refuse duplicate keys."""
    lines.setdefault(path, node.start_mark.line + 1)
    if id(node) in stack:
        return  # a recursive alias: constructing it is fine, walking it again is not
    stack.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: its keys are ours
                merged = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for item in merged:
                    _walk(item, path, lines, source, stack)
                continue
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
            line = key_node.start_mark.line + 1
            if key in seen:
                where = f" at {path}" if path else ""
                raise ConfigError(
                    f"duplicate key {key!r}{where} in {source}, lines {seen[key]} and {line}; "
                    "YAML keeps only the last one: remove or rename one of them"
                )
            seen[key] = line
            lines[_at(path, key)] = line
            _walk(value_node, _at(path, key), lines, source, stack)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, _at(path, i), lines, source, stack)
    stack.discard(id(node))


# -- agents -----------------------------------------------------------------------------------

_AGENT_KEYS: Final = tuple("name instructions model tools agents max_steps compaction settings description".split())
_TOOL_KEYS: Final = ("tool", "recovery", "needs_approval", "timeout")
_MODEL_KINDS: Final = ("scripted", "openai")
_SCRIPTED_KEYS: Final = ("steps", "per_turn", "name")
_OPENAI_KEYS: Final = ("model", "base_url", "api_key", "settings", "timeout", "max_retries", "name")
_OPENAI_RESERVED: Final = ("model", "messages", "stream", "tools")
_MODEL_EXAMPLE: Final = "e.g. model: {scripted: [[{text: Hello}]]} or model: {openai: {model: gpt-4o-mini}}"


@dataclass(slots=True)
class _Spec:
    name: str
    path: str
    body: dict[str, Any]


@dataclass(slots=True)
class _Builder:
    doc: _Document
    specs: dict[str, _Spec] = field(default_factory=dict)
    built: dict[str, Agent] = field(default_factory=dict)
    parents: set[str] = field(default_factory=set)
    """Agents some other agent delegates to."""

    def build(self, agents: Any, main: Any) -> tuple[dict[str, Agent], str | None]:
        doc = self.doc
        if isinstance(agents, dict):
            entries = [(str(key), _at("agents", str(key)), body) for key, body in agents.items()]
        elif isinstance(agents, list):
            entries = []
            for i, body in enumerate(agents):
                at = _at("agents", i)
                if not isinstance(body, dict) or not isinstance(body.get("name"), str):
                    doc.fail(at, "an agent in a list needs a name:", "write `- name: shop` (or make agents: a mapping)")
                entries.append((body["name"], at, body))
        else:
            doc.fail("agents", f"agents must be a mapping of name -> agent, or a list, not {_kind(agents)}")
        if not entries:
            doc.fail("agents", "agents: is empty", "define at least one agent")
        for name, at, body in entries:
            if body is None:
                doc.fail(at, f"agent {name!r} is empty", f"give it a model: ({_MODEL_EXAMPLE})")
            body = doc.mapping(body, at, _AGENT_KEYS, f"agent {name!r}")
            if "name" in body:
                name = doc.string(body["name"], _at(at, "name"), "name")
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
                    "main", f"main names agent {name!r}, which is not defined", _choices(name, self.specs, "agents")
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
            doc.fail(_at(at, "agents"), "agents must be a list of agent names", "e.g. agents: [researcher]")
        for i, ref in enumerate(refs):
            ref_at = _at(_at(at, "agents"), i)
            if not isinstance(ref, str):
                doc.fail(ref_at, f"a sub-agent is named, not {_kind(ref)}", "define it under agents: and list its name")
            if ref not in self.specs:
                fix = _choices(ref, self.specs, "agents in this file")
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
        tools = self._tools(body.get("tools"), _at(at, "tools"), {DELEGATE_PREFIX + sub.name for sub in subs})
        if "model" not in body or body["model"] is None:
            doc.fail(at, f"agent {name!r} has no model", _MODEL_EXAMPLE)
        model = _model(doc, body["model"], _at(at, "model"))
        compaction = self._compaction(body["compaction"], _at(at, "compaction")) if "compaction" in body else None
        settings = body.get("settings")
        if settings is not None and not isinstance(settings, dict):
            doc.fail(_at(at, "settings"), "settings must be a mapping", "e.g. settings: {temperature: 0.2}")
        try:
            agent = Agent(
                name=name,
                instructions=doc.optional_string(body.get("instructions"), _at(at, "instructions"), "instructions"),
                model=model,
                tools=tools,
                agents=subs,
                max_steps=(
                    doc.integer(body["max_steps"], _at(at, "max_steps"), "max_steps") if "max_steps" in body else 20
                ),
                compaction=compaction,
                settings=cast(dict[str, JsonValue], doc.json(settings or {}, _at(at, "settings"))),
                description=doc.optional_string(body.get("description"), _at(at, "description"), "description") or "",
            )
        except UsageError as error:
            doc.fail(at, f"invalid agent {name!r}: {error.message}")
        self.built[name] = agent
        return agent

    def _compaction(self, value: Any, at: str) -> Compaction:
        body = self.doc.mapping(value, at, ("threshold_tokens", "instructions"), "compaction")
        if "threshold_tokens" not in body:
            self.doc.fail(at, "compaction needs threshold_tokens", "e.g. compaction: {threshold_tokens: 50000}")
        return Compaction(
            self.doc.integer(body["threshold_tokens"], _at(at, "threshold_tokens"), "threshold_tokens"),
            self.doc.optional_string(body.get("instructions"), _at(at, "instructions"), "instructions"),
        )

    def _tools(self, value: Any, at: str, taken: set[str]) -> list[ToolRef]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.doc.fail(at, f"tools must be a list, not {_kind(value)}", "e.g. tools: [add_to_cart]")
        refs: list[ToolRef] = []
        names: dict[str, str] = {}
        for i, item in enumerate(value):
            ref = _tool(self.doc, item, _at(at, i))
            if isinstance(ref, ToolLike):
                if ref.name in taken:
                    self.doc.fail(_at(at, i), f"tool {ref.name!r} clashes with a sub-agent's delegate tool", "rename")
                if ref.name in names:
                    self.doc.fail(_at(at, i), f"tool {ref.name!r} is listed twice (also at {names[ref.name]})")
                names[ref.name] = _at(at, i)
            refs.append(ref)
        return refs


# -- tools ------------------------------------------------------------------------------------


def _tool(doc: _Document, item: Any, at: str) -> ToolRef:
    if isinstance(item, dict):
        body = doc.mapping(item, at, _TOOL_KEYS, "a tool entry")
        if "tool" not in body:
            doc.fail(at, "a tool entry needs tool:", "e.g. {tool: add_to_cart, timeout: 5}")
        ref = _resolve_tool(doc, body["tool"], _at(at, "tool"))
        overrides: dict[str, Any] = {key: body[key] for key in _TOOL_KEYS[1:] if key in body}
        return _override(doc, ref, overrides, at) if overrides else ref
    return _resolve_tool(doc, item, at)


def _resolve_tool(doc: _Document, ref: Any, at: str) -> ToolRef:
    if not isinstance(ref, str) or not ref:
        doc.fail(at, f"a tool is named by text, not {_kind(ref)}", "e.g. add_to_cart or 'mypkg.tools:add_to_cart'")
    registry = _tool_registry()
    known = registry.get(ref)
    if known is not None:
        return known
    if ":" not in ref:
        fix = _choices(ref, sorted(registry), "registered tools")
        doc.fail(at, f"unknown tool {ref!r}", f"{fix}; or give an import path like 'mypkg.tools:{ref}'")
    value = _import(doc, ref, at, "tool")
    if isinstance(value, type):
        doc.fail(at, f"{ref!r} is a class, not a tool", "point at an @tool function or a tool source instance")
    if _is_tool(value) or isinstance(value, ToolSourceLike):
        return cast(ToolRef, value)
    if isinstance(value, ToolLike):
        return value
    fix = "decorate it with @tool (from tools import tool)" if callable(value) else "point at an @tool function"
    doc.fail(at, f"{ref!r} is {_kind(value) if not callable(value) else 'a plain function'}, not a Tool", fix)


def _is_tool(value: object) -> bool:
    from tools.tool import Tool  # lazy: orchestrator never imports tools at import

    return isinstance(value, Tool)


def _override(doc: _Document, ref: ToolRef, overrides: Mapping[str, Any], at: str) -> ToolLike:
    if not _is_tool(ref):
        doc.fail(at, "policies can be set only on a single @tool", "remove recovery/needs_approval/timeout here")
    changes: dict[str, Any] = {}
    if "recovery" in overrides:
        recovery = overrides["recovery"]
        if recovery not in ("rerun", "report"):
            doc.fail(_at(at, "recovery"), f"recovery must be rerun or report, not {recovery!r}")
        changes["recovery"] = recovery
    if "needs_approval" in overrides:
        approval = overrides["needs_approval"]
        changes["needs_approval"] = doc.boolean(approval, _at(at, "needs_approval"), "needs_approval")
    if "timeout" in overrides:
        timeout, timeout_at = overrides["timeout"], _at(at, "timeout")
        changes["timeout"] = None if doc.unset(timeout, timeout_at) else doc.number(timeout, timeout_at, "timeout")
    return _with_policies(ref, changes)


def _with_policies(base: Any, changes: Mapping[str, Any]) -> ToolLike:
    """A copy of the ``Tool`` ``base`` with ``changes`` (``dataclasses.replace``, into a picklable class)."""
    tool: ToolLike = _overridden_class()(**{**{f.name: getattr(base, f.name) for f in fields(base)}, **changes})
    return tool


_overridden: type | None = None


def _overridden_class() -> type:
    """``Tool`` with policies set by a config, picklable as "that registered tool, these policies".

    A plain ``dataclasses.replace`` copy of a decorated tool does not pickle: ``Tool.__reduce__``
    then pickles the function by reference, and the module attribute is the original ``Tool``.
    """
    global _overridden
    if _overridden is None:
        from tools.tool import Tool  # lazy: orchestrator never imports tools at import

        class OverriddenTool(Tool):
            __slots__ = ()

            def __reduce__(self) -> tuple[Any, ...]:
                module, qualname = getattr(self.fn, "__module__", ""), getattr(self.fn, "__qualname__", "")
                base = _lookup(module, qualname)
                if not isinstance(base, Tool) or base.fn is not self.fn or base.name != self.name:
                    return super().__reduce__()
                return (_reapply, (module, qualname, self.recovery, self.needs_approval, self.timeout))

        _overridden = OverriddenTool
    return _overridden


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


def _import(doc: _Document, ref: str, at: str, what: str) -> Any:
    module_name, _, attribute = ref.partition(":")
    dotted = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
    if not re.fullmatch(dotted, module_name) or not re.fullmatch(dotted, attribute):
        doc.fail(at, f"{ref!r} is not an import path", f"write 'package.module:attribute' for a {what}")
    try:
        value: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is not None and (module_name == error.name or module_name.startswith(error.name + ".")):
            doc.fail(
                at,
                f"cannot import {ref!r}: no module named {error.name!r}",
                "check the spelling; is the package installed, and on PYTHONPATH?",
            )
        doc.fail(at, f"importing module {module_name!r} failed: {error}", "install what it imports")
    except Exception as error:
        doc.fail(at, f"importing module {module_name!r} raised {type(error).__name__}: {error}", "fix that module")
    for part in attribute.split("."):
        if not hasattr(value, part):
            names = [n for n in dir(value) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}? " if close else ""
            doc.fail(at, f"module {module_name!r} has no attribute {attribute!r}", f"{hint}check the name after ':'")
        value = getattr(value, part)
    return value


# -- models -----------------------------------------------------------------------------------


def _model(doc: _Document, value: Any, at: str) -> ModelAdapter:
    if isinstance(value, str):
        return _named_model(doc, value, at)
    if not isinstance(value, dict) or len(value) != 1:
        doc.fail(at, f"a model must be a mapping with one key ({', '.join(_MODEL_KINDS)}) or a name", _MODEL_EXAMPLE)
    kind, body = next(iter(value.items()))
    if kind == "scripted":
        return _scripted(doc, body, _at(at, "scripted"))
    if kind == "openai":
        return _openai(doc, body, _at(at, "openai"))
    doc.unknown(str(kind), at, _MODEL_KINDS, "the model", "or give a registered model name or an import path")


def _named_model(doc: _Document, ref: str, at: str) -> ModelAdapter:
    factory = _models.get(ref)
    if factory is None:
        if ":" not in ref:
            doc.fail(
                at,
                f"unknown model {ref!r}",
                f"registered models: {', '.join(registered_models()) or 'none'}; "
                f"or give an import path like 'mypkg.models:build', or {_MODEL_EXAMPLE}",
            )
        factory = _import(doc, ref, at, "model")
        if isinstance(factory, ModelAdapter) and not isinstance(factory, type):
            return factory
        if not callable(factory) or _required_parameters(factory):
            doc.fail(at, f"{ref!r} is neither a model nor a zero-argument function returning one")
    try:
        model = factory()
    except Exception as error:
        doc.fail(at, f"building model {ref!r} raised {type(error).__name__}: {error}")
    if not isinstance(model, ModelAdapter):
        doc.fail(at, f"model {ref!r} returned {_kind(model)}, not a model (it needs .name and .stream())")
    return model


def _required_parameters(function: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters)


def _scripted(doc: _Document, body: Any, at: str) -> ScriptedModel:
    per_turn, name, steps_at = False, "scripted", at
    if isinstance(body, dict):
        body = doc.mapping(body, at, _SCRIPTED_KEYS, "the scripted model")
        if "steps" not in body:
            doc.fail(at, "the scripted model needs steps:", "e.g. scripted: {steps: [[{text: Hello}]], per_turn: true}")
        if "per_turn" in body:
            per_turn = doc.boolean(body["per_turn"], _at(at, "per_turn"), "per_turn")
        if "name" in body:
            name = doc.string(body["name"], _at(at, "name"), "name")
        steps_at = _at(at, "steps")
        body = body["steps"]
    if not isinstance(body, list) or not body:
        doc.fail(steps_at, "a script must be a non-empty list of steps, each a list of items", _MODEL_EXAMPLE)
    for i, step in enumerate(body):
        if not isinstance(step, list):
            doc.fail(_at(steps_at, i), f"a step must be a list of items, not {_kind(step)}", "e.g. - [{text: Hello}]")
        for j, item in enumerate(step):
            item_at = _at(_at(steps_at, i), j)
            try:
                check_script([[item]], "item")
            except ConfigError as error:
                detail = error.message.removeprefix("item: steps[0][0]").lstrip(": ").strip()
                unquoted = isinstance(item, dict) and any(
                    not isinstance(item.get(key, ""), str) for key in ("text", "reasoning", "tool", "error")
                )
                fix = "quote the text: YAML reads yes, no, on, off and numbers as other types" if unquoted else None
                doc.fail(item_at, f"bad script item: {detail}", fix)
            doc.json(item, item_at, coerce=False)
    try:
        return ScriptedModel(body, per_turn=per_turn, name=name)
    except ConfigError as error:  # pragma: no cover - every item was checked above
        doc.fail(steps_at, error.message)


def _openai(doc: _Document, body: Any, at: str) -> ModelAdapter:
    if isinstance(body, str):
        body = {"model": body}
    body = doc.mapping(body, at, _OPENAI_KEYS, "the openai model")
    if "model" not in body:
        doc.fail(at, "the openai model needs model:", "e.g. openai: {model: gpt-4o-mini}")
    model = doc.string(body["model"], _at(at, "model"), "model")
    if not model:
        doc.fail(_at(at, "model"), "model is empty", "name the model id, e.g. gpt-4o-mini")
    base_url = doc.optional_string(body.get("base_url"), _at(at, "base_url"), "base_url")
    if base_url is not None and urlsplit(base_url).scheme not in ("http", "https"):
        doc.fail(_at(at, "base_url"), f"base_url {base_url!r} is not an http(s) URL", "e.g. http://localhost:8000/v1")
    options: dict[str, Any] = {
        "base_url": base_url or doc.env.get("OPENAI_BASE_URL") or None,
        "api_key": doc.optional_string(body.get("api_key"), _at(at, "api_key"), "api_key")
        or doc.env.get("OPENAI_API_KEY")
        or None,
    }
    if body.get("settings") is not None:
        settings = doc.json(body["settings"], _at(at, "settings"))
        if not isinstance(settings, dict):
            doc.fail(_at(at, "settings"), "settings must be a mapping", "e.g. settings: {temperature: 0.2}")
        reserved = sorted(settings.keys() & set(_OPENAI_RESERVED))
        if reserved:
            doc.fail(_at(at, "settings"), f"settings may not set {', '.join(reserved)}", "the adapter fills them")
        options["settings"] = settings
    if "timeout" in body:
        options["timeout"] = doc.number(body["timeout"], _at(at, "timeout"), "timeout")
    if "max_retries" in body:
        options["max_retries"] = doc.integer(body["max_retries"], _at(at, "max_retries"), "max_retries", minimum=0)
    if "name" in body:
        options["name"] = doc.string(body["name"], _at(at, "name"), "name")
    if importlib.util.find_spec("openai") is None:
        doc.fail(at, "the openai model needs the openai package", "pip install 'raytroupe[openai]'")
    if options["api_key"] is None and _is_openai(options["base_url"]):
        # OpenAI itself needs a key, which may exist only where the model runs (a Ray worker).
        factory = partial(_build_openai, model, options, f"{at} in {doc.source}")
        return DeferredModel(factory, options.get("name") or f"openai:{model}")
    try:
        return _build_openai(model, options)
    except ConfigError as error:
        doc.fail(at, error.message)


def _is_openai(base_url: str | None) -> bool:
    return base_url is None or (urlsplit(base_url).hostname or "").endswith("openai.com")


def _build_openai(model: str, options: Mapping[str, Any], where: str = "") -> ModelAdapter:
    from orchestrator.models.openai import OpenAIChatModel

    if where and options["api_key"] is None and not os.environ.get("OPENAI_API_KEY"):
        raise ModelError(
            f"{model} needs an API key: set OPENAI_API_KEY where the session runs, or set api_key at {where} "
            "(a local server needs base_url instead)",
            "bad_request",
        )
    return OpenAIChatModel(model, **options)


class DeferredModel:
    """A model built on its first step: for a config that names a key only the worker's environment has.

    Loading succeeds without the key; the first step builds the model (reading the environment
    then) and fails with a message that says what to set when it still cannot.
    """

    def __init__(self, factory: Callable[[], ModelAdapter], name: str) -> None:
        self.factory = factory
        self._name = name
        self._model: ModelAdapter | None = None

    @property
    def name(self) -> str:
        """The model's name (the one the built model will have)."""
        return self._name

    def __repr__(self) -> str:
        return f"DeferredModel(name={self._name!r}, built={self._model is not None})"

    def __getstate__(self) -> dict[str, Any]:
        return {"factory": self.factory, "_name": self._name, "_model": None}  # rebuilt where it lands

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.factory, self._name, self._model = state["factory"], state["_name"], state["_model"]

    def build(self) -> ModelAdapter:
        """The model, built now if it was not yet.

        Raises:
            ModelError: it still cannot be built (the message says what to set).
        """
        if self._model is None:
            self._model = self.factory()
        return self._model

    async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        """The built model's parts for the step."""
        async for part in self.build().stream(request, signal):
            yield part

    async def aclose(self) -> None:
        """Close the built model's connections, if it has any."""
        close = getattr(self._model, "aclose", None)
        if close is not None:
            await close()


# -- runtime ----------------------------------------------------------------------------------

_RUNTIME_KEYS: Final = ("store", "placement", "address", "api_keys", "idle_timeout", "hosts_per_node")


def _runtime(doc: _Document, value: Any) -> RuntimeConfig:
    if value is None:
        return RuntimeConfig()
    body = doc.mapping(value, "runtime", _RUNTIME_KEYS, "runtime")
    options: dict[str, Any] = {}
    if body.get("store") is not None:
        store = doc.string(body["store"], "runtime.store", "store")
        if "://" not in store:
            doc.fail("runtime.store", f"store {store!r} is not a URL", "e.g. sqlite:///troupe.db or memory://")
        options["store"] = store
    if body.get("placement") is not None:
        placement = body["placement"]
        if placement not in ("pooled", "dedicated"):
            doc.fail("runtime.placement", f"placement must be pooled or dedicated, not {placement!r}")
        options["placement"] = placement
    options["address"] = doc.optional_string(body.get("address"), "runtime.address", "address")
    options["api_keys"] = _api_keys(doc, body.get("api_keys"))
    if body.get("idle_timeout") is not None:
        options["idle_timeout"] = doc.number(body["idle_timeout"], "runtime.idle_timeout", "idle_timeout")
    if not doc.unset(hosts := body.get("hosts_per_node"), "runtime.hosts_per_node"):
        options["hosts_per_node"] = doc.integer(hosts, "runtime.hosts_per_node", "hosts_per_node")
    return RuntimeConfig(**options)


def _api_keys(doc: _Document, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):  # "${TROUPE_API_KEYS}": comma separated
        return tuple(key.strip() for key in value.split(",") if key.strip())
    if not isinstance(value, list):
        doc.fail("runtime.api_keys", f"api_keys must be a list or comma-separated text, not {_kind(value)}")
    keys = [doc.string(key, _at("runtime.api_keys", i), "an API key").strip() for i, key in enumerate(value)]
    return tuple(key for key in keys if key)
