"""The mutation hub (long polls) and the router, without Ray."""

from __future__ import annotations

import asyncio
import time

import pytest

from actors.hub import MutationHub
from actors.router import rendezvous, root_of
from orchestrator.testing import eventually


def m(index: int, text: str) -> dict[str, object]:
    return {"type": "delta", "index": index, "delta": text}


async def test_a_first_poll_learns_its_cursor_at_once_and_then_waits_for_news() -> None:
    hub = MutationHub(linger=0)
    assert await hub.poll("p", {"s": -1}, [], 5.0, {"s": 7}, full=True) == {"s": (7, [])}
    waiting = asyncio.ensure_future(hub.poll("p", {}, [], 5.0, {}))
    await eventually(lambda: hub.stats()["waiting"] == 1, 1, what="the poll waits")
    assert not waiting.done()
    hub.publish("s", 8, [m(8, "a")])
    assert await asyncio.wait_for(waiting, 1) == {"s": (8, [m(8, "a")])}


async def test_a_poll_carries_only_the_sessions_with_news() -> None:
    hub = MutationHub(linger=0)
    follow = {f"s-{i}": -1 for i in range(100)}
    assert len(await hub.poll("p", follow, [], 0, {}, full=True) or {}) == 100  # every cursor, once
    hub.publish("s-7", 1, [m(1, "x")])
    assert await hub.poll("p", {}, [], 5.0, {}) == {"s-7": (1, [m(1, "x")])}
    # Another client's poller follows the same session on its own; from before what the ring
    # still holds (every poller had it), it is told to re-read the snapshot.
    assert await hub.poll("q", {"s-7": 1}, [], 0, {}, full=True) == {"s-7": (1, [])}
    late = await hub.poll("r", {"s-7": 0}, [], 0, {}, full=True)
    assert late is not None and late["s-7"][1][0]["type"] == "reset"


async def test_the_cursor_is_the_appends_index_even_when_its_last_events_have_no_mutation() -> None:
    # One append (events 10..12) whose last event produced no mutation: the next poll must not
    # get the same mutations again (a regression: the cursor used to be the last mutation's index).
    hub = MutationHub(linger=0)
    await hub.poll("p", {"s": -1}, [], 0, {"s": 9}, full=True)
    hub.publish("s", 12, [m(10, "a"), m(11, "b")])
    cursor, batch = (await hub.poll("p", {}, [], 0, {}) or {})["s"]
    assert (cursor, [x["delta"] for x in batch]) == (12, ["a", "b"])
    assert await hub.poll("p", {}, [], 0, {}) == {}


async def test_a_poller_that_fell_behind_the_ring_gets_a_reset() -> None:
    hub = MutationHub(ring_size=2, linger=0)
    await hub.poll("p", {"s": -1}, [], 0, {"s": 0}, full=True)
    await hub.poll("slow", {"s": 0}, [], 0, {}, full=True)
    for i in range(1, 6):
        hub.publish("s", i, [m(i, str(i))])
    cursor, batch = (await hub.poll("slow", {}, [], 0, {}) or {})["s"]
    assert batch[0]["type"] == "reset" and cursor == 5


async def test_entries_every_poller_has_received_are_dropped() -> None:
    hub = MutationHub(linger=0)
    await hub.poll("p", {"s": -1}, [], 0, {"s": 0}, full=True)
    for i in range(1, 4):
        hub.publish("s", i, [m(i, str(i))])
    await hub.poll("p", {}, [], 0, {})
    assert hub.stats()["kept"] == 0


async def test_a_wake_ends_the_waiting_poll_even_when_it_arrives_first() -> None:
    hub = MutationHub(linger=0)
    await hub.poll("p", {"s": -1}, [], 0, {}, full=True)
    hub.wake("p")  # before the poll it is meant for (Ray may reorder the two calls)
    assert await asyncio.wait_for(hub.poll("p", {}, [], 5.0, {}), 1) == {}
    await hub.poll("p", {}, ["s"], 0, {})  # unfollowed: the session's channel goes
    assert "s" not in hub.sessions() and hub.stats()["followed"] == 0


async def test_an_unknown_poller_is_told_to_register_again() -> None:
    hub = MutationHub(linger=0)  # e.g. a host that restarted since the client's last poll
    assert await hub.poll("p", {}, [], 5.0, {}) is None
    assert await hub.poll("p", {"s": 4}, [], 5.0, {"s": 4}, full=True) == {"s": (4, [])}


async def test_mutations_are_kept_only_for_sessions_someone_polls() -> None:
    hub = MutationHub(linger=0)
    hub.publish("quiet", 1, [m(1, "x")])
    assert not hub.interested("quiet")
    await hub.poll("p", {"loud": -1}, [], 0, {"loud": 0}, full=True)
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


async def test_follow_registers_a_known_poller_from_an_index_without_waking_it() -> None:
    hub = MutationHub(linger=0)
    assert not hub.follow("p", "s", 4)  # a poller the hub has not seen subscribes through a poll
    assert await hub.poll("p", {}, [], 0, {}, full=True) == {}
    assert hub.follow("p", "s", 4)
    waiting = asyncio.ensure_future(hub.poll("p", {}, [], 5.0, {}))
    await eventually(lambda: hub.stats()["waiting"] == 1, 1, what="the poll waits: following told it nothing")
    hub.publish("s", 5, [m(5, "a")])
    assert await asyncio.wait_for(waiting, 1) == {"s": (5, [m(5, "a")])}  # everything after the index


