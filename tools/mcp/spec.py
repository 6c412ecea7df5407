"""What an MCP server is to Troupe: its transport, a name prefix, an allow/deny list, per-tool overrides.

Frozen, picklable values (they travel to Ray hosts inside the ``Agent``); ``tools.mcp.source``
makes them a tool source, ``tools.mcp.connection`` connects to them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeAlias

from orchestrator.core.errors import UsageError
from tools.tool import Recovery

__all__ = ["MCPTransport", "ServerSpec", "Stdio", "StreamableHttp", "ToolOverride", "expand_env"]

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,47}$")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@dataclass(frozen=True, slots=True)
class Stdio:
    """A server started as a process and spoken to over its stdin and stdout."""

    command: str
    """The executable (looked up on ``PATH``, then beside the running Python: a virtualenv's scripts)."""
    args: tuple[str, ...] = ()
    """Its arguments."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Variables added to the environment (values may hold ``${NAME}``, read where it starts)."""
    cwd: str | None = None
    """Its working directory."""

    def describe(self) -> str:
        """The command line, for errors."""
        return " ".join([self.command, *self.args])


@dataclass(frozen=True, slots=True)
class StreamableHttp:
    """A server reached over streamable HTTP."""

    url: str
    """The endpoint, e.g. ``http://127.0.0.1:8000/mcp``."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Request headers; ``${NAME}`` is read from the environment of the host that connects, so a
    token stays out of the stored agent (e.g. ``{"Authorization": "Bearer ${API_TOKEN}"}``)."""

    def describe(self) -> str:
        """The URL, for errors."""
        return self.url


MCPTransport: TypeAlias = Stdio | StreamableHttp


@dataclass(frozen=True, slots=True)
class ToolOverride:
    """Policies a config sets for one of the server's tools (``None``: as the server says)."""

    recovery: Recovery | None = None
    """``rerun`` or ``report`` instead of the policy from the tool's annotations."""
    needs_approval: bool | None = None
    """Whether a call waits for the user's approval first (default: no)."""
    timeout: float | None = None
    """Seconds before the call fails (default: the source's ``timeout``)."""


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """An MCP server an agent uses: how to reach it, and which of its tools, under what names and policies."""

    name: str
    """The server's name in this config (errors and logs name it)."""
    transport: MCPTransport
    """How to reach it."""
    prefix: str = ""
    """Put before each tool's name for the model (``time_`` makes ``time_get_current_time``)."""
    allow: tuple[str, ...] | None = None
    """Only these tools (the server's names); ``None``: all."""
    deny: tuple[str, ...] = ()
    """Never these tools (the server's names)."""
    tools: Mapping[str, ToolOverride] = field(default_factory=dict)
    """Per-tool overrides, by the server's name."""
    timeout: float | None = 60.0
    """Seconds a call may take unless its override says otherwise (``None``: no limit)."""
    connect_timeout: float = 60.0
    """Seconds to start (or reach) the server and list its tools."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise UsageError(
                f"MCP server name {self.name!r} is not valid: start with a letter, then letters, digits, '_' or '-'"
            )
        if not isinstance(self.transport, Stdio | StreamableHttp):
            raise UsageError(f"MCP server {self.name!r}: transport must be Stdio(...) or StreamableHttp(...)")
        if isinstance(self.transport, StreamableHttp) and not self.transport.url.startswith(("http://", "https://")):
            raise UsageError(f"MCP server {self.name!r}: url must start with http:// or https://")
        if isinstance(self.transport, Stdio) and not self.transport.command:
            raise UsageError(f"MCP server {self.name!r}: command is empty; name the program that serves it")
        object.__setattr__(self, "allow", None if self.allow is None else tuple(self.allow))
        object.__setattr__(self, "deny", tuple(self.deny))
        object.__setattr__(self, "tools", dict(self.tools))
        for tool_name, override in self.tools.items():
            if not isinstance(override, ToolOverride):
                raise UsageError(f"MCP server {self.name!r}: tools[{tool_name!r}] must be a ToolOverride")
            if override.recovery not in (None, "rerun", "report"):
                raise UsageError(
                    f"MCP server {self.name!r}: tools[{tool_name!r}].recovery must be rerun or report, "
                    f"not {override.recovery!r}"
                )
            if override.timeout is not None and override.timeout <= 0:
                raise UsageError(f"MCP server {self.name!r}: tools[{tool_name!r}].timeout must be positive")
        if self.timeout is not None and self.timeout <= 0:
            raise UsageError(f"MCP server {self.name!r}: timeout must be a positive number of seconds (or None)")

    def describe(self) -> str:
        """``'name' (command: ...)`` or ``'name' (url: ...)``, for errors."""
        kind = "command" if isinstance(self.transport, Stdio) else "url"
        return f"MCP server {self.name!r} ({kind}: {self.transport.describe()})"

    def wants(self, server_name: str) -> bool:
        """Whether the server's tool ``server_name`` is one this agent uses."""
        if self.allow is not None and server_name not in self.allow:
            return False
        return server_name not in self.deny


def expand_env(text: str, what: str, env: Mapping[str, str] | None = None) -> str:
    """``text`` with ``${NAME}`` and ``${NAME:-default}`` read from ``env`` (this process's by default).

    Raises:
        UsageError: a variable without a default is not set (``what`` says where it was needed).
    """
    source = os.environ if env is None else env

    def value(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = source.get(name)
        if not found and default is not None:
            return default
        if found is None:
            raise UsageError(f"{what} needs the environment variable {name}; set it, or write ${{{name}:-default}}")
        return found

    return _VARIABLE.sub(value, text)
