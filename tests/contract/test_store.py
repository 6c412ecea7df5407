"""The EventStore contract: every test runs against every backend (see conftest.py)."""

from __future__ import annotations

import asyncio
import gc
import itertools
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.core._json import JsonObject, JsonValue
from orchestrator.core.errors import ConcurrencyConflict, PartialDuplicateBatch, StoreError, UsageError
from orchestrator.core.events import AppendResult, Event
from orchestrator.store import (
    AppendBatch,
    EventStore,
    LogLoader,
    MemoryStore,
    SessionSummary,
    Snapshot,
    SqliteStore,
    open_store,
    register_backend,
)
from orchestrator.store.sharded import ShardedStore
from orchestrator.surfaces.bench.store import measure_session_bytes


def ev(event_id: str, kind: str = "note", payload: JsonObject | None = None, *, at: float = 0.0) -> Event:
    """A caller-built event (``session_id``/``index`` left for the store to set)."""
    return Event(event_id, kind, {"n": event_id} if payload is None else payload, at)


def ids(events: list[Event]) -> list[str]:
    return [e.id for e in events]


# -- append and read ---------------------------------------------------------------------------


async def test_first_batch_gets_indexes_from_one(store: EventStore) -> None:
    result = await store.append("s", [ev("a"), ev("b"), ev("c")])
    assert result == AppendResult("s", 1, 3, duplicate=False)
    assert await store.last_index("s") == 3


async def test_batches_continue_the_log(store: EventStore) -> None:
    await store.append("s", [ev("a"), ev("b")])
    assert await store.append("s", [ev("c")]) == AppendResult("s", 3, 3)
    assert await store.append("s", [ev("d"), ev("e")]) == AppendResult("s", 4, 5)
    assert ids(await store.read("s")) == ["a", "b", "c", "d", "e"]


async def test_read_sets_session_and_index_and_keeps_type_and_at(store: EventStore) -> None:
    await store.append("s", [Event("a", "t.one", {"x": 1}, 1712345678.123456), Event("b", "t.two", {}, 7)])
    assert await store.read("s") == [
        Event("a", "t.one", {"x": 1}, 1712345678.123456, "s", 1),
        Event("b", "t.two", {}, 7.0, "s", 2),
    ]


async def test_input_session_and_index_fields_are_ignored(store: EventStore) -> None:
    await store.append("s", [Event("a", "t", {}, 0.0, session_id="elsewhere", index=99)])
    [event] = await store.read("s")
    assert (event.session_id, event.index) == ("s", 1)
    assert await store.last_index("elsewhere") == 0


PAYLOADS: list[JsonObject] = [
    {},
    {"text": "héllo ✓ 😀 \x00 nul", "empty": "", "list": [], "dict": {}},
    {"ints": [0, -1, 2**63 - 1, -(2**63), 2**64 - 1], "floats": [0.5, -0.0, 1e300, 5e-324]},
    {"bools": [True, False], "none": None, "one": 1, "one_float": 1.0},
    {"nested": {"a": [{"b": [{"c": [1, [2, [3, {"d": None}]]]}]}]}},
    {"parts": [{"type": "text-delta", "delta": f"A{i:03d}"} for i in range(300)]},  # deflated on SQLite
    {"big": "x" * 200_000, "keys": {f"k{i}": i for i in range(500)}},
]


@pytest.mark.parametrize("payload", PAYLOADS, ids=range(len(PAYLOADS)))
async def test_payloads_round_trip(store: EventStore, payload: JsonObject) -> None:
    await store.append("s", [ev("a", payload=payload)])
    [event] = await store.read("s")
    assert event.payload == payload
    assert [type(v) for v in event.payload.values()] == [type(v) for v in payload.values()]


async def test_tuples_come_back_as_lists(store: EventStore) -> None:
    payload: dict[str, object] = {"pair": (1, (2, 3))}
    await store.append("s", [Event("a", "t", payload)])  # type: ignore[arg-type]  # JSON-able, not JsonValue
    [event] = await store.read("s")
    assert event.payload == {"pair": [1, [2, 3]]}


async def test_the_log_is_isolated_from_callers_objects(store: EventStore) -> None:
    payload: JsonObject = {"items": [1, 2]}
    await store.append("s", [ev("a", payload=payload)])
    items = payload["items"]
    assert isinstance(items, list)
    items.append(3)
    [first] = await store.read("s")
    assert first.payload == {"items": [1, 2]}
    first.payload["items"] = "changed"
    [again] = await store.read("s")
    assert again.payload == {"items": [1, 2]}


async def test_unknown_session_is_empty(store: EventStore) -> None:
    assert await store.last_index("nobody") == 0
    assert await store.read("nobody") == []
    assert await store.read("nobody", after=5, limit=3) == []


async def test_read_after_and_limit(store: EventStore) -> None:
    await store.append("s", [ev(f"e{i}") for i in range(1, 11)])
    assert ids(await store.read("s", after=7)) == ["e8", "e9", "e10"]
    assert ids(await store.read("s", after=2, limit=3)) == ["e3", "e4", "e5"]
    assert [e.index for e in await store.read("s", after=2, limit=3)] == [3, 4, 5]
    assert await store.read("s", after=10) == []
    assert await store.read("s", after=50) == []
    assert await store.read("s", limit=0) == []
    assert ids(await store.read("s", limit=100)) == [f"e{i}" for i in range(1, 11)]


