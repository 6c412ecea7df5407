"""The mutation hub (long polls) and the router, without Ray."""

from __future__ import annotations

import asyncio

from actors.hub import MutationHub
from actors.router import rendezvous, root_of


def m(index: int, text: str) -> dict[str, object]:
    return {"type": "delta", "index": index, "delta": text}


async def test_a_first_poll_learns_its_cursor_at_once_and_then_waits_for_news() -> None:
    hub = MutationHub(linger=0)
    assert await hub.poll({"s": -1}, 5.0, {"s": 7}) == {"s": (7, [])}
    waiting = asyncio.ensure_future(hub.poll({"s": 7}, 5.0, {"s": 7}))
    await asyncio.sleep(0)
    assert not waiting.done()
    hub.publish("s", 8, [m(8, "a")])
    assert await asyncio.wait_for(waiting, 1) == {"s": (8, [m(8, "a")])}


async def test_the_cursor_is_the_appends_index_even_when_its_last_events_have_no_mutation() -> None:
    # One append (events 10..12) whose last event produced no mutation: the next poll must not
    # get the same mutations again (a regression: the cursor used to be the last mutation's index).
    hub = MutationHub(linger=0)
    await hub.poll({"s": -1}, 0, {"s": 9})
    hub.publish("s", 12, [m(10, "a"), m(11, "b")])
    cursor, batch = (await hub.poll({"s": 9}, 0, {"s": 12}))["s"]
    assert (cursor, [x["delta"] for x in batch]) == (12, ["a", "b"])
    assert (await hub.poll({"s": cursor}, 0, {"s": 12}))["s"] == (12, [])


async def test_a_poller_that_fell_behind_the_ring_gets_a_reset() -> None:
    hub = MutationHub(ring_size=2, linger=0)
    await hub.poll({"s": -1}, 0, {"s": 0})
    await hub.poll({"s": 0}, 0, {"s": 0})
    for i in range(1, 6):
        hub.publish("s", i, [m(i, str(i))])
    cursor, batch = (await hub.poll({"s": 1}, 0, {"s": 5}))["s"]
    assert batch[0]["type"] == "reset" and cursor == 5


async def test_entries_every_recent_poller_has_seen_are_dropped() -> None:
    hub = MutationHub(linger=0)
    await hub.poll({"s": -1}, 0, {"s": 0})
    for i in range(1, 4):
        hub.publish("s", i, [m(i, str(i))])
    cursor, _ = (await hub.poll({"s": 0}, 0, {"s": 3}))["s"]
    await hub.poll({"s": cursor}, 0, {"s": 3})
    assert len(hub._channels["s"].ring) <= 3


async def test_mutations_are_kept_only_for_sessions_someone_polls() -> None:
    hub = MutationHub(linger=0)
    hub.publish("quiet", 1, [m(1, "x")])
    assert not hub.interested("quiet")
    await hub.poll({"loud": -1}, 0, {"loud": 0})
    assert hub.interested("loud")


def test_rendezvous_is_stable_and_moves_only_what_a_lost_host_had() -> None:
    hosts = ["h-0", "h-1", "h-2"]
    before = {f"s-{i}": rendezvous(f"s-{i}", hosts) for i in range(300)}
    assert before == {k: rendezvous(k, hosts) for k in before}
    assert len(set(before.values())) == 3
    after = {k: rendezvous(k, ["h-0", "h-2"]) for k in before}
    moved = [k for k in before if before[k] != after[k]]
    assert all(before[k] == "h-1" for k in moved)


def test_a_sub_agent_session_belongs_to_its_root() -> None:
    assert root_of("s-1/call-1/call-2") == "s-1"
    assert root_of("s-1") == "s-1"
