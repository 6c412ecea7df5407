"""The names a config may use: registered tools (the built-in ones to start with) and models.

A registry is process-wide: a program registers its tools and model factories before it loads
a config that names them. Ray workers unpickle agents, not configs, so they need no registry.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from orchestrator.core.errors import UsageError
from orchestrator.models.base import ModelAdapter
from orchestrator.run.toolport import ToolLike
from tools.builtin import BUILTIN_TOOLS

__all__ = [
    "find_model",
    "find_tool",
    "register_model",
    "register_tool",
    "registered_models",
    "registered_tools",
    "unregister_model",
    "unregister_tool",
]

_tools: dict[str, ToolLike] = dict(BUILTIN_TOOLS)
_models: dict[str, Callable[[], ModelAdapter]] = {}


def find_tool(name: str) -> ToolLike | None:
    """The tool registered as ``name``, if any."""
    return _tools.get(name)


def find_model(name: str) -> Callable[[], ModelAdapter] | None:
    """The model factory registered as ``name``, if any."""
    return _models.get(name)


def register_tool(tool: ToolLike, *, replace: bool = False) -> None:
    """Make ``tool`` available to configs under its name (the built-in tools are registered already).

    Raises:
        UsageError: another tool has that name and ``replace`` is false.
    """
    if not isinstance(tool, ToolLike) or isinstance(tool, type):
        raise UsageError(f"register_tool() takes a tool (an @tool function), not {type(tool).__name__}")
    known = _tools.get(tool.name)
    if known is not None and known is not tool and not replace:
        raise UsageError(f"a tool named {tool.name!r} is already registered; pass replace=True to replace it")
    _tools[tool.name] = tool


def unregister_tool(name: str) -> None:
    """Forget a registered tool (a no-op for an unknown name)."""
    _tools.pop(name, None)


def registered_tools() -> list[str]:
    """The names configs may use in ``tools:``."""
    return sorted(_tools)


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
