"""The dedicated pool's admission rules, with in-memory actors (the Ray side: tests/integration/test_dedicated.py)."""

from __future__ import annotations

import asyncio
import pickle

import pytest

from actors.dedicated import Actors, DedicatedLimits, DedicatedPool, default_max_actors
from actors.errors import DedicatedFull
from orchestrator.testing import eventually


class FakeActors:
    """Actors as names; ``reclaim`` lets go of the sessions a test marked idle."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.stopped: list[str] = []
        self.adopted: list[tuple[str, str]] = []
        self.idle: set[str] = set()
        self.reclaims = 0
        self.pool: DedicatedPool | None = None

    async def start(self) -> str:
        name = f"a{len(self.started)}"
        self.started.append(name)
        await asyncio.sleep(0)
        return name

    async def stop(self, name: str) -> None:
        self.stopped.append(name)

    async def adopt(self, name: str, session_id: str) -> None:
        self.adopted.append((name, session_id))

    async def reclaim(self, names: list[str]) -> None:
        self.reclaims += 1
        assert self.pool is not None
        for session_id, name in list(self.pool.assigned.items()):
            if session_id in self.idle and name in names:
                self.idle.discard(session_id)
                self.pool.release(name, session_id)

    def ops(self) -> Actors:
        return Actors(self.start, self.stop, self.adopt, self.reclaim)


def pool_of(
    actors: int, *, wait: float = 30.0, warm: int = 0, keep: int = 4, linger: float = 300.0
) -> tuple[DedicatedPool, FakeActors]:
    fake = FakeActors()
    limits = DedicatedLimits(actors=actors, wait=wait, starts=1, warm=warm, keep=keep, linger=linger)
    pool = DedicatedPool(limits, fake.ops())
    fake.pool = pool
    return pool, fake


async def test_sessions_beyond_the_limit_wait_their_turn_first_come_first_served() -> None:
    pool, fake = pool_of(2)
    first = [await pool.assign("s0"), await pool.assign("s1")]
    assert len(set(first)) == 2
    waiting = [asyncio.ensure_future(pool.assign(s)) for s in ("s2", "s3")]
    await eventually(lambda: pool.stats()["waiting"] == 2 or None, what="two sessions wait")
    assert pool.live == 2 and len(fake.started) == 2
    pool.release(first[1], "s1")
    assert await waiting[0] == first[1]  # the first to wait gets the first actor released, warm
    assert not waiting[1].done()
    pool.release(first[0], "s0")
    assert await waiting[1] == first[0]
    stats = pool.stats()
    assert (stats["peak"], stats["waited"], stats["started"], stats["waiting"]) == (2, 2, 2, 0)


async def test_waiting_sessions_make_the_pool_reclaim_idle_sessions() -> None:
    pool, fake = pool_of(1)
    held = await pool.assign("s0")
    fake.idle.add("s0")  # the host would deactivate it if asked
    assert await pool.assign("s1") == held
    assert fake.reclaims >= 1 and pool.assigned == {"s1": held}


async def test_a_sub_agent_shares_its_parents_actor_when_the_pool_is_full() -> None:
    pool, _ = pool_of(1)
    parent = await pool.assign("p")
    assert await pool.assign("p/call-1") == parent  # no wait: waiting could deadlock the parent
    pool.release(parent, "p/call-1")
    assert pool.assigned == {"p": parent}  # the parent keeps its actor
    assert pool.stats()["shared"] == 1


async def test_a_sub_agent_takes_a_free_actor_when_there_is_one() -> None:
    pool, _ = pool_of(3, warm=1)
    await pool.fill()
    parent = await pool.assign("p")
    child = await pool.assign("p/call-1")
    assert child != parent


async def test_a_wait_past_the_limit_is_one_clear_error() -> None:
    pool, _ = pool_of(1, wait=0.05)
    await pool.assign("s0")
    with pytest.raises(DedicatedFull) as caught:
        await pool.assign("s1")
    message = str(caught.value)
    for named in ("'s1'", "max_dedicated", "dedicated_wait", "placement='pooled'", "all 1 "):
        assert named in message
    assert caught.value.code == "DEDICATED_FULL"
    assert str(pickle.loads(pickle.dumps(caught.value))) == message  # it crosses Ray
    assert pool.stats()["refused"] == 1 and pool.stats()["waiting"] == 0


async def test_a_host_that_lost_the_session_is_not_named_again() -> None:
    pool, _ = pool_of(2)
    first = await pool.assign("s0")
    assert await pool.assign("s0") == first  # cached
    again = await pool.assign("s0", stale=first)  # the host said it does not have it
    assert pool.assigned == {"s0": again}
    assert first in pool.free or again == first


async def test_released_actors_beyond_keep_are_stopped() -> None:
    pool, fake = pool_of(3, keep=1)
    names = [await pool.assign(f"s{i}") for i in range(3)]
    for i, name in enumerate(names):
        pool.release(name, f"s{i}")
    await eventually(lambda: len(fake.stopped) == 2 or None, what="two surplus actors stopped")
    assert pool.free == [names[0]] and pool.live == 1


async def test_a_quiet_pool_shrinks_back_to_its_warm_actors() -> None:
    pool, fake = pool_of(4, warm=1, keep=4, linger=0.2)
    actors = [await pool.assign(f"s{i}") for i in range(3)]
    await eventually(lambda: len(pool.free) == 1 or None, what="one actor started ahead of demand")
    for i, name in enumerate(actors):
        pool.release(name, f"s{i}")
    assert len(pool.free) == 4 and not fake.stopped  # kept at first: the next sessions take them warm
    assert await pool.assign("s9") == actors[-1]  # the one freed last
    await eventually(lambda: len(pool.free) == 1 or None, what="free actors beyond warm to linger out")
    assert len(fake.stopped) == 2 and pool.live == 2 and pool.free == [actors[1]]  # the warmest one stays
    assert pool.stats()["stopped"] == 2
    await pool.close()


async def test_concurrent_assigns_of_one_session_share_one_actor() -> None:
    pool, fake = pool_of(4)
    names = await asyncio.gather(*(pool.assign("s") for _ in range(5)))
    assert len(set(names)) == 1 and len(fake.started) == 1


def test_the_default_limit_follows_cpus_and_memory() -> None:
    assert default_max_actors(2, 24 * 2**30) == 8
    assert default_max_actors(2, 1 * 2**30) == 2  # a quarter of 1 GiB holds two 128 MB actors
    assert default_max_actors(64, 16 * 2**30) == 32  # memory bounds a big CPU count
