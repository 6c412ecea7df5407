"""``Flag``, ``Mailbox``, ``Mutex``: ``asyncio.Event``, an unbounded ``Queue`` and ``Lock`` that hold nothing idle.

``asyncio.Event``, ``Condition`` and ``Queue`` each make a ``collections.deque`` for their waiters
when they are made (a queue makes three, and an event of its own), and an empty deque takes 760
bytes: a block of 64 slots comes with it. ``asyncio.Lock`` makes its deque on the first contention
and keeps it. A session keeps several of them for its whole life (its runner's lock and condition,
a live view's event, the view's subscription with its queue and event), almost always with nobody
waiting: ~6 KB per session at ``troupe bench shop --sizes 1000``. These behave the same for one
event loop and keep their waiters in a list made on the first wait (and dropped once nobody
waits): an idle one is a few dozen bytes.
"""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

__all__ = ["Flag", "Mailbox", "Mutex"]

T = TypeVar("T")


class Flag:
    """``asyncio.Event`` (``set``, ``clear``, ``is_set``, ``wait``), plus ``pulse``."""

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[asyncio.Future[None]] | None = None

    def is_set(self) -> bool:
        """Whether the flag is set."""
        return self._set

    def set(self) -> None:
        """Set the flag and wake every waiter; ``wait`` returns at once until ``clear``."""
        if not self._set:
            self._set = True
            self._wake()

    def clear(self) -> None:
        """Unset the flag: a later ``wait`` waits for the next ``set`` (or ``pulse``)."""
        self._set = False

    def pulse(self) -> None:
        """Wake whoever waits now, and leave the flag as it is (``Condition.notify_all``)."""
        self._wake()

    async def wait(self) -> bool:
        """Return ``True`` once the flag is set (at once if it is), or at the next ``pulse``."""
        if self._set:
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiters
        if waiters is None:
            waiters = self._waiters = []
        waiters.append(waiter)
        try:
            await waiter
            return True
        finally:
            _forget(self, waiter)

    def _wake(self) -> None:
        waiters = self._waiters
        if waiters:
            self._waiters = None
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)


def _forget(flag: Flag, waiter: asyncio.Future[None]) -> None:
    """Take a waiter that stopped waiting (cancelled) out of the flag's list."""
    waiters = flag._waiters
    if waiters:
        try:
            waiters.remove(waiter)
        except ValueError:
            return
        if not waiters:
            flag._waiters = None


class Mailbox(Generic[T]):
    """An unbounded ``asyncio.Queue``: ``put_nowait``, ``get``, ``get_nowait``, ``qsize``, ``empty``.

    Items come out in the order they went in; each waiting ``get`` takes one, first come first
    served, and a ``get`` cancelled after it was woken passes its item on to the next.
    """

    __slots__ = ("_getters", "_head", "_items")

    def __init__(self) -> None:
        self._items: list[T] = []
        self._head = 0
        """Items before this position have been taken (dropped from the list now and then)."""
        self._getters: list[asyncio.Future[None]] | None = None

    def qsize(self) -> int:
        """Items waiting."""
        return len(self._items) - self._head

    def empty(self) -> bool:
        """Whether no item is waiting."""
        return len(self._items) == self._head

    def put_nowait(self, item: T) -> None:
        """Add an item (never blocks) and wake the first ``get`` waiting."""
        self._items.append(item)
        self._wake_next()

    def get_nowait(self) -> T:
        """The first item; raises ``asyncio.QueueEmpty`` when there is none."""
        items, head = self._items, self._head
        if head == len(items):
            raise asyncio.QueueEmpty
        item = items[head]
        head += 1
        if head == len(items):
            items.clear()
            head = 0
        elif head >= 32 and 2 * head >= len(items):
            del items[:head]  # taken items are not kept: copying the rest keeps this amortised O(1)
            head = 0
        self._head = head
        return item

    async def get(self) -> T:
        """The first item, waiting for one when there is none."""
        while len(self._items) == self._head:
            getter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            getters = self._getters
            if getters is None:
                getters = self._getters = []
            getters.append(getter)
            try:
                await getter
            except BaseException:
                getter.cancel()  # nothing if it was woken already
                getters = self._getters
                if getters is not None and getter in getters:
                    getters.remove(getter)
                if not self.empty() and not getter.cancelled():
                    self._wake_next()  # woken, then cancelled: the item goes to the next getter
                raise
        return self.get_nowait()

    def _wake_next(self) -> None:
        getters = self._getters
        while getters:
            getter = getters.pop(0)
            if not getter.done():
                getter.set_result(None)
                break
        if getters is not None and not getters:
            self._getters = None


class Mutex:
    """``asyncio.Lock`` (``async with``, ``acquire``, ``release``, ``locked``): first come, first served."""

    __slots__ = ("_locked", "_waiters")

    def __init__(self) -> None:
        self._locked = False
        self._waiters: list[asyncio.Future[None]] | None = None

    def locked(self) -> bool:
        """Whether someone holds it."""
        return self._locked

    async def acquire(self) -> bool:
        """Take it, waiting behind those who asked first; returns ``True``."""
        waiters = self._waiters
        if not self._locked and (not waiters or all(w.cancelled() for w in waiters)):
            self._locked = True
            return True
        if waiters is None:
            waiters = self._waiters = []
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters.append(waiter)
        try:
            try:
                await waiter
            finally:
                waiters.remove(waiter)
                if not waiters and self._waiters is waiters:
                    self._waiters = None
        except asyncio.CancelledError:
            if not self._locked:
                self._wake_first()  # woken, then cancelled: the next in line takes it
            raise
        self._locked = True
        return True

    def release(self) -> None:
        """Let it go; the first waiter takes it next.

        Raises:
            RuntimeError: it is not held.
        """
        if not self._locked:
            raise RuntimeError("Lock is not acquired.")
        self._locked = False
        self._wake_first()

    def _wake_first(self) -> None:
        waiters = self._waiters
        if waiters:
            first = waiters[0]
            if not first.done():
                first.set_result(None)

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()
