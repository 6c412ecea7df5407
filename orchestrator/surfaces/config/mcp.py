"""A ``tools:`` entry that is an MCP server: ``{mcp: {...}}``, built into a ``tools.mcp.MCPSource``.

```yaml
tools:
  - mcp:
      name: time                        # errors and logs name it
      command: mcp-server-time          # stdio: command, args, env, cwd
      args: [--local-timezone, UTC]
      prefix: time_                     # the model sees time_get_current_time
      allow: [get_current_time]         # or deny: [...]
      timeout: 30                       # seconds per call (default 60)
      tools:
        get_current_time: {recovery: report, needs_approval: true, timeout: 5}
  - mcp:
      name: search
      url: http://127.0.0.1:8000/mcp    # streamable HTTP: url, headers
      headers: {Authorization: "Bearer ${SEARCH_TOKEN}"}
```

As everywhere in a config, ``${VAR}`` is read when the file loads, so the value is stored with
the agent; write ``$${VAR}`` in ``headers`` or ``env`` to leave it to the host that connects (read
from its environment there, never stored).

A stdio ``command`` is looked up on ``PATH`` where the host starts it, then beside the running
Python (a virtualenv's scripts), so ``troupe`` from a virtualenv finds the servers installed in it.
"""

from __future__ import annotations

from typing import Any, Final

from orchestrator.core.errors import UsageError
from orchestrator.surfaces.config.document import Document, key_path, kind_of
from tools.mcp import MCPSource, Stdio, StreamableHttp, ToolOverride

__all__ = ["MCP_KEYS", "build_mcp"]

MCP_KEYS: Final = (
    "name",
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "prefix",
    "allow",
    "deny",
    "tools",
    "timeout",
)
_OVERRIDE_KEYS: Final = ("recovery", "needs_approval", "timeout")
_EXAMPLE: Final = (
    "e.g. {mcp: {name: time, command: mcp-server-time}} or {mcp: {name: api, url: http://127.0.0.1:8000/mcp}}"
)


def build_mcp(doc: Document, value: Any, at: str) -> MCPSource:
    """The MCP source an ``mcp:`` entry describes (refused with where and how to fix it)."""
    body = doc.mapping(value, at, MCP_KEYS, "an mcp: entry")
    if "name" not in body:
        doc.fail(at, "an MCP server needs a name:", _EXAMPLE)
    name = doc.string(body["name"], key_path(at, "name"), "name")
    if ("command" in body) == ("url" in body):
        doc.fail(at, f"MCP server {name!r} needs either command: (stdio) or url: (streamable HTTP)", _EXAMPLE)
    transport: Stdio | StreamableHttp
    if "command" in body:
        for key in ("url", "headers"):
            if key in body:
                doc.fail(key_path(at, key), f"{key}: is for a server reached by url:, not one started by command:")
        transport = Stdio(
            doc.string(body["command"], key_path(at, "command"), "command"),
            tuple(_strings(doc, body.get("args"), key_path(at, "args"), "args")),
            _text_map(doc, body.get("env"), key_path(at, "env"), "env"),
            doc.optional_string(body.get("cwd"), key_path(at, "cwd"), "cwd"),
        )
    else:
        for key in ("args", "env", "cwd"):
            if key in body:
                doc.fail(key_path(at, key), f"{key}: is for a server started by command:, not one reached by url:")
        transport = StreamableHttp(
            doc.string(body["url"], key_path(at, "url"), "url"),
            _text_map(doc, body.get("headers"), key_path(at, "headers"), "headers"),
        )
    allow = body.get("allow")
    overrides = {
        tool: _override(doc, spec, key_path(key_path(at, "tools"), tool))
        for tool, spec in _mapping(doc, body.get("tools"), key_path(at, "tools"), "tools").items()
    }
    timeout = body.get("timeout", 60.0)
    try:
        return MCPSource(
            name,
            transport,
            doc.optional_string(body.get("prefix"), key_path(at, "prefix"), "prefix") or "",
            None if allow is None else tuple(_strings(doc, allow, key_path(at, "allow"), "allow")),
            tuple(_strings(doc, body.get("deny"), key_path(at, "deny"), "deny")),
            overrides,
            None
            if doc.unset(timeout, key_path(at, "timeout"))
            else doc.number(timeout, key_path(at, "timeout"), "timeout"),
        )
    except UsageError as error:
        doc.fail(at, error.message)


def _override(doc: Document, value: Any, at: str) -> ToolOverride:
    body = doc.mapping(value, at, _OVERRIDE_KEYS, "a tool's overrides")
    recovery = body.get("recovery")
    if recovery not in (None, "rerun", "report"):
        doc.fail(key_path(at, "recovery"), f"recovery must be rerun or report, not {recovery!r}")
    approval = body.get("needs_approval")
    timeout = body.get("timeout")
    return ToolOverride(
        recovery,
        None if approval is None else doc.boolean(approval, key_path(at, "needs_approval"), "needs_approval"),
        None if timeout is None else doc.number(timeout, key_path(at, "timeout"), "timeout"),
    )


def _mapping(doc: Document, value: Any, at: str, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        doc.fail(at, f"{what} must be a mapping, not {kind_of(value)}")
    return {str(k): v for k, v in value.items()}


def _text_map(doc: Document, value: Any, at: str, what: str) -> dict[str, str]:
    return {
        k: str(v) if isinstance(v, int | float) else doc.string(v, key_path(at, k), k)
        for k, v in _mapping(doc, value, at, what).items()
    }


def _strings(doc: Document, value: Any, at: str, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        doc.fail(at, f"{what} must be a list, not {kind_of(value)}", f"e.g. {what}: [a, b]")
    return [str(v) if isinstance(v, int | float) else doc.string(v, key_path(at, i), what) for i, v in enumerate(value)]
