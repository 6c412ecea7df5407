"""A host's reports to the supervisor: a change made while a report is on its way is reported after it."""

from __future__ import annotations

import asyncio

from actors.directory import HostDirectory
from orchestrator.store import open_store
from orchestrator.testing import Gate, eventually

TIMEOUT = 10


async def test_a_change_made_while_a_report_is_on_its_way_is_reported_after_it() -> None:
    active = {"s-1": "agent@1"}
    sent: list[dict[str, str]] = []
    first = Gate()

    async def report(entries: dict[str, str], version: tuple[float, int]) -> None:
        if not sent and not first.count:
            await first.wait()  # the first report's call waits (the supervisor looked up on a thread)
        sent.append(entries)

    directory = HostDirectory(
        open_store("memory://"), "host-a", 1.0, active=lambda: dict(active), report=report, kept=True
    )
    directory.mark("s-1")
    await first.reached(TIMEOUT)
    active["s-1/call-1"] = "agent@2"  # a sub-agent activates while that report waits
    directory.mark("s-1/call-1")
    first.open()
    await eventually(lambda: len(sent) == 2, TIMEOUT, what="a second report")
    assert sent == [{"s-1": "agent@1"}, {"s-1": "agent@1", "s-1/call-1": "agent@2"}]
    await asyncio.sleep(0.3)  # nothing changed since: no third report
    assert len(sent) == 2
    await directory.close()
