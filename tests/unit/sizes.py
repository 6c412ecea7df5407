"""How much memory an object takes, measured the way the memory tests need it."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable


def bytes_each(make: Callable[[], object], count: int = 500) -> float:
    """The traced bytes one ``make()`` result holds, averaged over ``count`` kept alive at once."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [make() for _ in range(count)]
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(kept) == count
    return grown / count
