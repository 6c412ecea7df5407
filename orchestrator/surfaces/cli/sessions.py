"""``troupe sessions``: read session logs straight from the store, with no Ray and no runtime.

``list`` pages through the store's sessions, ``show`` folds a log (``fold_events``) and draws the
conversation, ``replay`` does the same up to an event index and lists the events it folded, and
``fork`` starts a new session from any point of one (``orchestrator.run.fork``), and
``tail`` prints events as they are appended: woken by the store when it can push new events
(PostgreSQL's ``LISTEN``/``NOTIFY``: ``base.Followable``), else re-reading after the last index it
printed every ``--interval`` seconds (a SQLite file written by another process sends no signal).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from orchestrator.core.events import Event
from orchestrator.core.ids import new_id
from orchestrator.run.fork import fork_session
from orchestrator.store.base import EventStore, Followable
from orchestrator.surfaces.cli.common import DEFAULT_STORE, STORE_ENV, fail, open_read_store, stdout
from orchestrator.surfaces.cli.render import event_summary, render_conversation, render_events

__all__ = ["event_line", "follow_events", "sessions_app"]

sessions_app = typer.Typer(help="Read sessions straight from the event store (no Ray).", no_args_is_help=True)

Store = Annotated[str, typer.Option("--store", envvar=STORE_ENV, help="The event store URL.")]


@sessions_app.command("list")
def list_command(
    store: Store = DEFAULT_STORE,
    prefix: Annotated[str | None, typer.Option(help="Only sessions whose id starts with this.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many rows.")] = 100,
) -> None:
    """The store's sessions (sub-agent runs are ``<parent>/<call id>``): id, events, last activity."""

    async def go() -> Table:
        events = await open_read_store(store)
        rows: list[Any] = []
        try:
            after: str | None = None
            while len(rows) < limit:  # Troupe's own logs (``troupe:...``, e.g. API key owners) are skipped
                page = await events.list_sessions(prefix=prefix, after=after, limit=limit)
                rows += [r for r in page if not r.session_id.startswith("troupe:")][: limit - len(rows)]
                if len(page) < limit:
                    break
                after = page[-1].session_id
        finally:
            await events.close()
        table = Table(title=f"sessions in {store}", title_justify="left", show_edge=False)
        table.add_column("id")
        table.add_column("events", justify="right")
        table.add_column("last activity")
        for row in rows:
            when = datetime.fromtimestamp(row.updated_at).strftime("%Y-%m-%d %H:%M:%S")
            table.add_row(row.session_id, str(row.last_index), when)
        if not rows:
            table.caption = "no sessions" + (f" starting with {prefix!r}" if prefix else "")
        return table

    stdout().print(asyncio.run(go()))


async def _read(store: str, session_id: str, through: int | None = None) -> list[Event]:
    events_store = await open_read_store(store)
    try:
        events = await events_store.read(session_id, after=0, limit=through)
    finally:
        await events_store.close()
    if not events:
        fail(f"no session {session_id!r} in {store}; `troupe sessions list --store {store}` shows the ones there")
    return events


def _header(console: Console, session_id: str, events: list[Event], through: int | None = None) -> None:
    from orchestrator.core.fold import fold_events

    state = fold_events(events)
    at = f" through event {events[-1].index}" if through is not None and events else ""
    console.print(
        Text.assemble(
            ("session ", "dim"),
            (session_id, "bold"),
            (f"{at} · {len(events)} events · {state.turns} turn(s) · {state.session.status}", "dim"),
        )
    )
    console.print(render_conversation(state.messages, error=state.session.error))


@sessions_app.command("show")
def show_command(
    session_id: Annotated[str, typer.Argument(help="The session id.")],
    store: Store = DEFAULT_STORE,
) -> None:
    """Fold the session's log and draw the conversation, sub-agents nested under their calls."""
    events = asyncio.run(_read(store, session_id))
    _header(stdout(), session_id, events)


