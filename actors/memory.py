"""What a host process holds in memory, for finding a leak; and handing freed memory back to the OS.

``memory_report`` is what ``SessionHost.memory`` answers (``troupe bench soak --debug-memory``
asks it after the warm-up and at the end): the process's RSS, what SQLite has allocated (its page
caches: the store's writer keeps up to 16 MB, each reader 2 MB), the live objects the garbage
collector tracks, counted by type, and, while ``tracemalloc`` traces, the Python allocations by
source line. A type or a line whose count grows with the sessions served is real retention; an
RSS that grows while they stay flat is a cache filling up or the allocator.

``TrimSchedule`` is the allocator's side. glibc's ``malloc`` keeps memory that Python freed in
its arenas (one per thread that allocated: the loop, Ray's threads, the SQLite writer), where
fragmentation leaves it unusable for the OS and only partly reusable; ``malloc_trim(0)`` walks
every arena and returns the free pages. A host calls ``note`` after each deactivation; the
trim runs at most every ``every`` seconds, once the host has deactivated at least one session
since the last trim, off the event loop (it takes a few milliseconds on a large heap).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import gc
import resource
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from typing import Any

import psutil

__all__ = ["TRIM_EVERY", "TrimSchedule", "malloc_trim", "memory_report", "sqlite_memory"]

TRIM_EVERY = 5.0
"""Seconds between two ``malloc_trim`` calls of a host (at most; only after deactivations)."""


def _load_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    with contextlib.suppress(OSError, AttributeError):
        function: Any = ctypes.CDLL(name).malloc_trim  # glibc only (not musl, not macOS)
        function.argtypes = [ctypes.c_size_t]
        function.restype = ctypes.c_int
        return function  # type: ignore[no-any-return]
    return None


_TRIM = _load_trim()


def malloc_trim() -> bool:
    """Return the allocator's free pages to the OS; whether this libc can (glibc's ``malloc_trim``)."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


def _load_sqlite_used() -> Callable[[], int] | None:
    name = ctypes.util.find_library("sqlite3")
    if name is None:
        return None
    with contextlib.suppress(OSError, AttributeError):
        function: Any = ctypes.CDLL(name).sqlite3_memory_used  # the library Python's sqlite3 loaded
        function.argtypes = []
        function.restype = ctypes.c_int64
        return function  # type: ignore[no-any-return]
    return None


_SQLITE_USED = _load_sqlite_used()


def sqlite_memory() -> int | None:
    """Bytes SQLite has allocated in this process (page caches, statements); ``None`` if unknown."""
    return None if _SQLITE_USED is None else int(_SQLITE_USED())


def _rss() -> int:
    return int(psutil.Process().memory_info().rss)


def memory_report(*, top: int = 15, trace: bool | None = None, trim: bool = False) -> dict[str, Any]:
    """This process's memory: RSS, gc-tracked objects by type, traced allocations by line.

    ``trace``: ``True`` starts ``tracemalloc`` (it costs CPU and memory while on), ``False``
    stops it, ``None`` leaves it as it is. ``trim``: ``malloc_trim`` first (``rss_before_trim``
    says what it gave back).
    """
    report: dict[str, Any] = {}
    if trim:
        report["rss_before_trim"] = _rss()
        report["trimmed"] = malloc_trim()
    gc.collect()
    objects = gc.get_objects()
    counts = Counter(type(o).__qualname__ for o in objects)
    report.update(
        rss=_rss(),
        maxrss_kb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        gc_objects=len(objects),
        gc_frozen=gc.get_freeze_count(),
        sqlite=sqlite_memory(),
        types=dict(counts.most_common(top)),
    )
    del objects
    if tracemalloc.is_tracing():
        snapshot = tracemalloc.take_snapshot()
        stats = snapshot.statistics("lineno")
        report["traced_bytes"] = sum(s.size for s in stats)
        report["traced"] = [(str(s.traceback[0]), s.size, s.count) for s in stats[:top]]
    if trace is True and not tracemalloc.is_tracing():
        tracemalloc.start()
    elif trace is False and tracemalloc.is_tracing():
        tracemalloc.stop()
    return report


class TrimSchedule:
    """Trims the allocator after deactivations, at most every ``every`` seconds (module docstring)."""

    def __init__(self, every: float = TRIM_EVERY, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self.clock = clock
        self.trims = 0
        self._last = clock()
        self._pending = False
        self._closed = False
        self._task: asyncio.Task[None] | None = None

    def note(self) -> None:
        """A session left memory: trim soon (now if the last trim is old enough, else when it is)."""
        if self.every < 0 or _TRIM is None or self._closed:
            return
        self._pending = True
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while self._pending:
            wait = self._last + self.every - self.clock()
            if wait > 0:
                await asyncio.sleep(wait)
            self._pending = False
            await asyncio.to_thread(malloc_trim)
            self._last = self.clock()
            self.trims += 1

    def cancel(self) -> None:
        """Stop a trim that is waiting, and trim no more (the host is shutting down)."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
