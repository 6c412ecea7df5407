"""The ``troupe`` command line.

Errors are one line (what went wrong and how to fix it) and a non-zero exit code. Heavy imports
(Ray, the HTTP server) happen inside the commands that need them, so ``troupe --help`` is fast.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from orchestrator.errors import TroupeError

app = typer.Typer(
    name="troupe",
    help="Troupe: durable, actor-model LLM agent sessions on Ray.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
bench_app = typer.Typer(
    help="Benchmarks that measure this machine (see the README for the figures).", no_args_is_help=True
)
app.add_typer(bench_app, name="bench")

console = Console()
err_console = Console(stderr=True)


def _write_json(path: Path | None, data: object) -> None:
    if path is not None:
        path.write_text(json.dumps(data, indent=2, default=str) + "\n")
        console.print(f"figures written to {path}")


@bench_app.command("reducer")
def bench_reducer_command(
    deltas: Annotated[int, typer.Option(help="Text-deltas applied per measurement.")] = 200_000,
    repeats: Annotated[int, typer.Option(help="Measurements per case (the median is reported).")] = 5,
    json_file: Annotated[Path | None, typer.Option("--json", help="Also write the figures to this JSON file.")] = None,
) -> None:
    """Text-deltas/s through the session reducer: 10 vs 10,000 messages, and nested two deep."""
    from orchestrator.bench.reducer import bench_reducer, format_reducer_bench

    results = bench_reducer(deltas=deltas, repeats=repeats)
    console.print(format_reducer_bench(results))
    _write_json(json_file, [r.__dict__ if hasattr(r, "__dict__") else _case(r) for r in results])


def _case(case: object) -> dict[str, object]:
    return {name: getattr(case, name) for name in getattr(case, "__slots__", ())}


def main() -> None:
    """Entry point of the ``troupe`` console script."""
    try:
        app()
    except TroupeError as error:
        err_console.print(f"[bold red]error:[/] {error.message}", highlight=False)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)


__all__ = ["app", "asyncio", "main"]
