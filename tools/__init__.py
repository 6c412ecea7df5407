"""Tools: ``@tool``, the ``ToolContext`` a tool may declare, and tool sources."""

from __future__ import annotations

from tools.context import ToolContext
from tools.source import StaticTools, ToolSource
from tools.tool import Approval, Recovery, Tool, tool

__all__ = ["Approval", "Recovery", "StaticTools", "Tool", "ToolContext", "ToolSource", "tool"]