async def test_sessions_are_independent(store: EventStore) -> None:
    await store.append("s1", [ev("a")])
    await store.append("s2", [ev("b"), ev("c")])
    await store.append("s1", [ev("d")])
    assert [(e.id, e.index) for e in await store.read("s1")] == [("a", 1), ("d", 2)]
    assert [(e.id, e.index) for e in await store.read("s2")] == [("b", 1), ("c", 2)]


# -- optimistic concurrency --------------------------------------------------------------------


async def test_expected_index_that_matches_appends(store: EventStore) -> None:
    assert await store.append("s", [ev("a"), ev("b")], expected_index=0) == AppendResult("s", 1, 2)
    assert await store.append("s", [ev("c")], expected_index=2) == AppendResult("s", 3, 3)


@pytest.mark.parametrize("expected", [0, 1, 3, 10])
async def test_expected_index_that_does_not_match_conflicts_and_writes_nothing(
    store: EventStore, expected: int
) -> None:
    await store.append("s", [ev("a"), ev("b")])
    with pytest.raises(ConcurrencyConflict) as raised:
        await store.append("s", [ev("c"), ev("d")], expected_index=expected)
    error = raised.value
    assert (error.session_id, error.expected, error.actual) == ("s", expected, 2)
    assert "expected_index=2" in error.message
    assert await store.last_index("s") == 2
    assert ids(await store.read("s")) == ["a", "b"]
    # The refused ids were not taken: the same batch goes in at the right index.
    assert await store.append("s", [ev("c"), ev("d")], expected_index=2) == AppendResult("s", 3, 4)


async def test_unknown_session_is_at_index_zero(store: EventStore) -> None:
    with pytest.raises(ConcurrencyConflict) as raised:
        await store.append("new", [ev("a")], expected_index=1)
    assert raised.value.actual == 0
    assert await store.list_sessions() == []


async def test_two_hundred_sessions_append_at_once(store: EventStore) -> None:
    results = await asyncio.gather(
        *(store.append(f"s{i:03d}", [ev(f"s{i}-a"), ev(f"s{i}-b")], expected_index=0) for i in range(200))
    )
    assert results == [AppendResult(f"s{i:03d}", 1, 2) for i in range(200)]
    for i in (0, 77, 199):
        assert ids(await store.read(f"s{i:03d}")) == [f"s{i}-a", f"s{i}-b"]
    assert len(await store.list_sessions(limit=1000)) == 200


async def test_racing_writers_on_one_session_exactly_one_wins(store: EventStore) -> None:
    await store.append("s", [ev("first")])
    outcomes = await asyncio.gather(
        *(store.append("s", [ev(f"w{i}-a"), ev(f"w{i}-b")], expected_index=1) for i in range(20)),
        return_exceptions=True,
    )
    winners = [o for o in outcomes if isinstance(o, AppendResult)]
    losers = [o for o in outcomes if not isinstance(o, AppendResult)]
    assert winners == [AppendResult("s", 2, 3)]
    assert len(losers) == 19 and all(isinstance(o, ConcurrencyConflict) and o.actual == 3 for o in losers)
    winner = outcomes.index(winners[0])
    assert ids(await store.read("s")) == ["first", f"w{winner}-a", f"w{winner}-b"]


# -- idempotent re-append ----------------------------------------------------------------------


async def test_identical_reappend_replays_the_original_result(store: EventStore) -> None:
    await store.append("s", [ev("x")])
    original = await store.append("s", [ev("a"), ev("b")])
    await store.append("s", [ev("y")])
    again = await store.append("s", [ev("a"), ev("b")])
    assert again == replace(original, duplicate=True) == AppendResult("s", 2, 3, duplicate=True)
    assert ids(await store.read("s")) == ["x", "a", "b", "y"]


async def test_reappend_with_a_stale_expected_index_is_still_a_replay(store: EventStore) -> None:
    # The acknowledgement of the first append was lost; the retry carries its expected_index.
    await store.append("s", [ev("a"), ev("b")], expected_index=0)
    await store.append("s", [ev("c")], expected_index=2)
    assert await store.append("s", [ev("a"), ev("b")], expected_index=0) == AppendResult("s", 1, 2, True)
    assert await store.append("s", [ev("a"), ev("b")], expected_index=7) == AppendResult("s", 1, 2, True)
    assert await store.last_index("s") == 3


async def test_replay_compares_payload_values_not_bytes(store: EventStore) -> None:
    await store.append("s", [ev("a", payload={"x": 1, "y": {"p": [1, 2], "q": None}})])
    replay = await store.append("s", [ev("a", payload={"y": {"q": None, "p": [1, 2]}, "x": 1})])
    assert replay.duplicate


async def test_replay_ignores_the_events_time(store: EventStore) -> None:
    await store.append("s", [ev("a", at=1.0)])
    assert (await store.append("s", [ev("a", at=2.0)])).duplicate
    assert (await store.read("s"))[0].at == 1.0


async def test_replay_of_a_consecutive_run_of_a_stored_batch(store: EventStore) -> None:
    await store.append("s", [ev("a"), ev("b"), ev("c")])
    assert await store.append("s", [ev("b"), ev("c")]) == AppendResult("s", 2, 3, duplicate=True)


async def test_concurrent_identical_retries_write_once(store: EventStore) -> None:
    results = await asyncio.gather(*(store.append("s", [ev("a"), ev("b")], expected_index=0) for _ in range(10)))
    assert sorted(r.duplicate for r in results) == [False] + [True] * 9
    assert {(r.first_index, r.last_index) for r in results} == {(1, 2)}
    assert await store.last_index("s") == 2


