"""Garbage collection sized for a process that serves many sessions.

Every stream part makes a new session state: many small, short-lived containers (tuples of the
persistent vector, dataclasses). With CPython's default thresholds (a young collection every 700
allocations), the collector then runs thousands of times a second, and each older-generation
pass walks every live session's state, so its cost grows with the number of sessions held: on
the shop workload it took ~20 % of the CPU at 100 concurrent sessions and ~45 % at 1,000.

``tune_gc`` freezes what exists at startup (modules, agents: never collected) and collects in
larger, rarer steps. Session hosts call it when they start, and so does the ``troupe`` CLI for
its own process; an application embedding ``LocalRuntime`` may call it too. Reference counting
still frees almost everything at once; only reference cycles wait a little longer.
"""

from __future__ import annotations

import gc

__all__ = ["tune_gc"]


def tune_gc(young: int = 50_000) -> None:
    """Freeze the objects alive now and collect young objects every ``young`` allocations."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young, max(middle, 50), max(old, 100))