@sessions_app.command("replay")
def replay_command(
    session_id: Annotated[str, typer.Argument(help="The session id.")],
    through: Annotated[int | None, typer.Option(min=1, help="Fold events 1..INDEX only (default: all).")] = None,
    store: Store = DEFAULT_STORE,
) -> None:
    """The session as it was at event INDEX: the events folded (index, type, summary), then the conversation."""
    events = asyncio.run(_read(store, session_id, through))
    console = stdout()
    console.print(render_events(events, title=f"events of {session_id}"))
    _header(console, session_id, events, through=through)


@sessions_app.command("fork")
def fork_command(
    session_id: Annotated[str, typer.Argument(help="The session to fork.")],
    at: Annotated[int, typer.Option("--at", help="Fork after event INDEX (0 .. the session's last index).")],
    fork_id: Annotated[str | None, typer.Option("--id", help="The new session's id (default: a fresh one).")] = None,
    store: Store = DEFAULT_STORE,
) -> None:
    """A new session whose log is SESSION_ID's events 1..INDEX, sub-agents included; it runs on its own.

    Forked in the middle of a turn, the new session's turn is interrupted as a crash there would
    leave it; the next runtime to open it recovers it by the tools' policies. A bad INDEX or a
    taken id writes nothing.
    """
    target = fork_id or new_id("s")

    async def go() -> int:
        events_store = await open_read_store(store)
        try:
            if await events_store.last_index(session_id) == 0:
                fail(
                    f"no session {session_id!r} in {store}; `troupe sessions list --store {store}` shows the ones there"
                )
            steps = await fork_session(events_store, session_id, target, at)
        finally:
            await events_store.close()
        return len(steps) - 1

    children = asyncio.run(go())
    extra = f", with {children} sub-agent session{'s' if children != 1 else ''}" if children else ""
    stdout().print(f"forked {session_id} at {at} into {target}{extra}", markup=False, highlight=False)


async def follow_events(
    store: EventStore, session_id: str, *, after: int = 0, interval: float = 0.2
) -> AsyncGenerator[Event, None]:
    """The session's events with index > ``after``, then each new one as it is appended (forever).

    Uses the store's own ``follow`` when it has one (no polling); otherwise polls with
    ``store.read(session_id, after=last)`` every ``interval`` seconds while nothing is new.
    """
    if isinstance(store, Followable):
        async with contextlib.aclosing(store.follow(session_id, after)) as pushed:
            async for event in pushed:
                yield event
        return
    while True:
        events = await store.read(session_id, after=after)
        for event in events:
            yield event
            after = event.index
        if not events:
            await asyncio.sleep(interval)


def event_line(event: Event, width: int = 100) -> Text:
    """One event as one line: index, time, type and summary."""
    when = datetime.fromtimestamp(event.at).strftime("%H:%M:%S.%f")[:-3] if event.at else ""
    return Text.assemble(
        (f"{event.index:>5} ", "bold"), (f"{when} ", "dim"), (f"{event.type} ", "cyan"), event_summary(event, width)
    )


@sessions_app.command("tail")
def tail_command(
    session_id: Annotated[str, typer.Argument(help="The session id.")],
    store: Store = DEFAULT_STORE,
    lines: Annotated[int, typer.Option("--lines", "-n", min=0, help="Print the last N events first.")] = 10,
    follow: Annotated[bool, typer.Option(help="Keep printing new events until Ctrl-C.")] = True,
    interval: Annotated[
        float, typer.Option(min=0.01, help="Seconds between re-reads while nothing is new (stores that push: unused).")
    ] = 0.2,
) -> None:
    """Print the session's last events, then each new one as it is appended (Ctrl-C ends it)."""
    console = stdout()

    async def go() -> None:
        events_store = await open_read_store(store)
        try:
            last = await events_store.last_index(session_id)
            for event in await events_store.read(session_id, after=max(last - lines, 0)):
                console.print(event_line(event), soft_wrap=True)
            if follow:
                if last == 0:
                    console.print(Text(f"waiting for session {session_id!r} to write events…", style="dim"))
                async for event in follow_events(events_store, session_id, after=last, interval=interval):
                    console.print(event_line(event), soft_wrap=True)
        finally:
            await events_store.close()

    try:
        asyncio.run(go())
    except KeyboardInterrupt:
        pass  # Ctrl-C is how tail ends
