"""``EventStore.fork`` on every backend: a new log that starts as a copy of another's prefix."""

from __future__ import annotations

import pytest

from orchestrator.core import event_types as ai
from orchestrator.core.commands import EditInput, SendInput, decide
from orchestrator.core.errors import UsageError
from orchestrator.core.events import AppendResult, Event
from orchestrator.core.fold import fold_events
from orchestrator.core.ids import derived_event_id, logical_event_id
from orchestrator.store import EventStore


def note(event_id: str, n: int = 0) -> Event:
    return Event(event_id, "note", {"n": n}, 100.0 + n)


async def test_fork_copies_the_prefix_with_ids_of_its_own(store: EventStore) -> None:
    await store.append(
        "src", [note("a", 1), note("b", 2), Event(derived_event_id("src", 3), "note", {"n": 3}, 103.0), note("d", 4)]
    )
    assert await store.fork("src", "dst", 3) == AppendResult("dst", 1, 3)

    source, fork = await store.read("src", limit=3), await store.read("dst")
    assert [(e.type, e.payload, e.at, e.index) for e in fork] == [(e.type, e.payload, e.at, e.index) for e in source]
    assert {e.session_id for e in fork} == {"dst"}
    assert not {e.id for e in fork} & {e.id for e in await store.read("src")}  # ids are unique store-wide
    assert [logical_event_id(e.id) for e in fork[:2]] == ["a", "b"]
    assert fork[2].id == derived_event_id("dst", 3)  # what the fork would have derived itself
    assert await store.last_index("src") == 4  # the source is untouched


async def test_a_fork_runs_on_its_own(store: EventStore) -> None:
    await store.append("src", [note("a"), note("b")])
    await store.fork("src", "dst", 1)
    assert await store.append("dst", [note("c")], expected_index=1) == AppendResult("dst", 2, 2)
    assert await store.append("src", [note("e")]) == AppendResult("src", 3, 3)
    assert [logical_event_id(e.id) for e in await store.read("dst")] == ["a", "c"]
    assert [s.session_id for s in await store.list_sessions()] == ["dst", "src"]


async def test_a_fork_of_a_fork_keeps_the_original_ids(store: EventStore) -> None:
    await store.append("src", [note("a"), note("b")])
    await store.fork("src", "one", 2)
    await store.fork("one", "two", 2)
    assert [logical_event_id(e.id) for e in await store.read("two")] == ["a", "b"]
    assert len({e.id for s in ("src", "one", "two") for e in await store.read(s)}) == 6


async def test_a_fork_folds_to_the_same_state(store: EventStore) -> None:
    state = fold_events([])
    for command in (SendInput("in-1", "hello", generate=False), EditInput("edit-1", "in-1", "hello there")):
        decision = decide(state, command)
        await store.append("src", list(decision.events))
        state = fold_events(decision.events, state)
    await store.append("src", [Event(derived_event_id("src", 5), ai.INPUT_ADMITTED, {"inputIds": ["in-1"]})])
    last = await store.last_index("src")
    for through in range(last + 1):
        await store.fork("src", f"f{through}", through)
        assert fold_events(await store.read(f"f{through}")) == fold_events(await store.read("src", limit=through))
    # References in payloads (the decision's commandId, the edit's inputId) still resolve.
    assert [m.id for m in fold_events(await store.read(f"f{last}")).messages] == ["in-1"]


@pytest.mark.parametrize(
    ("source", "target", "through", "phrase"),
    [
        ("src", "dst", 3, "its log ends at 2; pass an index from 0 to 2"),
        ("src", "dst", -1, "pass an index from 0"),
        ("src", "dst", True, "pass an index from 0"),
        ("src", "src", 1, "into itself"),
        ("src", "taken", 1, "already has events; choose a new id"),
        ("src", "", 1, "target session id"),
    ],
)
async def test_a_bad_fork_names_the_problem_and_writes_nothing(
    store: EventStore, source: str, target: str, through: object, phrase: str
) -> None:
    await store.append("src", [note("a"), note("b")])
    await store.append("taken", [note("t")])
    with pytest.raises(UsageError, match=phrase):
        await store.fork(source, target, through)  # type: ignore[arg-type]
    assert await store.last_index("dst") == 0 and await store.last_index("taken") == 1
    assert await store.last_index("src") == 2


async def test_a_fork_at_zero_writes_nothing(store: EventStore) -> None:
    await store.append("src", [note("a")])
    assert await store.fork("src", "dst", 0) == AppendResult("dst", 1, 0)
    assert await store.read("dst") == [] and await store.list_sessions(prefix="dst") == []


async def test_forking_a_long_log_copies_every_event(store: EventStore) -> None:
    """10,000 events forked whole: every one copied, in order (how long it takes is a figure, not a test)."""
    for start in range(0, 10_000, 1_000):
        await store.append("long", [note(f"e{i}", i) for i in range(start, start + 1_000)])
    await store.fork("long", "copy", 10_000)
    assert await store.last_index("copy") == 10_000
    copied = await store.read("copy")
    assert [e.payload for e in copied] == [e.payload for e in await store.read("long")]
