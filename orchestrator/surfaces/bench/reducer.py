"""``troupe bench reducer``: text-deltas applied per second by the session reducer.

The reducer runs once per stream part for every session in the cluster, so its per-part cost
must be small and must not grow with the conversation. This measures a top-level delta in a
10-message and a 10,000-message conversation, and a delta nested two levels deep (a sub-agent of
a sub-agent), addressed by a path of call ids and by a single call id.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from orchestrator.core.actions import ApplyPart, Send, Within
from orchestrator.core.reducer import session_reducer
from orchestrator.core.state import SessionState
from orchestrator.core.stream import MessageStart, TextDelta, ToolCall

__all__ = ["ReducerCase", "bench_reducer", "format_reducer_bench"]


@dataclass(frozen=True, slots=True)
class ReducerCase:
    """One measured case."""

    name: str
    messages: int
    within: Within | None
    deltas_per_s: float
    spread: float


def _conversation(messages: int, nested: bool) -> SessionState:
    state = SessionState()
    for i in range(max(messages // 2, 1)):
        state = session_reducer(state, Send(f"u-{i}", "Add two mugs, please."))
        state = session_reducer(state, ApplyPart(MessageStart(f"a-{i}")))
        state = session_reducer(state, ApplyPart(TextDelta("Adding them now.", f"a-{i}")))
    if nested:
        state = session_reducer(state, ApplyPart(ToolCall("call-1", "delegate_to_researcher", {"task": "t"})))
        state = session_reducer(state, ApplyPart(MessageStart("r-1"), "call-1"))
        state = session_reducer(state, ApplyPart(ToolCall("call-2", "delegate_to_pricer", {}), "call-1"))
        state = session_reducer(state, ApplyPart(MessageStart("p-1"), ("call-1", "call-2")))
    return state


def _rate(state: SessionState, within: Within | None, deltas: int) -> float:
    action = ApplyPart(TextDelta("A000"), within)
    reducer = session_reducer
    start = time.perf_counter()
    for _ in range(deltas):
        state = reducer(state, action)
    return deltas / (time.perf_counter() - start)


def bench_reducer(*, deltas: int = 200_000, repeats: int = 5) -> list[ReducerCase]:
    """Measure every case ``repeats`` times; report the median rate and the spread (max - min)."""
    cases = [
        ("top level, 10 messages", 10, None),
        ("top level, 10,000 messages", 10_000, None),
        ("nested 2 deep (path), 10 messages", 10, ("call-1", "call-2")),
        ("nested 2 deep (call id), 10 messages", 10, "call-2"),
    ]
    results = []
    for name, size, within in cases:
        base = _conversation(size, nested=within is not None)
        rates = [_rate(base, within, deltas) for _ in range(repeats)]
        results.append(ReducerCase(name, size, within, statistics.median(rates), max(rates) - min(rates)))
    return results


def format_reducer_bench(results: list[ReducerCase]) -> str:
    """A plain-text table of the results, with the 10,000-message slowdown."""
    lines = [f"{'case':<40} {'text-deltas/s':>14} {'spread':>10}"]
    for case in results:
        lines.append(f"{case.name:<40} {case.deltas_per_s:>14,.0f} {case.spread:>10,.0f}")
    small, large = results[0].deltas_per_s, results[1].deltas_per_s
    lines.append(f"10,000-message slowdown vs 10 messages: {small / large:.2f}x (target <= 1.5x)")
    return "\n".join(lines)
