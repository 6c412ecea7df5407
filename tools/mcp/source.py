"""MCP servers as tool sources: what an agent declares, and the tools it gets from the server.

An ``MCPSource`` is a frozen, picklable description (it travels to Ray hosts inside the
``Agent``): the server's transport (``Stdio`` or ``StreamableHttp``), an optional name prefix, an
allow/deny list, and per-tool overrides. It holds no connection: ``list_tools`` asks the
connection registry of the process it runs in (``tools.mcp.registry``), so each host connects
from its own node, once per server, shared by its sessions.

The list is live: it is fetched again after every tool call and after the server sends
``notifications/tools/list_changed``, and the run loop reads it when each model step starts.

Recovery comes from the server's annotations: a tool marked ``readOnlyHint`` or
``idempotentHint`` is ``rerun`` after a crash, any other ``report`` (its call is never sent twice);
an override wins. The policy is written into the call's start event, so a host that restarts
after a crash knows it without reaching the server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.core.errors import UsageError
from tools.mcp.spec import ServerSpec, Stdio, StreamableHttp, ToolOverride

__all__ = ["MCPSource", "mcp_http", "mcp_stdio"]


@dataclass(frozen=True, slots=True)
class MCPSource(ServerSpec):
    """An MCP server as a tool source (see the module docstring)."""

    async def list_tools(self, app: Mapping[str, Any]) -> Sequence[Any]:
        """The server's tools now, filtered, renamed and with their policies (``MCPTool``)."""
        try:
            # The SDK is an extra (raytroupe[mcp]): it loads when a server is first listed, not on import.
            from tools.mcp.tools import list_tools
        except ModuleNotFoundError as error:
            if error.name is not None and error.name.split(".")[0] in ("mcp", "mcp_types", "jsonschema"):
                raise UsageError(f"{self.describe()} needs the MCP SDK: pip install 'raytroupe[mcp]'") from None
            raise
        return await list_tools(self)


def mcp_stdio(
    name: str,
    command: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    prefix: str = "",
    allow: Sequence[str] | None = None,
    deny: Sequence[str] = (),
    tools: Mapping[str, ToolOverride] | None = None,
    timeout: float | None = 60.0,
) -> MCPSource:
    """An MCP server started as ``command args...`` and spoken to over stdio."""
    return MCPSource(
        name,
        Stdio(command, tuple(args), dict(env or {}), cwd),
        prefix,
        None if allow is None else tuple(allow),
        tuple(deny),
        dict(tools or {}),
        timeout,
    )


def mcp_http(
    name: str,
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    prefix: str = "",
    allow: Sequence[str] | None = None,
    deny: Sequence[str] = (),
    tools: Mapping[str, ToolOverride] | None = None,
    timeout: float | None = 60.0,
) -> MCPSource:
    """An MCP server reached over streamable HTTP at ``url``."""
    return MCPSource(
        name,
        StreamableHttp(url, dict(headers or {})),
        prefix,
        None if allow is None else tuple(allow),
        tuple(deny),
        dict(tools or {}),
        timeout,
    )
