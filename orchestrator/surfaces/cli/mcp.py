"""``troupe mcp CONFIG``: serve the config's agents as MCP tools (``orchestrator.surfaces.mcp``).

Over stdio (the default: an MCP client starts ``troupe mcp CONFIG`` as its server) or streamable
HTTP (``--transport http``, on 127.0.0.1 unless told otherwise, at ``/mcp``). On stdio, stdout is
the protocol: anything else the runtime prints while it starts goes to stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Literal

import typer

from orchestrator.surfaces.cli.common import LocalOption, StoreOption, fail, started_runtime

__all__ = ["mcp_command", "serve_mcp"]

Transport = Literal["stdio", "http"]


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send what is written to fd 1 to stderr meanwhile (Ray's start-up), keeping stdout clean for MCP."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


async def serve_mcp(
    config: Path,
    *,
    transport: Transport,
    host: str,
    port: int,
    store: str | None,
    local: bool,
    agents: list[str] | None,
) -> None:
    """Load ``config``, start the runtime, and serve its agents until the client (or Ctrl-C) ends it."""
    try:
        from orchestrator.surfaces.mcp import agent_server
    except ImportError as error:
        fail(f"troupe mcp needs the MCP SDK: pip install 'raytroupe[mcp]' ({error})")
    from orchestrator.surfaces.config import RuntimeConfig, load_config

    loaded = load_config(config)
    chosen = dict(loaded.agents)
    if agents:
        missing = [name for name in agents if name not in chosen]
        if missing:
            fail(f"{config} has no agent {', '.join(map(repr, missing))}; its agents: {', '.join(chosen)}")
        chosen = {name: chosen[name] for name in agents}
    settings = loaded.runtime or RuntimeConfig()
    quiet = _stdout_to_stderr() if transport == "stdio" else contextlib.nullcontext()
    with quiet:
        runtime_cm = started_runtime(settings, store=store, local=local)
        runtime = await runtime_cm.__aenter__()
    try:
        server = agent_server(runtime, chosen)
        if transport == "stdio":
            await server.run_stdio_async()
        else:
            await server.run_streamable_http_async(host=host, port=port)
    finally:
        await runtime_cm.__aexit__(None, None, None)


def mcp_command(
    config: Annotated[Path, typer.Argument(help="The agent config (YAML) whose agents become MCP tools.")],
    transport: Annotated[str, typer.Option(help="stdio (an MCP client starts this command) or http.")] = "stdio",
    host: Annotated[str, typer.Option(help="The address to bind (--transport http).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="The port (--transport http).")] = 8000,
    agent: Annotated[
        list[str] | None, typer.Option("--agent", help="Serve only this agent; repeat for several (default: all).")
    ] = None,
    store: StoreOption = None,
    local: LocalOption = False,
) -> None:
    """Serve the config's agents as MCP tools: input a task, output the final text, progress as it streams."""
    if transport not in ("stdio", "http"):
        fail(f"--transport must be stdio or http, not {transport!r}")
    chosen: Transport = "stdio" if transport == "stdio" else "http"
    asyncio.run(serve_mcp(config, transport=chosen, host=host, port=port, store=store, local=local, agents=agent))
