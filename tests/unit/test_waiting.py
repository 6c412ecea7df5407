"""``Flag`` and ``Mailbox`` behave as ``asyncio.Event`` and ``asyncio.Queue``, and hold nothing idle."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.models.base import CancelSignal
from orchestrator.run.waiting import Flag, Mailbox, Mutex
from tests.unit.sizes import bytes_each


async def _settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_set_flag_wakes_every_waiter_and_stays_set_until_cleared() -> None:
    flag = Flag()
    waiters = [asyncio.ensure_future(flag.wait()) for _ in range(3)]
    await _settle()
    assert not any(w.done() for w in waiters)
    flag.set()
    assert await asyncio.gather(*waiters) == [True, True, True]
    assert flag.is_set() and await flag.wait()
    flag.clear()
    later = asyncio.ensure_future(flag.wait())
    await _settle()
    assert not later.done()
    flag.set()
    assert await later


async def test_a_pulse_wakes_only_who_waits_now_and_leaves_the_flag_unset() -> None:
    flag = Flag()
    first = asyncio.ensure_future(flag.wait())
    await _settle()
    flag.pulse()
    assert await first
    assert not flag.is_set()
    second = asyncio.ensure_future(flag.wait())
    await _settle()
    assert not second.done()  # the pulse before it is not kept
    flag.pulse()
    assert await second


async def test_a_cancelled_wait_leaves_the_others_waiting() -> None:
    flag = Flag()
    cancelled, kept = asyncio.ensure_future(flag.wait()), asyncio.ensure_future(flag.wait())
    await _settle()
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    await _settle()
    assert not kept.done()
    flag.set()
    assert await kept


async def test_a_mailbox_hands_items_out_in_order_and_a_get_waits_for_one() -> None:
    box: Mailbox[int] = Mailbox()
    getter = asyncio.ensure_future(box.get())
    await _settle()
    assert not getter.done()
    box.put_nowait(1)
    assert await getter == 1
    taken: list[int] = []
    for i in range(200):  # taken items are dropped as it goes; the order holds throughout
        box.put_nowait(i)
        if i % 3 == 0:
            taken.append(box.get_nowait())
    assert box.qsize() == 200 - len(taken)
    while not box.empty():
        taken.append(box.get_nowait())
    assert taken == list(range(200))
    with pytest.raises(asyncio.QueueEmpty):
        box.get_nowait()


async def test_a_mailbox_is_fifo_across_interleaved_puts_and_gets() -> None:
    box: Mailbox[int] = Mailbox()
    out: list[int] = []
    for i in range(500):
        box.put_nowait(i)
        if i % 2:
            out.append(await box.get())
    while box.qsize():
        out.append(await box.get())
    assert out == list(range(500))


async def test_waiting_gets_are_served_first_come_first_served() -> None:
    box: Mailbox[str] = Mailbox()
    first, second = asyncio.ensure_future(box.get()), asyncio.ensure_future(box.get())
    await _settle()
    box.put_nowait("a")
    box.put_nowait("b")
    assert (await first, await second) == ("a", "b")


async def test_a_get_cancelled_after_it_was_woken_passes_the_item_on() -> None:
    box: Mailbox[str] = Mailbox()
    first, second = asyncio.ensure_future(box.get()), asyncio.ensure_future(box.get())
    await _settle()
    box.put_nowait("x")  # wakes ``first``...
    first.cancel()  # ...which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await asyncio.wait_for(second, 5) == "x"


async def test_a_cancel_signal_wakes_every_waiter_and_one_cancelled_waiter_does_not_cancel_the_rest() -> None:
    signal = CancelSignal()
    gone, kept = asyncio.ensure_future(signal.wait()), asyncio.ensure_future(signal.wait())
    await _settle()
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert not signal.cancelled
    signal.cancel("stop")
    signal.cancel("again")
    await asyncio.wait_for(kept, 5)
    assert signal.is_cancelled() and signal.reason == "stop"
    await signal.wait()  # returns at once once cancelled


async def test_a_mutex_admits_one_holder_at_a_time_in_the_order_they_asked() -> None:
    mutex = Mutex()
    order: list[int] = []
    inside = 0

    async def hold(i: int) -> None:
        nonlocal inside
        async with mutex:
            inside += 1
            assert inside == 1
            order.append(i)
            await _settle()
            inside -= 1

    await asyncio.gather(*(hold(i) for i in range(5)))
    assert order == [0, 1, 2, 3, 4]
    assert not mutex.locked()
    with pytest.raises(RuntimeError):
        mutex.release()


async def test_a_mutex_waiter_cancelled_after_it_was_woken_passes_the_lock_on() -> None:
    mutex = Mutex()
    await mutex.acquire()
    first, second = asyncio.ensure_future(mutex.acquire()), asyncio.ensure_future(mutex.acquire())
    await _settle()
    mutex.release()  # wakes ``first``...
    first.cancel()  # ...which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await asyncio.wait_for(second, 5)
    assert mutex.locked()
    mutex.release()
    assert not mutex.locked()


async def test_a_mutex_that_was_waited_on_keeps_no_list_once_nobody_waits() -> None:
    mutex = Mutex()
    await mutex.acquire()
    waiting = asyncio.ensure_future(mutex.acquire())
    await _settle()
    mutex.release()
    await waiting
    mutex.release()
    assert bytes_each(Mutex) < 120 and mutex._waiters is None  # an asyncio.Lock keeps its 760-byte deque


def test_idle_flags_mailboxes_and_cancel_signals_hold_no_deque() -> None:
    # An asyncio.Event is ~830 bytes (its deque alone 760), an asyncio.Queue ~2,600.
    assert bytes_each(Flag) < 120
    assert bytes_each(Mailbox) < 200
    assert bytes_each(CancelSignal) < 120
