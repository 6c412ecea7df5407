"""What only the sharded store has: where sessions land, merged listings, forks across shards.

The contract suite runs on ``sharded://`` of two SQLite files too (``conftest.store_url``); these
tests open the shards themselves to see where each log went.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from actors.local import LocalRuntime
from orchestrator.core.errors import UsageError
from orchestrator.core.events import Event
from orchestrator.core.ids import child_session_id
from orchestrator.store import open_store
from orchestrator.store.base import Followable, FollowsInGroups
from orchestrator.store.sharded import ShardedStore, shard_index
from tests.fixtures.agents import delegating


def ev(event_id: str) -> Event:
    return Event(event_id, "note", {"n": event_id}, 0.0)


def urls(tmp_path: Path) -> tuple[str, str]:
    return f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"


async def test_a_root_and_its_sub_agents_share_a_shard_and_roots_spread_over_both(tmp_path: Path) -> None:
    first, second = urls(tmp_path)
    store = open_store(f"sharded://{first}|{second}")
    assert isinstance(store, ShardedStore)
    roots = [f"root-{i}" for i in range(40)]
    try:
        for root in roots:
            child = child_session_id(root, "call-1")
            grandchild = child_session_id(child, "call-2")
            for sid in (root, child, grandchild):
                await store.append(sid, [ev(f"{sid}-e1")], expected_index=0)
    finally:
        await store.close()
    held: list[set[str]] = []
    for url in (first, second):  # each shard, opened on its own, holds whole trees and nothing else
        shard = open_store(url)
        try:
            held.append({s.session_id for s in await shard.list_sessions(limit=1000)})
        finally:
            await shard.close()
    assert held[0].isdisjoint(held[1]) and all(len(h) > 10 for h in held)
    for k, sessions in enumerate(held):
        for sid in sessions:
            assert shard_index(sid, 2) == k
            root = sid.split("/", 1)[0]
            assert {root, f"{root}/call-1", f"{root}/call-1/call-2"} <= sessions


def test_the_shard_of_a_session_is_stable_and_troupe_logs_live_on_the_first() -> None:
    # The same in every process and run (BLAKE2b, not Python's salted hash): a layout on disk.
    assert [shard_index(f"s-{i}", 4) for i in range(8)] == [shard_index(f"s-{i}", 4) for i in range(8)]
    assert shard_index("s-1/call-9/call-3", 4) == shard_index("s-1", 4)
    assert {shard_index(f"troupe:keys:{i}", 4) for i in range(20)} == {0}


async def test_listings_merge_the_shards_in_id_order(tmp_path: Path) -> None:
    first, second = urls(tmp_path)
    store = open_store(f"sharded://{first}|{second}")
    try:
        ids = sorted(f"s-{i:02d}" for i in range(30))
        for sid in ids:
            await store.append(sid, [ev(f"{sid}-e")])
        assert [s.session_id for s in await store.list_sessions(limit=100)] == ids
        assert [s.session_id for s in await store.list_sessions(after="s-09", limit=5)] == ids[10:15]
        assert [s.session_id for s in await store.list_sessions(prefix="s-2", limit=100)] == ids[20:30]
    finally:
        await store.close()


async def test_a_fork_lands_on_the_targets_shard(tmp_path: Path) -> None:
    first, second = urls(tmp_path)
    store = open_store(f"sharded://{first}|{second}")
    assert isinstance(store, ShardedStore)
    try:
        source = "src"
        target = next(f"fork-{i}" for i in range(100) if shard_index(f"fork-{i}", 2) != shard_index(source, 2))
        await store.append(source, [ev("a"), ev("b"), ev("c")])
        result = await store.fork(source, target, 2)
        assert (result.first_index, result.last_index) == (1, 2)
        assert [e.payload for e in await store.read(target)] == [{"n": "a"}, {"n": "b"}]
        assert await store.shard(source).last_index(target) == 0  # not on the source's shard
    finally:
        await store.close()


async def test_bad_sharded_urls_say_what_to_write(tmp_path: Path) -> None:
    first, second = urls(tmp_path)
    with pytest.raises(UsageError, match="give two or more"):
        open_store(f"sharded://{first}")
    with pytest.raises(UsageError, match="cannot itself be sharded"):
        open_store(f"sharded://{first}|sharded://{second}|{second}")


async def test_it_follows_only_when_every_shard_can(tmp_path: Path, pg_url: str) -> None:
    first, _ = urls(tmp_path)
    mixed = open_store(f"sharded://{first}|{pg_url}")
    both = open_store(f"sharded://{pg_url}|{pg_url}")
    try:
        assert not isinstance(mixed, Followable) and isinstance(both, Followable)
        # Its shards read in groups, so it hands over the session's shard's groups: whole commits.
        assert isinstance(both, FollowsInGroups)
        await both.append("s", [ev("a"), ev("b"), ev("c")])
        groups = both.follow_groups("s", 0)
        async with contextlib.aclosing(groups):
            assert [e.id for e in await asyncio.wait_for(anext(groups), 10)] == ["a", "b", "c"]
    finally:
        await mixed.close()
        await both.close()


async def test_a_delegating_session_runs_on_a_sharded_store_with_its_tree_on_one_shard(tmp_path: Path) -> None:
    first, second = urls(tmp_path)
    async with LocalRuntime(store=f"sharded://{first}|{second}") as runtime:
        for name in ("tree-1", "tree-2", "tree-3", "tree-4"):
            result = await (await runtime.session(name, agent=delegating()).prompt("compare")).finished
            assert result.success, result.error
    held = []
    for url in (first, second):
        shard = open_store(url)
        try:
            held.append({s.session_id for s in await shard.list_sessions(limit=1000)})
        finally:
            await shard.close()
    trees = {sid.split("/", 1)[0] for h in held for sid in h}
    assert trees == {"tree-1", "tree-2", "tree-3", "tree-4"}
    for sessions in held:  # a root's sub-agents (two levels) are on its shard, and only there
        for sid in sessions:
            assert sid.split("/", 1)[0] in sessions
    assert all(sum(1 for sid in h if "/" in sid) == 2 * sum(1 for sid in h if "/" not in sid) for h in held)