@pytest.mark.parametrize(
    ("original", "reused"),
    [
        (ev("a", payload={"x": 1}), ev("a", payload={"x": 2})),
        (ev("a", payload={"x": 1}), ev("a", payload={"x": 1, "y": 2})),
        (ev("a", payload={"x": 1}), ev("a", payload={"x": True})),  # equal in Python, not in JSON
        (ev("a", payload={"x": 1}), ev("a", payload={"x": 1.0})),
        (ev("a", payload={"x": [1, 2]}), ev("a", payload={"x": [2, 1]})),
        (ev("a", "t.one"), ev("a", "t.two")),
    ],
    ids=["value", "extra-key", "bool-for-int", "float-for-int", "list-order", "type"],
)
async def test_reusing_an_id_with_other_content_is_refused(store: EventStore, original: Event, reused: Event) -> None:
    await store.append("s", [original])
    with pytest.raises(PartialDuplicateBatch) as raised:
        await store.append("s", [ev("fresh"), reused])
    assert raised.value.event_id == "a"
    assert raised.value.code == "PARTIAL_DUPLICATE_BATCH"
    assert ids(await store.read("s")) == ["a"]


async def test_event_ids_are_unique_across_sessions(store: EventStore) -> None:
    await store.append("s1", [ev("a")])
    with pytest.raises(PartialDuplicateBatch) as raised:
        await store.append("s2", [ev("a")])
    assert raised.value.event_id == "a"
    assert "s1" in raised.value.message
    assert await store.last_index("s2") == 0


async def test_a_batch_partly_stored_is_refused(store: EventStore) -> None:
    await store.append("s", [ev("a"), ev("b")])
    with pytest.raises(PartialDuplicateBatch) as raised:
        await store.append("s", [ev("new"), ev("b")])
    assert raised.value.event_id == "b"
    with pytest.raises(PartialDuplicateBatch) as raised:
        await store.append("s", [ev("a"), ev("b"), ev("new")])
    assert raised.value.event_id == "a"
    assert ids(await store.read("s")) == ["a", "b"]
    assert await store.append("s", [ev("new")]) == AppendResult("s", 3, 3)


async def test_stored_events_in_another_order_or_with_gaps_are_refused(store: EventStore) -> None:
    await store.append("s", [ev("a"), ev("b"), ev("c")])
    with pytest.raises(PartialDuplicateBatch) as raised:
        await store.append("s", [ev("b"), ev("a")])
    assert raised.value.event_id == "a"
    with pytest.raises(PartialDuplicateBatch) as raised:
        await store.append("s", [ev("a"), ev("c")])
    assert raised.value.event_id == "c"


async def test_the_same_id_twice_in_one_batch_is_refused(store: EventStore) -> None:
    with pytest.raises(PartialDuplicateBatch) as raised:
        await store.append("s", [ev("a"), ev("b"), ev("a")])
    assert raised.value.event_id == "a"
    assert "twice" in raised.value.message
    assert await store.last_index("s") == 0


# -- append_many -------------------------------------------------------------------------------


async def test_append_many_batches_succeed_or_fail_alone(store: EventStore) -> None:
    if isinstance(store, ShardedStore) and store.shard("s3") is not store.shard("other"):
        pytest.skip("event ids are unique per shard (store/sharded.py): s3 and other live on different shards")
    await store.append("busy", [ev("b0")])
    await store.append("other", [ev("taken")])
    results = await store.append_many(
        [
            AppendBatch("s1", [ev("a1"), ev("a2")]),
            AppendBatch("busy", [ev("b1")], expected_index=0),  # conflict
            AppendBatch("s2", [ev("c1")], expected_index=0),
            AppendBatch("s3", [ev("d1"), ev("taken")]),  # id owned by another session
            AppendBatch("s4", [ev("e1"), ev("e1")]),  # same id twice
            AppendBatch("other", [ev("taken")]),  # replay
        ]
    )
    assert results[0] == AppendResult("s1", 1, 2)
    assert isinstance(results[1], ConcurrencyConflict) and results[1].actual == 1
    assert results[2] == AppendResult("s2", 1, 1)
    assert isinstance(results[3], PartialDuplicateBatch) and results[3].event_id == "taken"
    assert isinstance(results[4], PartialDuplicateBatch) and results[4].event_id == "e1"
    assert results[5] == AppendResult("other", 1, 1, duplicate=True)
    assert ids(await store.read("busy")) == ["b0"]
    assert await store.last_index("s3") == 0
    assert await store.last_index("s4") == 0
    summaries = await store.list_sessions()
    assert [s.session_id for s in summaries] == ["busy", "other", "s1", "s2"]


async def test_append_many_applies_batches_in_order(store: EventStore) -> None:
    results = await store.append_many(
        [
            AppendBatch("s", [ev("a")], expected_index=0),
            AppendBatch("s", [ev("b"), ev("c")], expected_index=1),
            AppendBatch("s", [ev("a")], expected_index=0),  # replay of the first, in the same call
        ]
    )
    assert results == [AppendResult("s", 1, 1), AppendResult("s", 2, 3), AppendResult("s", 1, 1, True)]


async def test_append_many_of_nothing_is_nothing(store: EventStore) -> None:
    assert await store.append_many([]) == []


async def test_append_many_with_an_invalid_batch_writes_nothing(store: EventStore) -> None:
    with pytest.raises(UsageError, match="empty"):
        await store.append_many([AppendBatch("s1", [ev("a")]), AppendBatch("s2", [])])
    assert await store.list_sessions() == []


# -- input checks ------------------------------------------------------------------------------

