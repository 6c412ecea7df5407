"""The ``troupe`` command line (``troupe = orchestrator.surfaces.cli.main:main``).

::

    troupe run CONFIG [--prompt TEXT]... [--sessions N] [--local]    run an agent, drawn live
    troupe chat CONFIG [--session-id ID] [--local]                   chat in the terminal
    troupe serve CONFIG [--host H] [--port P] [--api-key KEY]...     the HTTP API (uvicorn)
    troupe mcp CONFIG [--transport stdio|http] [--port P]            the agents as MCP tools
    troupe sessions list|show|tail|replay                            read logs from the store (no Ray)
    troupe bench reducer|store|shop|actors                           measure this machine
    troupe store migrate URL | copy FROM TO                          a store's schema; move logs between stores

The commands live in small modules (``cli_run``, ``cli_chat``, ``cli_serve``, ``cli_sessions``,
``cli_bench``; drawing in ``cli_render`` and ``cli_live``). Errors are one line on stderr (what
went wrong and how to fix it) and a non-zero exit code (see ``cli_common.TroupeGroup``). Heavy
imports (Ray, the actors, FastAPI) happen inside the commands that need them, so
``troupe --help`` is fast.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from orchestrator.core.errors import TroupeError, UsageError
from orchestrator.run.gc_tuning import tune_gc
from orchestrator.surfaces.cli import bench as cli_bench
from orchestrator.surfaces.cli import chat as cli_chat
from orchestrator.surfaces.cli import mcp as cli_mcp
from orchestrator.surfaces.cli import run as cli_run
from orchestrator.surfaces.cli import serve as cli_serve
from orchestrator.surfaces.cli import sessions as cli_sessions
from orchestrator.surfaces.cli import store as cli_store
from orchestrator.surfaces.cli.common import CommandFailed, LogFormat, LogLevel, TroupeGroup, configure_logging, report

__all__ = ["app", "main"]

app = typer.Typer(
    name="troupe",
    cls=TroupeGroup,
    help="Troupe: durable, actor-model LLM agent sessions on Ray.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("raytroupe")
        except PackageNotFoundError:  # pragma: no cover - running from a source tree
            number = "unknown"
        typer.echo(f"troupe {number}")
        raise typer.Exit()


@app.callback()
def options(
    log_format: Annotated[
        LogFormat, typer.Option("--log-format", help="How logs look on stderr: console (key=value) or json.")
    ] = "console",
    log_level: Annotated[LogLevel, typer.Option("--log-level", help="The least severe log level shown.")] = "warning",
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Troupe: durable, actor-model LLM agent sessions on Ray."""
    configure_logging(log_format, log_level)
    tune_gc()  # this process serves sessions (or their clients): see orchestrator.run.gc_tuning


app.command("run")(cli_run.run_command)
app.command("chat")(cli_chat.chat_command)
app.command("serve")(cli_serve.serve_command)
app.command("mcp")(cli_mcp.mcp_command)
app.add_typer(cli_sessions.sessions_app, name="sessions")
app.add_typer(cli_bench.bench_app, name="bench")
app.add_typer(cli_store.store_app, name="store")


def main() -> None:
    """Entry point of the ``troupe`` console script."""
    try:
        app()
    except CommandFailed as error:  # raised outside a command (the root group reports the rest)
        report(error.message)
        sys.exit(error.code)
    except TroupeError as error:
        report(error.message)
        sys.exit(2 if isinstance(error, UsageError) else 1)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
