"""``troupe store migrate`` and ``troupe store copy``, and ``sessions tail`` on a store that pushes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import psycopg
from typer.testing import CliRunner

from actors.local import LocalRuntime
from orchestrator.core.events import Event
from orchestrator.core.fold import fold_events
from orchestrator.store import SqliteStore, open_store
from orchestrator.store._pg_schema import SCHEMA_VERSION
from orchestrator.surfaces.bench.store import three_turn_session
from orchestrator.surfaces.cli.main import app
from orchestrator.surfaces.cli.sessions import follow_events
from orchestrator.surfaces.config import load_agent
from tests.pg import _require_binaries

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def invoke(*args: str) -> Any:
    return runner.invoke(app, list(args))


async def _filled_sqlite(path: Path) -> str:
    """A SQLite store with a real shop session (and its sub-agent's) and two synthetic ones."""
    url = f"sqlite:///{path}"
    async with LocalRuntime(store=url) as runtime:
        turn = await runtime.session("s-shop", agent=load_agent(REPO / "configs" / "bench-shop.yaml")).prompt(
            "two mugs"
        )
        await turn.finished
    store = open_store(url)
    try:
        for name in ("synthetic-1", "synthetic-2"):
            for batch in three_turn_session(name):
                await store.append(name, batch)
    finally:
        await store.close()
    return url


async def _logs(url: str) -> dict[str, list[Event]]:
    store = open_store(url)
    try:
        return {s.session_id: await store.read(s.session_id) for s in await store.list_sessions(limit=1000)}
    finally:
        await store.close()


def test_migrate_creates_then_reports_the_schema(pg_url: str) -> None:
    first = invoke("store", "migrate", pg_url)
    assert first.exit_code == 0, first.output
    assert f"schema 0 -> {SCHEMA_VERSION}" in first.output
    again = invoke("store", "migrate", pg_url)
    assert again.exit_code == 0 and f"schema {SCHEMA_VERSION}, already current" in again.output
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM troupe_schema").fetchone() == (SCHEMA_VERSION,)


def test_migrate_refuses_a_store_that_is_not_postgresql(tmp_path: Path) -> None:
    result = invoke("store", "migrate", f"sqlite:///{tmp_path / 'x.db'}")
    assert result.exit_code == 2
    assert "is not a PostgreSQL store" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_copy_sqlite_to_postgresql_and_back_refolds_the_same(pg_url: str, tmp_path: Path) -> None:
    source = asyncio.run(_filled_sqlite(tmp_path / "from.db"))
    there = invoke("store", "copy", source, pg_url)
    assert there.exit_code == 0, there.output
    back_url = f"sqlite:///{tmp_path / 'back.db'}"
    back = invoke("store", "copy", pg_url, back_url)
    assert back.exit_code == 0, back.output
    original, in_pg, returned = (asyncio.run(_logs(u)) for u in (source, pg_url, back_url))
    assert len(original) >= 4 and "s-shop" in original  # the shop session, its sub-agent's, two synthetic
    assert original == in_pg == returned
    for session_id, log in original.items():
        assert fold_events(in_pg[session_id]) == fold_events(log)
    events = sum(len(log) for log in original.values())
    assert f"copied {len(original)} session(s), {events} event(s)" in " ".join(there.output.split())
    rerun = invoke("store", "copy", source, pg_url)  # everything is there already: replays
    assert rerun.exit_code == 0, rerun.output


def test_copy_into_a_store_holding_other_events_refuses(pg_url: str, tmp_path: Path) -> None:
    source = f"sqlite:///{tmp_path / 'from.db'}"

    async def fill() -> None:
        for url, text in ((source, "here"), (pg_url, "there")):
            store = open_store(url)
            try:
                await store.append("s", [Event(f"e-{text}", "note", {"text": text})])
            finally:
                await store.close()

    asyncio.run(fill())
    result = invoke("store", "copy", source, pg_url)
    assert result.exit_code == 1
    assert "session 's' already holds other events" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


async def test_tail_follows_a_postgresql_store_without_polling(pg_url: str) -> None:
    store = open_store(pg_url)
    try:
        await store.append("s", [Event("e-1", "note", {"text": "one"})])
        # An hour between polls: only the store's LISTEN/NOTIFY can bring the second event in time.
        events = follow_events(store, "s", after=0, interval=3600)
        assert (await asyncio.wait_for(anext(events), 10)).id == "e-1"
        await store.append("s", [Event("e-2", "note", {"text": "two"})])
        assert (await asyncio.wait_for(anext(events), 10)).id == "e-2"
        await events.aclose()
    finally:
        await store.close()


def test_an_unreachable_postgresql_is_one_line_and_a_failure_before_anything_starts() -> None:
    # Port 1 on loopback: nothing listens. The runtime checks its store before Ray starts (this
    # tier refuses ray.init, so reaching it would fail differently).
    url = "postgresql://troupe:secret@127.0.0.1:1/nowhere"
    for command in (["serve", str(REPO / "configs" / "shop.yaml")], ["run", str(REPO / "configs" / "shop.yaml")]):
        result = invoke(*command, "--store", url)
        assert result.exit_code == 1, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1, result.output
        assert lines[0].startswith("error: cannot reach PostgreSQL at postgresql://troupe@127.0.0.1:1/nowhere: ")
        assert "secret" not in result.output


def test_bench_store_runs_sqlite_and_a_throwaway_postgresql_side_by_side(tmp_path: Path) -> None:
    _require_binaries()
    out = tmp_path / "store.json"
    args = ("--parts", "3000", "--sessions", "10", "--store", "sqlite", "--store", "postgres", "--json", str(out))
    result = invoke("bench", "store", *args)
    assert result.exit_code == 0, result.output
    figures = json.loads(out.read_text())
    assert [f["store"] for f in figures] == ["sqlite", "postgres (throwaway server, fsync=off)"]
    for figure in figures:
        assert [run["batch_size"] for run in figure["runs"]] == [64, 256]
        assert all(
            run["parts_per_s"] > 0 and 0 < run["append_ms_p50"] <= run["append_ms_p99"] for run in figure["runs"]
        )
        assert figure["session_bytes"] > 1000
    sqlite, postgres = figures
    assert sqlite["follow_ms"] is None  # SQLite cannot push its commits
    assert 0 <= postgres["follow_ms"]["p50"] <= postgres["follow_ms"]["p99"] <= postgres["follow_ms"]["max"]
    assert "postgres (throwaway server, fsync=off) event store" in result.output
    assert "an acknowledged append reaches it in p50" in result.output


def test_bench_store_refuses_a_store_it_cannot_make() -> None:
    result = invoke("bench", "store", "--store", "mysql://somewhere/db")
    assert result.exit_code == 2  # a usage error, like every other
    assert "give sqlite (or sqlite?OPTIONS, e.g. sqlite?synchronous=full), postgres" in result.output


def test_bench_sqlite_stores_take_the_urls_options() -> None:
    from orchestrator.surfaces.bench.scratch import scratch_stores

    async def write(url: str) -> None:
        store = open_store(url)
        try:
            assert isinstance(store, SqliteStore) and store.synchronous == "full"
            await store.append("s-1", [Event("e-1", "x.note", {})])
        finally:
            await store.close()

    with scratch_stores("sqlite?synchronous=full") as scratch:
        assert scratch.label == "sqlite?synchronous=full"
        url = scratch.fresh()
        assert url.startswith("sqlite:///") and url.endswith(".db?synchronous=full")
        asyncio.run(write(url))
        path = Path(url.removeprefix("sqlite:///").partition("?")[0])
        assert path.exists()
        scratch.drop(url)
        assert not path.exists()
