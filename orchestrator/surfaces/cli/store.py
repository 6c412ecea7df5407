"""``troupe store``: an event store's schema, and moving logs from one store to another (no Ray).

::

    troupe store migrate URL      bring a PostgreSQL store's schema up to this Troupe's, and say so
    troupe store copy FROM TO     copy every session's log (SQLite -> PostgreSQL, or back), then
                                  refold every session on both sides and compare

``copy`` appends each log in its original order, ids, types, payloads and times, in batches
with ``expected_index`` set, so it is safe to run again (a batch already copied replays as a
duplicate) and it refuses to mix logs: a target session that already holds other events is a
conflict, reported, never merged. Snapshots are not copied (they are a cache: the target
rebuilds them from the logs), and the target's sessions get the copy's time as
``created_at``/``updated_at`` (the store's clock, as for every append).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Annotated, Final

import typer

from orchestrator.core.errors import ConcurrencyConflict, PartialDuplicateBatch, UsageError
from orchestrator.core.events import Event
from orchestrator.core.fold import fold_events
from orchestrator.store import EventStore, describe_url, open_store
from orchestrator.surfaces.cli.common import fail, open_read_store, stdout

__all__ = ["CopyReport", "copy_store", "store_app"]

store_app = typer.Typer(
    help="Look after an event store: its schema, and copying logs between stores.", no_args_is_help=True
)

_PAGE: Final = 500
"""Sessions per listing page, and events per copied batch."""


@dataclass(frozen=True, slots=True)
class CopyReport:
    """What ``copy_store`` did."""

    sessions: int
    """Sessions copied (and verified)."""
    events: int
    """Events in them."""


@store_app.command("migrate")
def migrate_command(
    url: Annotated[str, typer.Argument(help="The store URL (postgresql://user@host:port/db).")],
) -> None:
    """Create or upgrade a PostgreSQL store's tables now (every store also does it on first use)."""
    # Imported here: psycopg is an optional extra, and the CLI must start without it.
    from orchestrator.store.postgres import PostgresStore

    async def go() -> tuple[int, int]:
        store = open_store(url)
        try:
            if not isinstance(store, PostgresStore):
                raise UsageError(
                    f"{describe_url(url)} is not a PostgreSQL store: SQLite files create and keep their "
                    "layout when opened, and memory stores have none; pass a postgresql:// URL"
                )
            return await store.migrate()
        finally:
            await store.close()

    before, after = asyncio.run(go())
    where = describe_url(url)
    if before == after:
        stdout().print(f"{where}: schema {after}, already current")
    else:
        stdout().print(f"{where}: schema {before} -> {after}")


@store_app.command("copy")
def copy_command(
    source: Annotated[str, typer.Argument(metavar="FROM", help="The store to copy from (it is only read).")],
    target: Annotated[str, typer.Argument(metavar="TO", help="The store to copy into.")],
) -> None:
    """Copy every session's log from FROM into TO, then refold each on both sides and compare."""

    async def go() -> CopyReport:
        reader = await open_read_store(source)
        try:
            writer = open_store(target)
            try:
                return await copy_store(reader, writer)
            finally:
                await writer.close()
        finally:
            await reader.close()

    report = asyncio.run(go())
    stdout().print(
        f"copied {report.sessions} session(s), {report.events} event(s) from {describe_url(source)} to "
        f"{describe_url(target)}; every session refolds the same on both sides"
    )


async def copy_store(source: EventStore, target: EventStore) -> CopyReport:
    """Copy every session of ``source`` into ``target`` and verify each by refolding both sides.

    Raises:
        CommandFailed: a target session holds other events, or a copy does not fold the same.
    """
    sessions = events = 0
    after: str | None = None
    while True:
        page = await source.list_sessions(after=after, limit=_PAGE)
        for summary in page:
            log = await source.read(summary.session_id)
            await _copy_log(target, summary.session_id, log)
            copied = await target.read(summary.session_id)
            if copied != log or fold_events(copied) != fold_events(log):
                fail(
                    f"session {summary.session_id!r} does not read back the same from {describe_url(target.url)} "
                    f"({len(copied)} events there, {len(log)} here): nothing was deleted; inspect both with "
                    "troupe sessions replay"
                )
            sessions += 1
            events += len(log)
        if len(page) < _PAGE:
            return CopyReport(sessions, events)
        after = page[-1].session_id


async def _copy_log(target: EventStore, session_id: str, log: list[Event]) -> None:
    for start in range(0, len(log), _PAGE):
        batch = log[start : start + _PAGE]
        try:
            await target.append(session_id, batch, expected_index=batch[0].index - 1, trusted=True)
        except (ConcurrencyConflict, PartialDuplicateBatch) as error:
            fail(
                f"session {session_id!r} already holds other events in {describe_url(target.url)} ({error.message}); "
                "copy into an empty store, or remove that session there first"
            )
