"""``troupe bench idle``, small: idle sessions written in bulk reactivate, intact, and take another turn."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.bench.idle import FIRST, LogTemplate, bench_idle, format_idle
from orchestrator.core.events import Event


def test_a_template_log_is_stamped_with_the_new_session_and_fresh_input_ids() -> None:
    events = [
        Event("msg-a1", "ai.input", {"role": "user", "text": FIRST, "generate": True}),
        Event("troupe:msg-a1:decided", "ai.control.decided", {"commandId": "msg-a1", "outcome": "applied"}),
        Event("troupe:tpl#3", "ai.turn.started", {"turnId": "t1", "inputIds": ["msg-a1"], "messageId": "troupe:t1"}),
    ]
    template = LogTemplate("tpl", events)
    one, two = template.stamp("s-1"), template.stamp("s-2")
    assert one[2].id == "troupe:s-1#3" and one[0].id != two[0].id
    assert one[1].id == f"troupe:{one[0].id}:decided" and one[2].payload["inputIds"] == [one[0].id]
    assert [e.type for e in one] == [e.type for e in events]


@pytest.mark.slow
async def test_idle_sessions_written_in_bulk_reactivate_and_continue(tmp_path: Path) -> None:
    figures = await bench_idle(sessions=200, sample=40, workdir=str(tmp_path))
    report = format_idle(figures)
    assert figures.ok, report
    assert figures.sampled == 40 and figures.continued == 3, report
    # input, decided, turn started, step started, the step's first text (written at once), its
    # last text with its finish, turn finished
    assert figures.events_per_session == 8 and figures.store_bytes_per_session > 0, report
    assert 0 < figures.reactivate_ms_p50 <= figures.reactivate_ms_p99 <= figures.reactivate_ms_max, report
    names = [line.split("  ")[0] for line in report.splitlines()]
    assert names[:6] == ["idle sessions", "created in", "memory at rest", "store", "reactivation", "continued"]
    assert report.endswith("result: every sampled session came back")
