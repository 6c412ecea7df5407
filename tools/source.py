"""Tool sources: where an agent's tool list comes from, read again on every model step.

A tool call may change what tools exist (it opened a connection, a server added a tool), so the
run loop reads the list through ``list_tools`` before every step and after every tool call. A
static list is the common case; dynamic sources (an MCP server) implement the same protocol.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from tools.tool import Tool

__all__ = ["StaticTools", "ToolSource"]


@runtime_checkable
class ToolSource(Protocol):
    """Anything that can list tools for a session right now."""

    async def list_tools(self, app: Mapping[str, Any]) -> Sequence[Tool]:
        """The tools available now (``app`` is the contract's app state)."""
        ...


@dataclass(frozen=True, slots=True)
class StaticTools:
    """A fixed list of tools."""

    tools: tuple[Tool, ...]

    async def list_tools(self, app: Mapping[str, Any]) -> Sequence[Tool]:
        """The same tools every time."""
        return self.tools
