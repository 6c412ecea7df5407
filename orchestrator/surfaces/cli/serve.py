"""``troupe serve``: the HTTP API of a runtime (``orchestrator.surfaces.http.create_app``) under uvicorn.

API keys come from ``--api-key`` (repeatable), the config's ``runtime.api_keys`` and
``$TROUPE_API_KEYS`` (comma separated), merged. With no key the server is open, so it binds
127.0.0.1 unless told otherwise, and warns when told to bind anything else.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer
from rich.console import Console
from rich.text import Text

from orchestrator.surfaces.cli.common import (
    LocalOption,
    StoreOption,
    fail,
    load_target,
    started_runtime,
    stderr,
    stdout,
)
from orchestrator.surfaces.config.runtime import KEYS_ENV, merge_keys
from orchestrator.surfaces.event_loop import loop_runner

if TYPE_CHECKING:
    from orchestrator.run.agent import Agent
    from orchestrator.surfaces.config import RuntimeConfig

__all__ = ["serve_command", "serve_config", "server_runner"]

_LOOPBACK: Final = frozenset({"127.0.0.1", "localhost", "::1"})

Server = Callable[..., Awaitable[None]]
"""``serve(app, host=..., port=...)``: ``orchestrator.surfaces.http.serve``, or a stand-in in tests."""


async def serve_config(
    agent: Agent,
    settings: RuntimeConfig,
    *,
    host: str,
    port: int,
    api_keys: Sequence[str],
    store: str | None = None,
    local: bool = False,
    console: Console | None = None,
    server: Server | None = None,
) -> None:
    """Start the runtime, build the app for ``agent`` and serve it until the server stops."""
    try:
        from orchestrator.surfaces.http import create_app, serve
    except ImportError as error:
        fail(f"troupe serve needs orchestrator.surfaces.http (FastAPI), which cannot be imported: {error}")
    out = console or stdout()
    # Subscriptions follow the store's log when it pushes commits (PostgreSQL's NOTIFY): a server
    # on a node that hosts nothing sees each write at once, without a poll to the session's host.
    async with started_runtime(settings, store=store, local=local, follow="store") as runtime:
        app: Any = create_app(runtime, agent, api_keys=list(api_keys))
        auth = f"{len(api_keys)} API key(s)" if api_keys else "open: no API key"
        out.print(
            Text.assemble(
                ("serving ", "dim"),
                (agent.name, "bold"),
                (" on ", "dim"),
                (f"http://{host}:{port}", "bold"),
                (f" ({auth}; the web chat at /, docs at /docs; Ctrl-C stops)", "dim"),
            )
        )
        await (server or serve)(app, host=host, port=port)


def serve_command(
    config: Annotated[Path, typer.Argument(help="The agent config (YAML) whose agent every session runs.")],
    host: Annotated[str, typer.Option(help="The address to bind (a public one needs --api-key).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="The port.")] = 8000,
    store: StoreOption = None,
    api_key: Annotated[
        list[str] | None,
        typer.Option("--api-key", help=f"A bearer token clients must send; repeat for several (also ${KEYS_ENV})."),
    ] = None,
    local: LocalOption = False,
    agent: Annotated[str | None, typer.Option(help="Serve this agent of the config instead of its main one.")] = None,
) -> None:
    """Serve the HTTP API (sessions, SSE, the AI SDK chat protocol) and the web chat with uvicorn."""
    main_agent, settings = load_target(config, agent)
    keys = merge_keys(api_key, settings.api_keys, os.environ.get(KEYS_ENV))
    if not keys and host not in _LOOPBACK:
        stderr().print(
            Text(
                f"warning: serving on {host} with no API key: anyone who can reach the port can use every "
                "session; pass --api-key (or set TROUPE_API_KEYS)",
                style="yellow",
            ),
            soft_wrap=True,
        )
    with server_runner() as runner:
        runner.run(serve_config(main_agent, settings, host=host, port=port, api_keys=keys, store=store, local=local))


server_runner = loop_runner
"""The event loop a server runs in (``event_loop.loop_runner``: uvloop's when it is installed)."""
