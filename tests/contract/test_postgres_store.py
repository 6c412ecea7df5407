"""What only the PostgreSQL store has: several store objects on one database, schema versions,
following by LISTEN/NOTIFY, and surviving a server restart (the contract suite covers the rest)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest

from orchestrator.core.errors import ConcurrencyConflict, PartialDuplicateBatch, StoreError
from orchestrator.core.events import AppendResult, Event
from orchestrator.core.wire import pack
from orchestrator.store import AppendBatch, EventStore, open_store
from orchestrator.store._pg_engine import Retry
from orchestrator.store._pg_follow import LISTENER_NAME
from orchestrator.store._pg_schema import MIGRATIONS, SCHEMA_VERSION
from orchestrator.store._pg_write import Outcome
from orchestrator.store._validate import PreparedBatch
from orchestrator.store.base import Followable, FollowsInGroups
from orchestrator.store.postgres import PostgresStore
from orchestrator.testing import eventually
from tests.pg import PgServer, _free_port


def ev(event_id: str) -> Event:
    return Event(event_id, "note", {"n": event_id}, 0.0)


@pytest.fixture
async def two(pg_url: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    first, second = PostgresStore(pg_url), PostgresStore(pg_url)
    yield first, second
    await first.close()
    await second.close()


async def test_open_store_opens_both_schemes(pg_url: str) -> None:
    for url in (pg_url, pg_url.replace("postgresql://", "postgres://", 1)):
        store = open_store(url)
        try:
            assert isinstance(store, PostgresStore) and store.url == url
            await store.append("s", [ev(f"{url[:8]}-a")])
        finally:
            await store.close()


async def test_it_is_an_event_store_that_can_be_followed(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    try:
        assert isinstance(store, EventStore) and isinstance(store, Followable) and isinstance(store, FollowsInGroups)
    finally:
        await store.close()


async def test_a_store_dropped_without_close_ends_its_thread(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    await store.append("s", [ev("a")])
    thread = store._engine._thread
    del store
    gc.collect()
    await eventually(lambda: not thread.is_alive(), 10)
    reopened = PostgresStore(pg_url)
    try:
        assert [e.id for e in await reopened.read("s")] == ["a"]
    finally:
        await reopened.close()


async def test_two_store_objects_never_both_win_one_index(two: tuple[PostgresStore, PostgresStore]) -> None:
    first, second = two
    await first.append("s", [ev("base")])
    for round_ in range(10):
        at = 1 + round_
        outcomes = await asyncio.gather(
            first.append("s", [ev(f"a{round_}")], expected_index=at),
            second.append("s", [ev(f"b{round_}")], expected_index=at),
            return_exceptions=True,
        )
        winners = [o for o in outcomes if isinstance(o, AppendResult)]
        assert winners == [AppendResult("s", at + 1, at + 1)]
        assert sum(isinstance(o, ConcurrencyConflict) for o in outcomes) == 1
    events = await second.read("s")
    assert [e.index for e in events] == list(range(1, 12))  # gap-free


async def test_two_store_objects_interleave_many_sessions_without_gaps(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    first, second = two
    await asyncio.gather(
        *(
            store.append(f"s{i % 7}", [ev(f"{name}{i}-x"), ev(f"{name}{i}-y")])
            for i in range(60)
            for name, store in (("a", first), ("b", second))
        )
    )
    for k in range(7):
        assert [e.index for e in await first.read(f"s{k}")] == list(range(1, len(await first.read(f"s{k}")) + 1))
    assert sum(s.last_index for s in await first.list_sessions()) == 240


async def test_a_group_commit_is_one_transaction(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    try:
        await store.append("warm", [ev("w")])
        before = store.commits
        results = await store.append_many([AppendBatch(f"s{i}", [ev(f"e{i}")]) for i in range(50)])
        assert results == [AppendResult(f"s{i}", 1, 1) for i in range(50)]
        assert store.commits == before + 1
    finally:
        await store.close()


async def test_the_appends_of_one_loop_turn_travel_together_each_with_its_own_outcome(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    try:
        await store.append("taken", [ev("t1")])
        trips: list[int] = []
        submit = store._writer.submit

        async def counted(batches: list[PreparedBatch | StoreError]) -> list[Outcome]:
            trips.append(len(batches))
            return await submit(batches)

        store._writer.submit = counted  # type: ignore[method-assign]
        before = store.commits
        appends = [asyncio.ensure_future(store.append(f"s{i}", [ev(f"e{i}")])) for i in range(20)]
        stale = asyncio.ensure_future(store.append("taken", [ev("t2")], expected_index=0))  # a conflict among them
        cancelled = asyncio.ensure_future(store.append("left", [ev("l1")]))
        await asyncio.sleep(0)  # each append queues its batch (one turn of the loop)
        cancelled.cancel()  # its caller gives up: the batch was queued, so it is written all the same
        results = await asyncio.gather(*appends)
        assert results == [AppendResult(f"s{i}", 1, 1) for i in range(20)]
        with pytest.raises(ConcurrencyConflict):
            await stale
        assert trips == [22] and store.commits == before + 1
        assert [e.id for e in await store.read("left")] == ["l1"]
        queued = asyncio.ensure_future(store.append("late", [ev("z1")]))
        await asyncio.sleep(0)
        await store.close()  # what the loop queued before the close is committed, not refused
        assert await queued == AppendResult("late", 1, 1)
    finally:
        await store.close()
    reopened = PostgresStore(pg_url)
    try:
        assert [e.id for e in await reopened.read("late")] == ["z1"]
    finally:
        await reopened.close()


# -- schema versions -----------------------------------------------------------------------------


async def _versions(url: str) -> list[int]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cursor = await conn.execute("SELECT version FROM troupe_schema ORDER BY version")
        return [row[0] for row in await cursor.fetchall()]


async def test_stores_opening_a_new_database_at_once_migrate_it_once(pg_url: str) -> None:
    stores = [PostgresStore(pg_url) for _ in range(4)]
    try:
        await asyncio.gather(*(s.append(f"s{i}", [ev(f"e{i}")]) for i, s in enumerate(stores)))
    finally:
        for store in stores:
            await store.close()
    assert await _versions(pg_url) == list(range(1, SCHEMA_VERSION + 1))


async def test_a_newer_schema_is_refused_and_left_alone(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    await store.append("s", [ev("a")])
    await store.close()
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await conn.execute("INSERT INTO troupe_schema VALUES (%s, 0)", (SCHEMA_VERSION + 5,))
    newer = PostgresStore(pg_url)
    try:
        with pytest.raises(StoreError) as raised:
            await newer.read("s")
    finally:
        await newer.close()
    assert raised.value.message.endswith(
        f"was written by a newer Troupe (schema {SCHEMA_VERSION + 5}, this one knows {SCHEMA_VERSION}): "
        "upgrade raytroupe"
    )
    assert await _versions(pg_url) == [*range(1, SCHEMA_VERSION + 1), SCHEMA_VERSION + 5]


async def test_an_unreachable_server_is_one_clear_error_without_the_password() -> None:
    port = _free_port()
    store = open_store(f"postgresql://troupe:s3cret@127.0.0.1:{port}/nowhere")
    try:
        with pytest.raises(StoreError) as raised:
            await store.append("s", [ev("a")])
    finally:
        await store.close()
    message = raised.value.message
    assert message.startswith(f"cannot reach PostgreSQL at postgresql://troupe@127.0.0.1:{port}/nowhere: ")
    assert "refused" in message and "s3cret" not in message


# -- follow ----------------------------------------------------------------------------------------


async def _collect(store: PostgresStore, session_id: str, into: list[Event], after: int = 0) -> None:
    async for event in store.follow(session_id, after):
        into.append(event)


async def test_follow_yields_the_log_then_each_new_commit(two: tuple[PostgresStore, PostgresStore]) -> None:
    reader, writer = two
    await writer.append("s", [ev("a"), ev("b")])
    seen: list[Event] = []
    follower = asyncio.create_task(_collect(reader, "s", seen, after=1))
    try:
        await eventually(lambda: [e.id for e in seen] == ["b"], 10)
        await writer.append("other", [ev("x")])
        await writer.append("s", [ev("c")])
        await writer.append_many([AppendBatch("s", [ev("d")]), AppendBatch("s", [ev("e"), ev("f")])])
        await eventually(lambda: [e.id for e in seen] == ["b", "c", "d", "e", "f"], 10)
        assert [e.index for e in seen] == [2, 3, 4, 5, 6]
    finally:
        follower.cancel()


async def test_follow_groups_hands_over_whole_commits(two: tuple[PostgresStore, PostgresStore]) -> None:
    reader, writer = two
    await writer.append("s", [ev("a"), ev("b")])
    groups: list[list[str]] = []

    async def collect() -> None:
        async for group in reader.follow_groups("s", 0):
            groups.append([e.id for e in group])

    follower = asyncio.create_task(collect())
    try:
        await eventually(lambda: groups == [["a", "b"]], 10)  # the log so far: one read
        await writer.append("s", [ev("c"), ev("d"), ev("e")])
        await eventually(lambda: len(groups) == 2, 10)
        assert groups[1] == ["c", "d", "e"]  # one commit, one group: never split, never empty
        await writer.append("s", [ev("f")])
        await eventually(lambda: [i for g in groups for i in g] == ["a", "b", "c", "d", "e", "f"], 10)
        assert all(groups)
    finally:
        follower.cancel()


async def test_a_follower_catches_up_after_the_listening_connection_drops(
    two: tuple[PostgresStore, PostgresStore], pg_url: str
) -> None:
    reader, writer = two
    seen: list[Event] = []
    follower = asyncio.create_task(_collect(reader, "s", seen))
    try:
        await writer.append("s", [ev("before")])
        await eventually(lambda: len(seen) == 1 and reader.listener.connections == 1, 10)
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as admin:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s "
                "AND datname = current_database()",
                (LISTENER_NAME,),
            )
        # Appended while the listener is gone or coming back: their notifications may be lost.
        await writer.append("s", [ev("during-1")])
        await writer.append("s", [ev("during-2")])
        await eventually(lambda: reader.listener.connections == 2, 10)
        await writer.append("s", [ev("after")])
        await eventually(lambda: [e.id for e in seen] == ["before", "during-1", "during-2", "after"], 10)
    finally:
        follower.cancel()


async def test_closing_the_store_ends_its_followers(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    await store.append("s", [ev("a")])
    seen: list[Event] = []
    follower = asyncio.create_task(_collect(store, "s", seen))
    await eventually(lambda: len(seen) == 1, 10)
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await asyncio.wait_for(follower, 10)


# -- faults ----------------------------------------------------------------------------------------


@pytest.fixture
def own_server() -> Iterator[PgServer]:
    server = PgServer.private()
    yield server
    server.stop()


async def test_a_commit_cut_off_in_flight_is_settled_by_its_transaction_status(pg_url: str) -> None:
    # The writer's rule for a connection lost during COMMIT: ask pg_xact_status about its xid.
    store = PostgresStore(pg_url)
    try:
        await store.append("s", [ev("a")])
        xids = {}
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            for ending in ("COMMIT", "ROLLBACK"):
                await conn.execute("BEGIN")
                cursor = await conn.execute("SELECT pg_current_xact_id()::text")
                row = await cursor.fetchone()
                assert row is not None
                xids[ending] = str(row[0])
                await conn.execute(ending)
        retry = Retry("test", "checking", 5)
        writer = store._writer
        assert await store._engine.call(writer._committed(xids["COMMIT"], retry)) is True
        assert await store._engine.call(writer._committed(xids["ROLLBACK"], retry)) is False
    finally:
        await store.close()


@pytest.mark.slow
async def test_a_server_restart_loses_nothing_acknowledged(own_server: PgServer) -> None:
    url = own_server.create_database()
    store = PostgresStore(url, reconnect_timeout=60)
    acknowledged: list[AppendResult] = []

    async def keep_appending(name: str, count: int) -> None:
        for i in range(count):
            acknowledged.append(await store.append(name, [ev(f"{name}-{i}"), ev(f"{name}-{i}b")]))

    try:
        await keep_appending("before", 20)
        writers = [asyncio.create_task(keep_appending(f"w{k}", 60)) for k in range(4)]
        await eventually(lambda: len(acknowledged) >= 40, 20)
        await asyncio.to_thread(own_server.restart)
        await asyncio.gather(*writers)
        assert store.lost_writes >= 1  # the restart did cut writes off in flight
        await keep_appending("after", 20)
        await store.save_snapshot("after", "ai", 40, b"snap")
    finally:
        await store.close()
    reopened = PostgresStore(url)
    try:
        for name in ["before", "after", "w0", "w1", "w2", "w3"]:
            events = await reopened.read(name)
            count = 20 if name in ("before", "after") else 60
            assert [e.id for e in events] == [x for i in range(count) for x in (f"{name}-{i}", f"{name}-{i}b")]
            assert [e.index for e in events] == list(range(1, 2 * count + 1))
        assert (await reopened.load_snapshot("after", "ai")) is not None
    finally:
        await reopened.close()
    assert len(acknowledged) == 20 + 4 * 60 + 20


# -- derived ids: NULL, as in SQLite -------------------------------------------------------------


def derived(session: str, index: int) -> str:
    return f"troupe:{session}#{index}"


async def _stored_ids(url: str) -> list[str | None]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute("SELECT event_id FROM troupe_events ORDER BY sid, idx")
        return [row[0] for row in await cursor.fetchall()]


async def test_ids_derived_from_the_position_are_stored_as_null_and_read_back(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    try:
        events = [ev("u-1"), ev(derived("s", 2)), ev(derived("s", 3)), ev(derived("s", 9))]
        await store.append("s", events, expected_index=0)
        # Only the ids that match their own position are left out; #9 at index 4 is kept verbatim.
        assert await _stored_ids(pg_url) == ["u-1", None, None, derived("s", 9)]
        assert [e.id for e in await store.read("s")] == [e.id for e in events]
    finally:
        await store.close()


async def test_a_derived_id_stored_as_null_is_still_unique(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    try:
        batch = [ev(derived("s", 1)), ev(derived("s", 2))]
        first = await store.append("s", batch, expected_index=0)
        again = await store.append("s", batch, expected_index=0)  # a retry after a lost reply
        assert again.duplicate and (again.first_index, again.last_index) == (first.first_index, first.last_index)
        with pytest.raises(PartialDuplicateBatch):  # the same ids with other content
            await store.append("s", [Event(derived("s", 1), "note", {"other": 1}, 0.0)], expected_index=0)
        with pytest.raises(PartialDuplicateBatch):  # appended at another position, or in another session
            await store.append("s", [Event(derived("s", 2), "note", {"other": 2}, 0.0)])
        with pytest.raises(PartialDuplicateBatch, match="already belongs to session 's'"):
            await store.append("t", [ev(derived("s", 2))])
        # A retry whose group also holds the original: the group sees its own NULL ids too.
        results = await store.append_many(
            [AppendBatch("u", [ev(derived("u", 1))], 0), AppendBatch("u", [ev(derived("u", 1))], 0)]
        )
        assert [(r.first_index, r.duplicate) for r in results if isinstance(r, AppendResult)] == [(1, False), (1, True)]
        assert [e.id for e in await store.read("s")] == [derived("s", 1), derived("s", 2)]
    finally:
        await store.close()


async def test_rows_of_schema_version_1_keep_their_ids_and_replay(pg_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await _migrate(conn, pg_url, through=1)
        await conn.execute("INSERT INTO troupe_sessions (session_id, last_index) VALUES ('s', 1)")
        await conn.execute(
            "INSERT INTO troupe_events (sid, idx, at, event_id, type, payload) "
            "SELECT sid, 1, 0, %s, 'note', %s FROM troupe_sessions",
            (derived("s", 1), pack({"n": derived("s", 1)})),
        )
    store = PostgresStore(pg_url)
    try:
        assert await store.migrate() == (1, SCHEMA_VERSION)
        assert (await store.append("s", [ev(derived("s", 1))], expected_index=0)).duplicate
        await store.append("s", [ev(derived("s", 2))], expected_index=1)
        assert await _stored_ids(pg_url) == [derived("s", 1), None]
        assert [e.id for e in await store.read("s")] == [derived("s", 1), derived("s", 2)]
    finally:
        await store.close()


async def _migrate(conn: psycopg.AsyncConnection[tuple[object, ...]], url: str, *, through: int) -> None:
    """Lay out the schema as version ``through`` left it (the migrations up to it, recorded)."""
    async with conn.transaction():
        await conn.execute(
            "CREATE TABLE troupe_schema (version integer PRIMARY KEY, applied_at double precision NOT NULL)"
        )
        for version in range(1, through + 1):
            for statement in MIGRATIONS[version - 1]:
                await conn.execute(statement)
            await conn.execute("INSERT INTO troupe_schema VALUES (%s, 0)", (version,))