BAD_APPENDS: list[tuple[str, object, object, object, str]] = [
    # (case, session id, events, expected_index, a phrase the message must contain)
    ("empty-batch", "s", [], None, "empty"),
    ("empty-session", "", [ev("a")], None, "session id is empty"),
    ("session-not-str", 7, [ev("a")], None, "session id must be a string"),
    ("nul-in-session", "s\x00", [ev("a")], None, "NUL"),
    ("long-session", "s" * 2000, [ev("a")], None, "limit 1024"),
    ("empty-event-id", "s", [Event("", "t")], None, "event id is empty"),
    ("empty-type", "s", [Event("a", "")], None, "type is empty"),
    ("nul-in-event-id", "s", [ev("a"), Event("b\x00", "t")], None, "events[1] event id 'b\\x00' contains a NUL"),
    ("surrogate-event-id", "s", [Event("a\ud800", "t")], None, "lone surrogate"),
    ("long-type", "s", [Event("a", "t" * 2000)], None, "event 'a' type is 2000 characters long"),
    ("type-not-str", "s", [Event("a", 5)], None, "type must be a string"),  # type: ignore[arg-type]
    ("not-an-event", "s", [{"id": "a"}], None, "not an Event"),
    ("one-event", "s", ev("a"), None, "wrap it in a list"),
    ("events-not-list", "s", "abc", None, "list of Event"),
    ("set", "s", [ev("a", payload={"tags": {1, 2}})], None, "payload.tags is a set"),  # type: ignore[dict-item]
    ("bytes", "s", [ev("a", payload={"b": [b"x"]})], None, "payload.b[0] is a bytes"),  # type: ignore[list-item]
    ("nan", "s", [ev("a", payload={"x": {"y": float("nan")}})], None, "payload.x.y is nan"),
    ("inf", "s", [ev("a", payload={"x": float("inf")})], None, "payload.x is inf"),
    ("int-key", "s", [ev("a", payload={"x": {1: "one"}})], None, "non-string key"),  # type: ignore[dict-item]
    ("huge-int", "s", [ev("a", payload={"x": 2**70})], None, "64-bit"),
    ("object", "s", [ev("a", payload={"x": object()})], None, "payload.x is a object"),  # type: ignore[dict-item]
    ("payload-list", "s", [Event("a", "t", [1])], None, "JSON object"),  # type: ignore[arg-type]
    ("at-nan", "s", [ev("a", at=float("nan"))], None, "finite"),
    ("at-inf", "s", [ev("a", at=float("-inf"))], None, "finite"),
    ("at-bool", "s", [ev("a", at=True)], None, "finite"),
    ("at-str", "s", [ev("a", at="now")], None, "finite"),  # type: ignore[arg-type]
    ("expected-negative", "s", [ev("a")], -1, "0 or more"),
    ("expected-bool", "s", [ev("a")], True, "integer"),
]


@pytest.mark.parametrize(
    ("session", "events", "expected", "phrase"), [c[1:] for c in BAD_APPENDS], ids=[c[0] for c in BAD_APPENDS]
)
async def test_invalid_appends_name_the_problem_and_write_nothing(
    store: EventStore, session: object, events: object, expected: object, phrase: str
) -> None:
    with pytest.raises(UsageError) as raised:
        await store.append(session, events, expected)  # type: ignore[arg-type]
    assert phrase in raised.value.message
    assert await store.list_sessions() == []


async def test_deep_nesting_is_refused() -> None:
    nested: JsonValue = []
    for _ in range(300):
        nested = [nested]
    store = MemoryStore()
    with pytest.raises(UsageError, match="nested more than"):
        await store.append("s", [ev("a", payload={"deep": nested})])


@pytest.mark.parametrize(
    ("call", "phrase"),
    [
        (lambda s: s.read("", 0), "session id is empty"),
        (lambda s: s.read("s", -1), "after must be 0 or more"),
        (lambda s: s.read("s", 0, -1), "limit must be 0 or more"),
        (lambda s: s.read("s", 1.5), "after must be an integer"),
        (lambda s: s.last_index(""), "session id is empty"),
        (lambda s: s.list_sessions(limit=-1), "limit"),
        (lambda s: s.list_sessions(prefix=3), "prefix must be a string"),
        (lambda s: s.list_sessions(after=5), "after must be the last session id"),
        (lambda s: s.save_snapshot("s", "r", 1, "text"), "must be bytes"),
        (lambda s: s.save_snapshot("s", "", 1, b""), "reducer name is empty"),
        (lambda s: s.save_snapshot("s", "r", -1, b""), "0 or more"),
        (lambda s: s.load_snapshot("", "r"), "session id is empty"),
        (lambda s: s.delete_snapshot("s", ""), "reducer name is empty"),
        (lambda s: s.append_many([("s", [ev("a")])]), "not an AppendBatch"),
    ],
)
async def test_invalid_arguments_raise_usage_errors(store: EventStore, call: object, phrase: str) -> None:
    assert callable(call)
    with pytest.raises(UsageError) as raised:
        await call(store)
    assert phrase in raised.value.message


# -- list_sessions -----------------------------------------------------------------------------


async def test_list_sessions_orders_by_id_and_summarizes(store: EventStore) -> None:
    for sid in ["b", "a", "c"]:
        await store.append(sid, [ev(f"{sid}1")])
    await store.append("a", [ev("a2"), ev("a3")])
    summaries = await store.list_sessions()
    assert [(s.session_id, s.last_index) for s in summaries] == [("a", 3), ("b", 1), ("c", 1)]
    for summary in summaries:
        assert isinstance(summary, SessionSummary)
        assert 0 < summary.created_at <= summary.updated_at
    assert summaries[0].updated_at >= summaries[2].created_at  # "a" was appended to last


