"""``troupe run``: run a config's main agent on the embedded defaults and draw it live.

One session: each prompt is a turn, in order; the conversation is drawn as it streams (the
user's message, the reply, each tool call and its state, sub-agents under their delegate calls)
and the turn results are printed at the end. ``--sessions N``: N sessions at once, a progress
bar of completed turns, and a summary (sessions, turns, wall time, sessions/s, failures).
Exit code 0 when every turn succeeded, 1 otherwise.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from orchestrator.core.errors import TroupeError
from orchestrator.core.turn import TurnOutcome
from orchestrator.surfaces.cli.common import (
    ConfigPath,
    LocalOption,
    StoreOption,
    load_target,
    started_runtime,
    stdout,
)
from orchestrator.surfaces.cli.live import LiveTurn, awaiting_approval, caught_up
from orchestrator.surfaces.cli.render import one_line, render_results
from orchestrator.surfaces.event_loop import run_async

if TYPE_CHECKING:
    from actors.base import BaseRuntime
    from actors.client import LiveView
    from orchestrator.core.mutations import ClientView
    from orchestrator.run.agent import Agent

__all__ = ["DEFAULT_PROMPTS", "RAISED", "failed_turn", "run_command", "run_many", "run_one"]

DEFAULT_PROMPTS: Final = (
    "Hi! I'm looking for a gift for a coffee lover.",
    "Yes, please compare prices first.",
    "What's in my cart?",
)
"""The shop demo's first three turns (``configs/shop.yaml``; its fourth, checkout, asks for approval)."""


RAISED: Final = "error"
"""The outcome of a turn that never produced a result: its session raised (a load run goes on)."""


def failed_turn(message: str) -> TurnOutcome:
    """The result of a turn whose session raised ``message`` before the turn ended."""
    return TurnOutcome("", RAISED, "", message)


Results = list[tuple[str, int, TurnOutcome]]


def run_command(
    config: ConfigPath,
    prompt: Annotated[
        list[str] | None,
        typer.Option(
            "--prompt", "-p", help="A user turn; repeat for several, sent in order. Default: the shop's three."
        ),
    ] = None,
    sessions: Annotated[int, typer.Option(min=1, help="Run this many sessions at once (progress bar, summary).")] = 1,
    session_id: Annotated[
        str | None, typer.Option(help="The session id (with --sessions: the prefix). Default: run-<random>.")
    ] = None,
    store: StoreOption = None,
    local: LocalOption = False,
    agent: Annotated[str | None, typer.Option(help="Run this agent of the config instead of its main one.")] = None,
) -> None:
    """Run the config's agent: each --prompt is a turn, drawn live; exit 0 if every turn succeeded."""
    console = stdout()
    main_agent, settings = load_target(config, agent)
    prompts = list(prompt) if prompt else list(DEFAULT_PROMPTS)
    base = session_id or f"run-{secrets.token_hex(2)}"

    async def go() -> bool:
        async with started_runtime(settings, store=store, local=local) as runtime:
            if sessions == 1:
                results = await run_one(runtime, main_agent, base, prompts, console)
                console.print(render_results(results))
            else:
                results = await run_many(runtime, main_agent, base, sessions, prompts, console)
            return all(result.success for _, _, result in results)

    raise typer.Exit(0 if run_async(go()) else 1)


async def run_one(
    runtime: BaseRuntime, agent: Agent, session_id: str, prompts: Sequence[str], console: Console
) -> Results:
    """Send ``prompts`` to one session in order, drawing each turn live; returns the results."""
    session = runtime.session(session_id, agent=agent)
    live = await session.live()
    results: Results = []
    try:
        for number, text in enumerate(prompts, start=1):
            console.rule(f"[dim]{session_id} · turn {number}[/]", style="dim", align="left")
            start = len(live.view.state.messages)
            with LiveTurn(console, live, start, assistant=agent.name):
                turn = await session.prompt(text)
                blocked = await _blocked_on_approval(live, turn.finished)
                if blocked:
                    await session.stop()
                result = await turn.finished
                await caught_up(live, result.index)
            if blocked:
                console.print(
                    Text(
                        "a tool call needed approval, which troupe run cannot give: the turn was stopped; "
                        f"answer approvals in `troupe chat --session-id {session_id}`",
                        style="yellow",
                    )
                )
            results.append((session_id, number, result))
    finally:
        await live.close()
    return results


async def _blocked_on_approval(live: LiveView, finished: asyncio.Future[Any]) -> bool:
    """Wait for the turn to end; ``True`` if a tool call awaits approval first (nobody will answer)."""

    def blocked(view: ClientView) -> bool:
        return awaiting_approval(view.state.messages) is not None

    waiting = asyncio.ensure_future(live.wait_for(blocked))
    try:
        await asyncio.wait({finished, waiting}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
    return not finished.done()


async def run_many(
    runtime: BaseRuntime, agent: Agent, base: str, count: int, prompts: Sequence[str], console: Console
) -> Results:
    """``count`` sessions at once (``<base>-1``...), each sending ``prompts`` in order.

    Shows a progress bar of completed turns, then a summary table, then the first failures.
    """
    results: Results = []
    total = count * len(prompts)

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        auto_refresh=console.is_terminal,
    ) as progress:
        task = progress.add_task("turns", total=total)

        async def one(session_id: str) -> None:
            session = runtime.session(session_id, agent=agent)
            for number, text in enumerate(prompts, start=1):
                try:
                    turn = await session.prompt(text)
                    result = await turn.finished
                except TroupeError as error:
                    result = failed_turn(error.message)
                except Exception as error:  # a load run reports a broken session and goes on
                    result = failed_turn(f"{type(error).__name__}: {error}")
                results.append((session_id, number, result))
                progress.advance(task)
                if result.outcome == RAISED:
                    return

        start = time.perf_counter()
        await asyncio.gather(*(one(f"{base}-{i}") for i in range(1, count + 1)))
        wall = time.perf_counter() - start
        progress.refresh()

    failures = [row for row in results if not row[2].success]
    console.print(_summary(count, len(results), total, len(failures), wall))
    if failures:
        shown = sorted(failures, key=lambda row: (row[0], row[1]))[:10]
        console.print(render_results(shown))
    return results


def _summary(sessions: int, turns: int, total: int, failures: int, wall: float) -> Table:
    table = Table(title="summary", title_justify="left", show_edge=False)
    for name in ("sessions", "turns", "wall time", "sessions/s", "turns/s", "failures"):
        table.add_column(name, justify="right")
    table.add_row(
        str(sessions),
        f"{turns}/{total}",
        f"{wall:.2f} s",
        f"{sessions / wall:.1f}" if wall > 0 else "-",
        f"{turns / wall:.1f}" if wall > 0 else "-",
        one_line(str(failures), 10),
        style="red" if failures else None,
    )
    return table
