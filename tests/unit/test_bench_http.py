"""``troupe bench http``, small: a served app (``troupe serve --local`` in a child process) under load.

No timing is asserted: the run must finish with every request answered and every SSE follower
having seen every event of its session exactly once (the same events as the session's reference
follower, whose fold equals the session's final state).
"""

from __future__ import annotations

import pytest

from orchestrator.core.errors import UsageError
from orchestrator.surfaces.bench.http import bench_http, format_http


@pytest.mark.slow
async def test_a_small_run_loses_and_repeats_no_event() -> None:
    figures = await bench_http(sessions=4, followers=20, requests=100, connections=20, local=True, limit=300)
    text = format_http(figures)
    assert figures.ok, text
    assert [p.name for p in figures.phases] == ["burst", "reads"]
    assert all(p.requests == 100 and p.errors == 0 for p in figures.phases)
    assert figures.lost == figures.duplicated == figures.mismatched == figures.unfinished == 0
    assert figures.events > 20  # every follower got the turns' events, not just a snapshot
    assert "every follower saw every event exactly once" in text


async def test_bad_sizes_are_refused() -> None:
    with pytest.raises(UsageError, match="--followers"):
        await bench_http(followers=0, local=True)
