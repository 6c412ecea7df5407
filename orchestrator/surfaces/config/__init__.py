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

The package loads its modules on first use of a name (PEP 562, as ``orchestrator/__init__``
does): ``import orchestrator.surfaces.config`` loads neither ``tools`` nor the YAML machinery, so
a command that only needs ``RuntimeConfig`` does not pay for the tool registry. Each module
imports what it needs at its top: ``document`` (the YAML, ``${VAR}``, typed reads, errors that
name the line), ``runtime`` (``RuntimeConfig``), ``registry`` (registered tools and models),
``models`` (``model:``), ``agents`` (the builder, ``tools:`` and policy overrides), ``loader``
(``load_config``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from orchestrator.surfaces.config.loader import LoadedConfig, load_agent, load_config, parse_config
    from orchestrator.surfaces.config.models import DeferredModel
    from orchestrator.surfaces.config.registry import (
        register_model,
        register_tool,
        registered_models,
        registered_tools,
        unregister_model,
        unregister_tool,
    )
    from orchestrator.surfaces.config.runtime import RuntimeConfig, load_runtime, parse_runtime

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

_MODULES: Final = {
    "DeferredModel": "models",
    "LoadedConfig": "loader",
    "RuntimeConfig": "runtime",
    "load_agent": "loader",
    "load_config": "loader",
    "load_runtime": "runtime",
    "parse_config": "loader",
    "parse_runtime": "runtime",
    "register_model": "registry",
    "register_tool": "registry",
    "registered_models": "registry",
    "registered_tools": "registry",
    "unregister_model": "registry",
    "unregister_tool": "registry",
}
"""Which module of the package defines each public name."""


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
