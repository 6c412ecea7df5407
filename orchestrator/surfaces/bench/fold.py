"""``troupe bench fold``: events per second through the log fold, on the shop workload's own logs.

A host folds every event it writes (the runner stages each batch through the fold before it is
stored), and a session that activates refolds its log. ``bench reducer`` times one stream part
in the session reducer; this times the whole fold of real logs: the shop workload's sessions
(three turns, a sub-agent each), run in this process on the in-memory store, then folded from
their first event to their last, again and again.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass

from actors.bench.shop import shop_agent, shop_session
from actors.local import LocalRuntime
from orchestrator.core.events import Event
from orchestrator.core.fold import fold_events

__all__ = ["FoldFigures", "bench_fold", "format_fold_bench"]


@dataclass(frozen=True, slots=True)
class FoldFigures:
    """What ``bench_fold`` measured."""

    sessions: int
    """Top-level shop sessions whose logs were folded (their sub-agents' batches included, as ``ai.nested``)."""
    events: int
    """Events in those logs."""
    events_per_s: float
    """Median over the repeats."""
    spread: float
    """Max - min over the repeats."""

    @property
    def us_per_event(self) -> float:
        """Microseconds per event (from the median)."""
        return 1e6 / self.events_per_s


async def _shop_logs(sessions: int) -> list[list[Event]]:
    async with LocalRuntime(store="memory://") as rt:
        agent = shop_agent()
        handles = [rt.session(f"fold-{i}", agent=agent) for i in range(sessions)]
        await asyncio.gather(*(shop_session(s, []) for s in handles))
        return [await rt.store.read(s.id) for s in handles]


def bench_fold(*, sessions: int = 10, rounds: int = 20, repeats: int = 5) -> FoldFigures:
    """Fold ``sessions`` shop logs ``rounds`` times per measurement, ``repeats`` measurements."""
    logs = asyncio.run(_shop_logs(sessions))
    events = sum(len(log) for log in logs)
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(rounds):
            for log in logs:
                fold_events(log)
        rates.append(events * rounds / (time.perf_counter() - start))
    return FoldFigures(sessions, events, statistics.median(rates), max(rates) - min(rates))


def format_fold_bench(figures: FoldFigures) -> str:
    """One line: events/s and µs per event."""
    return (
        f"fold of {figures.sessions} shop sessions' logs ({figures.events} events): "
        f"{figures.events_per_s:,.0f} events/s (±{figures.spread:,.0f}), {figures.us_per_event:.1f} µs/event"
    )
