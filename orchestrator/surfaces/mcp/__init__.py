"""``troupe mcp``: a config's agents served as MCP tools (``orchestrator.surfaces.mcp.server``)."""

from __future__ import annotations

from orchestrator.surfaces.mcp.server import agent_server, progress_chunks

__all__ = ["agent_server", "progress_chunks"]