async def test_list_sessions_by_prefix(store: EventStore) -> None:
    sids = ["a", "a/1", "a/2", "a/2/x", "ab", "a%", "a_z", "A/1", "b/1", "a/\U0010ffff"]
    for n, sid in enumerate(sids):
        await store.append(sid, [ev(f"e{n}")])

    async def listed(prefix: str | None) -> list[str]:
        return [s.session_id for s in await store.list_sessions(prefix=prefix)]

    assert await listed("a/") == ["a/1", "a/2", "a/2/x", "a/\U0010ffff"]
    assert await listed("a/2") == ["a/2", "a/2/x"]
    assert await listed("a%") == ["a%"]  # not a LIKE wildcard
    assert await listed("a_") == ["a_z"]
    assert await listed("A") == ["A/1"]  # case-sensitive
    assert await listed("a/\U0010ffff") == ["a/\U0010ffff"]
    assert await listed("zzz") == []
    assert await listed("") == sorted(sids)
    assert await listed(None) == sorted(sids)


async def test_list_sessions_pages_with_a_keyset_cursor(store: EventStore) -> None:
    sids = [f"s{i:02d}" for i in range(25)]
    await asyncio.gather(*(store.append(sid, [ev(f"e-{sid}")]) for sid in sids))
    pages: list[list[str]] = []
    after: str | None = None
    while page := await store.list_sessions(after=after, limit=10):
        pages.append([s.session_id for s in page])
        after = page[-1].session_id
    assert [len(p) for p in pages] == [10, 10, 5]
    assert [sid for page in pages for sid in page] == sids
    assert [s.session_id for s in await store.list_sessions(after="s05x", limit=2)] == ["s06", "s07"]
    assert await store.list_sessions(limit=0) == []
    assert [s.session_id for s in await store.list_sessions(after="", limit=1)] == ["s00"]


async def test_list_sessions_prefix_with_cursor(store: EventStore) -> None:
    for sid in ["p/1", "p/2", "p/3", "q/1"]:
        await store.append(sid, [ev(f"e-{sid}")])
    page = await store.list_sessions(prefix="p/", after="p/1", limit=5)
    assert [s.session_id for s in page] == ["p/2", "p/3"]
    assert await store.list_sessions(prefix="p/", after="p/3") == []
    assert [s.session_id for s in await store.list_sessions(prefix="p/", after="a")] == ["p/1", "p/2", "p/3"]


async def test_list_sessions_orders_by_code_point_on_every_backend(store: EventStore) -> None:
    sids = ["z", "é", "e", "E", "ä", "😀", "\uffff", "日本", "a b", "a"]
    for n, sid in enumerate(sids):
        await store.append(sid, [ev(f"e{n}")])
    assert [s.session_id for s in await store.list_sessions()] == sorted(sids)


# -- snapshots ---------------------------------------------------------------------------------


async def test_a_missing_snapshot_is_none(store: EventStore) -> None:
    assert await store.load_snapshot("s", "ai") is None
    await store.delete_snapshot("s", "ai")  # no error


async def test_snapshots_upsert_load_and_delete(store: EventStore) -> None:
    await store.save_snapshot("s", "ai", 3, b"\x00state-3")
    assert await store.load_snapshot("s", "ai") == Snapshot(3, b"\x00state-3")
    await store.save_snapshot("s", "ai", 9, b"state-9")
    assert await store.load_snapshot("s", "ai") == Snapshot(9, b"state-9")
    await store.delete_snapshot("s", "ai")
    assert await store.load_snapshot("s", "ai") is None


async def test_snapshots_are_keyed_by_session_and_reducer(store: EventStore) -> None:
    await store.save_snapshot("s1", "ai", 1, b"s1-ai")
    await store.save_snapshot("s1", "cart", 2, b"s1-cart")
    await store.save_snapshot("s2", "ai", 3, b"s2-ai")
    await store.delete_snapshot("s1", "cart")
    assert await store.load_snapshot("s1", "ai") == Snapshot(1, b"s1-ai")
    assert await store.load_snapshot("s1", "cart") is None
    assert await store.load_snapshot("s2", "ai") == Snapshot(3, b"s2-ai")
    assert await store.list_sessions() == []  # snapshots are not log entries


async def test_load_log_is_the_snapshot_then_the_events_after_it(sqlite_store: SqliteStore) -> None:
    """``LogLoader.load_log`` (SQLite's) answers as load_snapshot, last_index and read would, in one read."""
    store = sqlite_store
    assert isinstance(store, LogLoader)
    assert await store.load_log("s", "ai") == (None, [])  # an unknown session
    await store.append("s", [ev("a"), ev("b"), ev("c")])
    snapshot, events = await store.load_log("s", "ai")
    assert snapshot is None and [e.index for e in events] == [1, 2, 3]
    await store.save_snapshot("s", "ai", 2, b"state-2")
    snapshot, events = await store.load_log("s", "ai")
    assert snapshot == Snapshot(2, b"state-2") and events == await store.read("s", after=2)
    assert [e.id for e in events] == ["c"]
    # A snapshot past the log's end (the log was lost and rewritten) is stale: the whole log.
    await store.save_snapshot("s", "ai", 7, b"state-7")
    snapshot, events = await store.load_log("s", "ai")
    assert snapshot is None and events == await store.read("s")
    assert await store.load_log("s", "other") == (None, await store.read("s"))  # another reducer's key


