"""An MCP server's tools as Troupe tools: schema, validation, policies, calls and result mapping.

``MCPTool`` is a ``ToolLike``: the run loop describes, validates, gates and runs it like an
``@tool``. Arguments are checked against the server's JSON schema before the call (a bad call
goes back to the model with the reason, and the server never sees it). Results map to outputs:
``structuredContent`` as it is, text as text, several blocks (images, audio, resources) as a list
of parts (an image is ``{"type": "data", "mediaType": ..., "data": base64}``), and a result with
``isError`` as a tool error with its text. The server's progress notifications show on the
running call as preliminary output (``{"progress", "total", "message"}``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import jsonschema
import mcp.types as types

from orchestrator.core._json import JsonObject, JsonValue
from orchestrator.core.errors import ToolError
from orchestrator.models.base import CancelSignal, ToolSpec
from tools.mcp.connection import Connection, connection_key
from tools.mcp.registry import connection
from tools.mcp.spec import ServerSpec
from tools.tool import Recovery

__all__ = ["MCPTool", "connection_for", "list_tools", "map_result", "model_names", "policy_from_annotations"]


_UNCALLABLE = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME = 64


def model_names(prefix: str, server_names: list[str]) -> dict[str, str]:
    """The name a model calls each server tool by: ``prefix`` + its name, made callable.

    Model APIs take tool names of 1-64 of ``[A-Za-z0-9_-]`` (starting with a letter or ``_``); MCP
    servers may use dots, slashes and longer names. Other characters become ``_``; a name still
    too long, or one that two server names would share, ends in ``_`` and 8 hex digits of the
    server name's hash instead, so every name is stable from one listing to the next.
    """

    def cleaned(name: str) -> str:
        text = _UNCALLABLE.sub("_", prefix + name)
        return text if text[:1].isalpha() or text[:1] == "_" else "_" + text

    def hashed(name: str, text: str) -> str:
        return f"{text[: _MAX_NAME - 9]}_{hashlib.sha1(name.encode()).hexdigest()[:8]}"

    plain = {name: cleaned(name) for name in server_names}
    shared = {text for text in plain.values() if list(plain.values()).count(text) > 1}
    return {
        name: hashed(name, text) if len(text) > _MAX_NAME or text in shared else text for name, text in plain.items()
    }


def connection_for(source: ServerSpec) -> Connection:
    """This host's connection to ``source``'s server (one per server, made on first use)."""
    return cast(Connection, connection(connection_key(source), lambda: Connection(source)))


def policy_from_annotations(annotations: types.ToolAnnotations | None) -> Recovery:
    """``rerun`` for a tool the server marks read-only or idempotent, else ``report``."""
    if annotations is not None and (annotations.read_only_hint or annotations.idempotent_hint):
        return "rerun"
    return "report"


@dataclass(frozen=True, slots=True)
class MCPTool:
    """One tool of an MCP server, as the agent sees it (see the module docstring)."""

    name: str
    """The name the model calls it by: the source's prefix + the server's name, made callable
    (``model_names``)."""
    server_name: str
    """Its name on the server."""
    description: str
    """What it does, as the server says."""
    parameters: JsonObject
    """Its input schema, as the server gives it."""
    recovery: Recovery
    """From the annotations, or the override."""
    needs_approval: bool
    """From the override (default: no)."""
    timeout: float | None
    """Seconds a call may take."""
    source: ServerSpec = field(repr=False)
    """The server it comes from."""
    _validator: Any = field(repr=False, compare=False)

    @property
    def spec(self) -> ToolSpec:
        """What the model is told."""
        return ToolSpec(self.name, self.description, self.parameters)

    def approval_prompt(self, arguments: JsonValue) -> str | None:
        """The prompt to ask first, when an override asks for approval."""
        return f"Allow {self.name} with {arguments!r}?" if self.needs_approval else None

    def validate(self, arguments: JsonValue) -> object:
        """Check ``arguments`` against the server's schema.

        Raises:
            ToolError: ``invalid_arguments``, with what is wrong where, for the model.
        """
        if not isinstance(arguments, dict):
            raise ToolError(
                f"Invalid arguments for {self.name}: expected a JSON object, got {arguments!r}. "
                "Call it again with an object matching its schema.",
                "invalid_arguments",
            )
        problems = sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.path))
        if problems:
            listed = "; ".join(f"{'.'.join(str(p) for p in e.path) or 'arguments'}: {e.message}" for e in problems)
            raise ToolError(
                f"Invalid arguments for {self.name}: {listed}. Fix them and call again.", "invalid_arguments"
            )
        return arguments

    async def invoke(
        self,
        arguments: JsonValue,
        *,
        session_id: str,
        call_id: str,
        turn_id: str,
        attempt: int = 1,
        signal: CancelSignal | None = None,
        app: Mapping[str, Any] | None = None,
        emit: Callable[[JsonValue], Awaitable[None]] | None = None,
    ) -> JsonValue:
        """Call the tool on its server; a stop (``signal``) cancels it there too."""
        self.validate(arguments)
        conn = connection_for(self.source)

        async def report(progress: float, total: float | None, message: str | None) -> None:
            if emit is not None:  # the server's progress, shown on the call while it runs
                await emit({"progress": progress, "total": total, "message": message})

        args = cast(dict[str, Any], arguments)
        call = asyncio.ensure_future(conn.call(self.server_name, args, self.timeout, report))
        stop = asyncio.ensure_future((signal or CancelSignal()).wait())
        try:
            await asyncio.wait({call, stop}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            call.cancel()
            with contextlib.suppress(BaseException):
                await call
            raise
        finally:
            stop.cancel()
        if not call.done():  # stopped: cancel it on the server
            call.cancel()
            with contextlib.suppress(BaseException):
                await call
            raise ToolError(f"{self.name} was cancelled", "cancelled")
        return map_result(self.name, call.result())


def map_result(name: str, result: types.CallToolResult) -> JsonValue:
    """A call's result as a tool output (see the module docstring).

    Raises:
        ToolError: the result has ``isError`` (its text is the message).
    """
    parts = [_part(block) for block in result.content]
    if result.is_error:
        text = "\n".join(str(p.get("text", "")) for p in parts if p.get("type") == "text").strip()
        raise ToolError(text or f"{name} failed (the server gave no reason)", "tool_error")
    if result.structured_content is not None:
        return cast(JsonValue, result.structured_content)
    if all(p.get("type") == "text" for p in parts):
        return "\n".join(str(p["text"]) for p in parts)
    return cast(JsonValue, parts)


def _part(block: Any) -> JsonObject:
    match block:
        case types.TextContent():
            return {"type": "text", "text": block.text}
        case types.ImageContent() | types.AudioContent():
            return {"type": "data", "mediaType": block.mime_type, "data": block.data}
        case types.EmbeddedResource():
            resource = block.resource
            if isinstance(resource, types.TextResourceContents):
                return {"type": "text", "text": resource.text}
            return {
                "type": "data",
                "mediaType": resource.mime_type or "application/octet-stream",
                "data": resource.blob,
            }
        case types.ResourceLink():
            return {"type": "text", "text": f"{block.name}: {block.uri}"}
        case _:
            return {"type": "text", "text": str(block)}


async def list_tools(source: ServerSpec) -> list[MCPTool]:
    """``source``'s tools now: allowed, prefixed, with their policies."""
    listed = await connection_for(source).list_tools()
    wanted = [tool for tool in listed if source.wants(tool.name)]
    names = model_names(source.prefix, [tool.name for tool in wanted])
    out: list[MCPTool] = []
    for tool in wanted:
        override = source.tools.get(tool.name)
        schema = cast(JsonObject, dict(tool.input_schema))
        out.append(
            MCPTool(
                name=names[tool.name],
                server_name=tool.name,
                description=tool.description or tool.title or tool.name,
                parameters=schema,
                recovery=(override.recovery if override and override.recovery else None)
                or policy_from_annotations(tool.annotations),
                needs_approval=bool(override and override.needs_approval),
                timeout=override.timeout if override and override.timeout is not None else source.timeout,
                source=source,
                _validator=_validator(schema),
            )
        )
    return out


def _validator(schema: JsonObject) -> Any:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema)
