"""``off_loop``: a long, pure computation on a thread of its own, so the event loop keeps turning.

A process's event loop serves every session it holds: while one callback runs, all of them wait.
A long conversation's snapshot is the largest such callback (its state encoded: ~15 µs a
message, 42-67 ms at 4,000 messages; and decoded and refolded when it is opened again), and
conversations that run in step reach their snapshots together: `troupe bench long` saw the loop
stand still for 169 ms. On the thread the same work takes the interpreter lock in slices
(``sys.getswitchinterval``: 1 ms in a host), and the loop turns between them. The work costs the
same CPU; only its wall time spreads.

Two threads, each shared by the process: one for snapshots taken behind the writes (rare; one at a
time bounds the memory their bytes take), one for snapshots being read while a session opens, so
that a session someone is waiting for never queues behind other sessions' snapshots. Only what
reads immutable values goes there (Troupe's states, persistent vectors, and the text buffers, whose
appends and reads hold their own lock); an app's own state, which its reducer may change in place,
is made plain data on the loop first (``snapshot.encode_later``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Final, TypeVar

__all__ = ["OFF_LOOP_BYTES", "OFF_LOOP_MESSAGES", "off_loop"]

T = TypeVar("T")

OFF_LOOP_MESSAGES: Final = 64
"""A state with this many messages or more is encoded on the thread (~1 ms of work on the loop;
below it, the trip to the thread and back is a fair share of the cost)."""

OFF_LOOP_BYTES: Final = 16_384
"""A snapshot of this many bytes or more is decoded (and its log's tail folded) on the thread."""

_pools: dict[bool, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def _executor(waited: bool) -> ThreadPoolExecutor:
    with _pools_lock:
        pool = _pools.get(waited)
        if pool is None:
            name = "troupe-off-loop-open" if waited else "troupe-off-loop"
            pool = _pools[waited] = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        return pool


async def off_loop(work: Callable[[], T], *, when: bool = True, waited: bool = False) -> T:
    """``work()``, run on one of the process's off-loop threads; its exception is raised here.

    ``when``: whether the work is large enough to go there (``OFF_LOOP_MESSAGES``,
    ``OFF_LOOP_BYTES``); if not, it runs here, on the loop, where the trip would cost more than it
    saves. ``waited``: a session is opening on it (a snapshot read), so it goes to the thread
    that background snapshots never hold up.
    """
    if not when:
        return work()
    return await asyncio.get_running_loop().run_in_executor(_executor(waited), work)