async def test_a_poll_waiting_longer_than_the_interest_keeps_it_and_gets_the_news_itself() -> None:
    # A poll waits up to 5 s: with a shorter interest_seconds (or a host frozen for longer by a
    # stall), its poller was last seen longer ago than that. Its client is still there: the host
    # must keep the session's mutations for it, and neither the sweep nor an append may count it
    # gone (before, the append only noted its index, and the waiting view had to re-read its snapshot).
    hub = MutationHub(linger=0, interest_seconds=0.05)
    await hub.poll("p", {"s": -1}, [], 0, {"s": 0}, full=True)
    waiting = asyncio.ensure_future(hub.poll("p", {}, [], 5.0, {}))
    await eventually(lambda: hub.stats()["waiting"] == 1, 1, what="the poll waits")
    await asyncio.sleep(0.2)  # four times the interest
    assert hub.interested("s")
    hub._sweep(time.monotonic())
    assert hub.knows("p")
    hub.publish("s", 1, [m(1, "a")])
    assert await asyncio.wait_for(waiting, 1) == {"s": (1, [m(1, "a")])}
    # Its poll over, the poller is seen now: a client that does not poll again loses interest.
    assert hub.interested("s")
    await asyncio.sleep(0.1)
    assert not hub.interested("s")


async def test_a_poller_back_after_appends_that_nobody_kept_gets_a_reset_not_a_gap() -> None:
    # A poller not seen for interest_seconds (its client stalled, or the host did) makes the host
    # stop keeping mutations: an append then only notes its index. When that poller polls again
    # before the sweep has forgotten it, it must be told to re-read the snapshot: before, it got
    # the appends after the gap and silently missed the ones in it (a client's view kept the
    # first text delta of a nested run, "R000", and none of the rest).
    hub = MutationHub(linger=0)
    await hub.poll("p", {"s": -1}, [], 0, {"s": 0}, full=True)
    hub.publish("s", 1, [m(1, "a")])
    assert await hub.poll("p", {}, [], 0, {}) == {"s": (1, [m(1, "a")])}
    hub._pollers["p"].seen -= 60  # not seen for a minute, and the sweep has not run since
    assert not hub.interested("s")
    hub.note_index("s", 2)  # what a host does with an append nobody is seen to follow
    hub.publish("s", 3, [m(3, "c")])  # the poller is back in interest: this one is kept
    hub._pollers["p"].seen += 60
    cursor, batch = (await hub.poll("p", {}, [], 0, {}) or {})["s"]
    assert (cursor, [x["type"] for x in batch]) == (3, ["reset"])


async def test_a_reply_stops_at_its_mutation_limit_and_the_next_poll_brings_the_rest_first_at_once() -> None:
    hub = MutationHub(linger=0, reply_mutations=4, reply_mutations_max=4)
    await hub.poll("p", {f"s-{i}": -1 for i in range(5)}, [], 0, {f"s-{i}": 0 for i in range(5)}, full=True)
    for i in range(5):
        hub.publish(f"s-{i}", 1, [m(1, f"{i}a"), m(1, f"{i}b")])
    first = await hub.poll("p", {}, [], 5.0, {}) or {}
    assert list(first) == ["s-0", "s-1"]  # whole sessions only, in the order their news came
    hub.publish("s-0", 2, [m(2, "0c")])  # news after the cut waits behind the sessions left
    second = await asyncio.wait_for(hub.poll("p", {}, [], 5.0, {}), 1) or {}  # no wait: news is left
    assert list(second) == ["s-2", "s-3"]
    third = await asyncio.wait_for(hub.poll("p", {}, [], 5.0, {}), 1) or {}
    assert third == {"s-4": (1, [m(1, "4a"), m(1, "4b")]), "s-0": (2, [m(2, "0c")])}
    assert hub.stats()["kept"] == 0


async def test_one_sessions_batch_is_never_split_by_the_limit() -> None:
    hub = MutationHub(linger=0, reply_mutations=2)
    await hub.poll("p", {"s": -1, "t": -1}, [], 0, {"s": 0, "t": 0}, full=True)
    hub.publish("s", 3, [m(i, str(i)) for i in range(1, 4)])
    hub.publish("t", 1, [m(1, "t")])
    assert await hub.poll("p", {}, [], 5.0, {}) == {"s": (3, [m(i, str(i)) for i in range(1, 4)])}
    assert await asyncio.wait_for(hub.poll("p", {}, [], 5.0, {}), 1) == {"t": (1, [m(1, "t")])}


async def test_a_client_with_a_backlog_gets_larger_replies_and_small_ones_again_once_caught_up() -> None:
    hub = MutationHub(linger=0, reply_mutations=2, reply_mutations_max=8)
    sessions = [f"s-{i:02d}" for i in range(16)]
    await hub.poll("p", {sid: -1 for sid in sessions}, [], 0, {sid: 0 for sid in sessions}, full=True)
    for sid in sessions:
        hub.publish(sid, 1, [m(1, sid)])
    sizes = []
    while True:
        reply = await asyncio.wait_for(hub.poll("p", {}, [], 0, {}), 1) or {}
        if not reply:
            break
        sizes.append(len(reply))
    assert sizes == [2, 4, 8, 2]  # doubled while sessions were left in line, capped at the max
    assert hub._pollers["p"].budget == 2  # the last reply emptied the line: back to the base
    hub.publish("s-00", 2, [m(2, "a"), m(2, "b"), m(2, "c")])
    hub.publish("s-01", 2, [m(2, "d")])
    assert list(await hub.poll("p", {}, [], 0, {}) or {}) == ["s-00"]  # caught up: the small budget again


def test_a_reply_limit_below_one_is_refused_with_what_to_give() -> None:
    with pytest.raises(ValueError, match="reply_mutations must be at least 1"):
        MutationHub(reply_mutations=0)
    with pytest.raises(ValueError, match=r"reply_mutations_max \(4\) must be at least reply_mutations \(8\)"):
        MutationHub(reply_mutations=8, reply_mutations_max=4)