async def test_a_large_snapshot_round_trips(store: EventStore) -> None:
    data = bytes(range(256)) * 4000
    await store.save_snapshot("s", "ai", 1, data)
    snapshot = await store.load_snapshot("s", "ai")
    assert snapshot is not None and snapshot.data == data


# -- lifecycle ---------------------------------------------------------------------------------


async def test_reopening_sees_the_same_data(store_url: str) -> None:
    first = open_store(store_url)
    await first.append("s", [ev("a"), ev("b")])
    await first.save_snapshot("s", "ai", 2, b"snap")
    await first.close()
    second = open_store(store_url)
    try:
        assert ids(await second.read("s")) == ["a", "b"]
        assert await second.load_snapshot("s", "ai") == Snapshot(2, b"snap")
        assert (await second.append("s", [ev("a"), ev("b")])).duplicate
        assert await second.append("s", [ev("c")], expected_index=2) == AppendResult("s", 3, 3)
    finally:
        await second.close()


async def test_a_closed_store_refuses_every_call(store_url: str) -> None:
    store = open_store(store_url)
    await store.append("s", [ev("a")])
    await store.close()
    await store.close()  # twice is fine
    calls = [
        store.append("s", [ev("b")]),
        store.append_many([AppendBatch("s", [ev("b")])]),
        store.read("s"),
        store.last_index("s"),
        store.list_sessions(),
        store.save_snapshot("s", "ai", 1, b""),
        store.load_snapshot("s", "ai"),
        store.delete_snapshot("s", "ai"),
    ]
    for call in calls:
        with pytest.raises(StoreError, match="closed"):
            await call


async def test_close_finishes_appends_already_queued(store_url: str) -> None:
    store = open_store(store_url)
    await store.append("warm", [ev("w")])
    # gather starts the appends (each queues its batch) before close() runs.
    *results, _ = await asyncio.gather(*(store.append(f"s{i}", [ev(f"e{i}")]) for i in range(50)), store.close())
    assert results == [AppendResult(f"s{i}", 1, 1) for i in range(50)]
    reopened = open_store(store_url)
    try:
        assert len(await reopened.list_sessions(limit=100)) == 51
    finally:
        await reopened.close()


@pytest.mark.parametrize("writer", ["thread", "inline"])
async def test_a_write_waits_for_another_process_lock_without_blocking_the_loop(tmp_path: Path, writer: str) -> None:
    path = tmp_path / "shared.db"
    store = open_store(f"sqlite:///{path}?writer={writer}")
    try:
        await store.append("s", [ev("first")])
        other = sqlite3.connect(path, isolation_level=None)  # as another host process would
        other.execute("BEGIN IMMEDIATE")
        pending = asyncio.ensure_future(store.append("s", [ev("second")]))
        # The loop keeps serving other work while the append waits for the lock: reads go through
        # (a blocked loop could serve none of them), and the append stays pending, however long
        # they take, for as long as the other process holds the lock.
        for _ in range(20):
            assert ids(await asyncio.wait_for(store.read("s"), 5)) == ["first"]
        assert not pending.done()
        other.execute("COMMIT")
        other.close()
        assert await asyncio.wait_for(pending, 5) == AppendResult("s", 2, 2)
        assert ids(await store.read("s")) == ["first", "second"]
    finally:
        await store.close()


async def test_a_store_serves_a_loop_in_another_thread(store: EventStore) -> None:
    async def elsewhere() -> list[Event]:
        await store.append("s", [ev("from-thread")])
        return await store.read("s")

    await store.append("s", [ev("here")])
    events = await asyncio.to_thread(asyncio.run, elsewhere())
    assert ids(events) == ["here", "from-thread"]
    assert ids(await store.read("s")) == ["here", "from-thread"]


async def test_both_backends_satisfy_the_protocol(tmp_path: Path) -> None:
    sqlite_store = SqliteStore(tmp_path / "p.db")
    assert isinstance(MemoryStore(), EventStore)
    assert isinstance(sqlite_store, EventStore)
    await sqlite_store.close()


# -- open_store --------------------------------------------------------------------------------


async def test_memory_urls() -> None:
    assert open_store("memory://") is not open_store("memory://")
    named = open_store("memory://contract-shared")
    assert open_store("memory://contract-shared") is named
    assert named.url == "memory://contract-shared"
    await named.close()
    assert open_store("memory://contract-shared") is not named  # a new handle, on the same data


async def test_sqlite_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    relative = open_store("sqlite:///nested/dir/rel.db")
    absolute = open_store(f"sqlite:///{tmp_path}/abs.db")
    try:
        assert isinstance(relative, SqliteStore) and relative.path == str(tmp_path / "nested/dir/rel.db")
        assert isinstance(absolute, SqliteStore) and absolute.path == str(tmp_path / "abs.db")
        assert relative.url == "sqlite:///nested/dir/rel.db"
        await relative.append("s", [ev("a")])
        await absolute.append("s", [ev("a")])
    finally:
        await relative.close()
        await absolute.close()
    assert (tmp_path / "nested/dir/rel.db").is_file() and (tmp_path / "abs.db").is_file()


@pytest.mark.parametrize(
    ("url", "phrases"),
    [
        (
            "mysql://db/troupe",
            ["unknown store scheme 'mysql'", "memory://", "sqlite:///", "postgresql://", "register_backend"],
        ),
        ("troupe.db", ["no scheme", "sqlite:///relative/path.db"]),
        ("sqlite://host/x.db", ["names a host", "sqlite:////absolute"]),
        ("sqlite://", ["names a host"]),
        ("sqlite:///", ["not a SQLite file URL"]),
        ("sqlite:///:memory:", ["memory://"]),
        ("sqlite:///dir/", ["names a directory"]),
    ],
)
def test_bad_urls_explain_the_fix(url: str, phrases: list[str]) -> None:
    with pytest.raises(UsageError) as raised:
        open_store(url)
    for phrase in phrases:
        assert phrase in raised.value.message


