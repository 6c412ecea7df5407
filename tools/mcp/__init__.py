"""MCP servers as tool sources (``tools.mcp.source``); the SDK loads only when one is used.

``from tools.mcp import mcp_stdio, mcp_http, ToolOverride`` and put the source in an agent's
``tools=[...]``. The connections live per host (``tools.mcp.registry``).
"""

from __future__ import annotations

from tools.mcp.source import MCPSource, mcp_http, mcp_stdio
from tools.mcp.spec import MCPTransport, ServerSpec, Stdio, StreamableHttp, ToolOverride

__all__ = [
    "MCPSource",
    "MCPTransport",
    "ServerSpec",
    "Stdio",
    "StreamableHttp",
    "ToolOverride",
    "mcp_http",
    "mcp_stdio",
]