async def test_register_backend_adds_a_scheme() -> None:
    opened: list[str] = []

    def factory(url: str) -> EventStore:
        opened.append(url)
        return MemoryStore(url=url)

    register_backend("contract-fake", factory, replace=True)
    store = open_store("contract-fake://anything")
    assert opened == ["contract-fake://anything"] and store.url == "contract-fake://anything"
    with pytest.raises(UsageError, match="already registered"):
        register_backend("contract-fake", factory)
    with pytest.raises(UsageError, match="lowercase"):
        register_backend("Bad://", factory)
    with pytest.raises(UsageError) as raised:
        open_store("nope://x")
    assert "contract-fake://" in raised.value.message


async def test_an_unopenable_sqlite_path_fails_on_first_use(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    store = open_store(f"sqlite:///{tmp_path}/file/s.db")
    with pytest.raises(StoreError, match="cannot open the store"):
        await store.append("s", [ev("a")])
    with pytest.raises(StoreError, match="cannot open the store"):
        await store.read("s")
    await store.close()


# -- property: appending twice is appending once -----------------------------------------------

_json_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
_json_values: st.SearchStrategy[JsonValue] = st.recursive(
    _json_leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=16,
)
_payloads = st.dictionaries(st.text(max_size=6), _json_values, max_size=4)
_batch_shapes = st.lists(
    st.lists(st.tuples(st.sampled_from(["t.a", "t.b", "ai.stream"]), _payloads), min_size=1, max_size=5),
    min_size=1,
    max_size=4,
)
_examples = itertools.count()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shapes=_batch_shapes, interleaved=st.booleans())
async def test_appending_every_batch_twice_is_appending_it_once(
    store: EventStore, shapes: list[list[tuple[str, JsonObject]]], interleaved: bool
) -> None:
    # One store serves every example, so each example uses its own session and ids.
    n = next(_examples)
    sid = f"prop-{n}"
    batches = [
        [Event(f"prop-{n}-{b}-{i}", kind, payload, float(b)) for i, (kind, payload) in enumerate(shape)]
        for b, shape in enumerate(shapes)
    ]
    order = [*batches, *batches] if interleaved else [b for batch in batches for b in (batch, batch)]
    results = [await store.append(sid, batch) for batch in order]
    first_time = results[: len(batches)] if interleaved else results[::2]
    second_time = results[len(batches) :] if interleaved else results[1::2]
    assert [r.duplicate for r in first_time] == [False] * len(batches)
    assert second_time == [replace(r, duplicate=True) for r in first_time]
    log = await store.read(sid)
    assert [(e.id, e.type, e.payload, e.at) for e in log] == [
        (e.id, e.type, e.payload, e.at) for batch in batches for e in batch
    ]
    assert [e.index for e in log] == list(range(1, len(log) + 1))
    assert await store.last_index(sid) == len(log)


# -- SQLite only -------------------------------------------------------------------------------


async def test_group_commit_shares_transactions(sqlite_store: SqliteStore) -> None:
    await sqlite_store.append("warm", [ev("warm")])
    before = sqlite_store.commits
    await asyncio.gather(*(sqlite_store.append(f"s{i}", [ev(f"e{i}")]) for i in range(100)))
    # A handful of transactions (the first append's, then the rest drained together), not 100.
    assert sqlite_store.commits - before <= 25


async def test_two_store_objects_share_one_file(tmp_path: Path) -> None:
    # Two objects on one file stand in for two actor processes: each has its own writer thread.
    one, two = SqliteStore(tmp_path / "shared.db"), SqliteStore(tmp_path / "shared.db")
    try:
        await one.append("s", [ev("a")])
        outcomes = await asyncio.gather(
            *(
                store.append("s", [ev(f"{name}-{i}")], expected_index=1)
                for i in range(5)
                for name, store in [("one", one), ("two", two)]
            ),
            return_exceptions=True,
        )
        assert sum(isinstance(o, AppendResult) for o in outcomes) == 1
        assert sum(isinstance(o, ConcurrencyConflict) for o in outcomes) == 9
        with pytest.raises(PartialDuplicateBatch):
            await two.append("other", [ev("a")])
        assert ids(await two.read("s")) == ids(await one.read("s"))
        assert await two.last_index("s") == 2
    finally:
        await one.close()
        await two.close()


async def test_a_store_dropped_without_close_stops_its_writer(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "dropped.db")
    await store.append("s", [ev("a")])
    writer = store._writer._thread
    del store
    gc.collect()
    await asyncio.to_thread(writer.join, 10)
    assert not writer.is_alive()


async def test_large_payloads_are_stored_deflated(sqlite_store: SqliteStore) -> None:
    payload: JsonObject = {"parts": [{"type": "text-delta", "delta": f"B{i:03d}"} for i in range(256)]}
    await sqlite_store.append("s", [ev("big", payload=payload), ev("small", payload={"x": 1})])

    def stored() -> list[bytes]:
        with sqlite3.connect(sqlite_store.path) as conn:
            return [bytes(row[0]) for row in conn.execute("SELECT payload FROM events ORDER BY seq")]

    big, small = await asyncio.to_thread(stored)
    assert big[0] == 0xC1 and len(big) < 1000  # ~7 KB of msgpack
    assert small[0] != 0xC1
    assert [e.payload for e in await sqlite_store.read("s")] == [payload, {"x": 1}]


async def test_a_three_turn_session_takes_well_under_30_kb(tmp_path: Path) -> None:
    per_session = await measure_session_bytes(f"sqlite:///{tmp_path / 'size.db'}", sessions=50)
    assert per_session < 20_000, per_session


# -- derived ids (SQLite) ------------------------------------------------------------------------


def derived(session: str, index: int) -> str:
    return f"troupe:{session}#{index}"


async def test_ids_derived_from_the_position_are_stored_as_null_and_read_back(sqlite_store: SqliteStore) -> None:
    events = [ev("u-1"), ev(derived("s", 2)), ev(derived("s", 3)), ev(derived("s", 9))]
    await sqlite_store.append("s", events, expected_index=0)

    def stored_ids() -> list[str | None]:
        with sqlite3.connect(sqlite_store.path) as conn:
            return [row[0] for row in conn.execute("SELECT event_id FROM events ORDER BY idx")]

    # Only the ids that match their own position are left out; #9 at index 4 is kept verbatim.
    assert await asyncio.to_thread(stored_ids) == ["u-1", None, None, derived("s", 9)]
    assert [e.id for e in await sqlite_store.read("s")] == [e.id for e in events]


async def test_a_retried_batch_of_derived_ids_replays(sqlite_store: SqliteStore) -> None:
    batch = [ev(derived("s", 1)), ev(derived("s", 2))]
    first = await sqlite_store.append("s", batch, expected_index=0)
    again = await sqlite_store.append("s", batch, expected_index=0)  # a retry after a lost reply
    assert again.duplicate and (again.first_index, again.last_index) == (first.first_index, first.last_index)
    with pytest.raises(PartialDuplicateBatch):  # the same ids with other content
        await sqlite_store.append("s", [ev(derived("s", 1), payload={"other": 1})], expected_index=0)
    # A derived id appended at another position cannot reuse one already stored as NULL.
    with pytest.raises(PartialDuplicateBatch):
        await sqlite_store.append("s", [ev(derived("s", 2), payload={"other": 2})])
    assert len(await sqlite_store.read("s")) == 2


def old_layout(path: Path, *, version: int, event_id: str) -> None:
    """Write an empty file in an earlier layout: ``event_id``'s column type, a full id index."""
    with sqlite3.connect(path) as conn:
        conn.executescript(
            f"""
            CREATE TABLE sessions (sid INTEGER PRIMARY KEY, session_id TEXT NOT NULL UNIQUE,
                last_index INTEGER NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL);
            CREATE TABLE events (seq INTEGER PRIMARY KEY, sid INTEGER NOT NULL, idx INTEGER NOT NULL,
                event_id {event_id}, type TEXT NOT NULL, at REAL NOT NULL, payload BLOB NOT NULL);
            CREATE UNIQUE INDEX events_by_position ON events (sid, idx);
            CREATE UNIQUE INDEX events_by_id ON events (event_id);
            CREATE TABLE snapshots (session_id TEXT NOT NULL, reducer TEXT NOT NULL, idx INTEGER NOT NULL,
                data BLOB NOT NULL, UNIQUE (session_id, reducer));
            PRAGMA user_version = {version};
            """
        )


async def test_a_version_1_file_keeps_storing_every_id(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    old_layout(path, version=1, event_id="TEXT NOT NULL")
    store = SqliteStore(path)
    try:
        await store.append("s", [ev(derived("s", 1))], expected_index=0)
        assert [e.id for e in await store.read("s")] == [derived("s", 1)]
    finally:
        await store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT event_id FROM events").fetchall() == [(derived("s", 1),)]
        assert conn.execute("PRAGMA user_version").fetchone() == (1,)


async def test_a_new_file_indexes_only_the_ids_it_stores(sqlite_store: SqliteStore) -> None:
    await sqlite_store.append("s", [ev("u-1"), ev(derived("s", 2))], expected_index=0)

    def layout() -> tuple[str, str]:
        with sqlite3.connect(sqlite_store.path) as conn:
            (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'events_by_id'").fetchone()
            plan = conn.execute("EXPLAIN QUERY PLAN SELECT 1 FROM events WHERE event_id IN (?, ?)", ("a", "b"))
            return sql, " ".join(str(row[-1]) for row in plan)

    sql, plan = await asyncio.to_thread(layout)
    assert sql.endswith("WHERE event_id IS NOT NULL")  # the NULL (derived) ids take no entry
    assert "events_by_id" in plan  # and a lookup by id still uses it
    with pytest.raises(PartialDuplicateBatch):  # ids stay unique across the store
        await sqlite_store.append("t", [ev("u-1", payload={"other": 1})], expected_index=0)


async def test_a_version_2_file_with_a_full_id_index_keeps_working(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    old_layout(path, version=2, event_id="TEXT")  # version 2 as first released: every row in events_by_id
    store = SqliteStore(path)
    try:
        await store.append("s", [ev("u-1"), ev(derived("s", 2))], expected_index=0)
        with pytest.raises(PartialDuplicateBatch):
            await store.append("t", [ev("u-1", payload={"other": 1})], expected_index=0)
        assert [e.id for e in await store.read("s")] == ["u-1", derived("s", 2)]
    finally:
        await store.close()
    with sqlite3.connect(path) as conn:
        (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'events_by_id'").fetchone()
        assert "WHERE" not in sql  # left as it was
        assert conn.execute("SELECT event_id FROM events ORDER BY idx").fetchall() == [("u-1",), (None,)]
