"""A host's directory: its reports to the supervisor, and its restart's recovery."""

from __future__ import annotations

import asyncio

from actors.directory import RECOVER_AT_ONCE, HostDirectory
from actors.host import SessionHost
from actors.host_options import HostOptions
from actors.local import InProcessCluster
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


async def _listed(sessions: list[str]) -> HostDirectory:
    """A host's directory saved with ``sessions`` active, in that order (the order they were activated)."""
    store = open_store("memory://")
    active = {sid: "agent@1" for sid in sessions}

    async def report(entries: dict[str, str], version: tuple[float, int]) -> None:
        pass

    before = HostDirectory(store, "host-a", 1.0, active=lambda: dict(active), report=report, kept=True)
    await before.durable(before.mark(sessions[-1]))
    await before.close()
    return HostDirectory(store, "host-a", 2.0, active=dict, report=report, kept=True)  # the restarted host's


async def test_a_restart_reactivates_the_newest_sessions_first_a_few_at_once() -> None:
    sessions = [f"s-{i}" for i in range(40)]
    directory = await _listed(sessions)
    started: list[str] = []
    running = 0
    most = 0
    gate = Gate()

    async def activate(session_id: str, agent_key: str) -> None:
        nonlocal running, most
        started.append(session_id)
        running += 1
        most = max(most, running)
        await gate.wait()  # each activation takes a while (a log to read and fold)
        running -= 1

    recovering = asyncio.create_task(directory.recover(activate))
    await eventually(lambda: len(started) == RECOVER_AT_ONCE, TIMEOUT, what="the first activations")
    assert started == sessions[::-1][:RECOVER_AT_ONCE]  # the newest first, the rest waiting
    gate.open()
    assert await asyncio.wait_for(recovering, TIMEOUT) == sessions
    assert started == sessions[::-1] and most == RECOVER_AT_ONCE


async def test_a_session_that_fails_to_reactivate_does_not_stop_the_others() -> None:
    directory = await _listed(["s-1", "s-2", "s-3"])
    done: list[str] = []

    async def activate(session_id: str, agent_key: str) -> None:
        if session_id == "s-2":
            raise RuntimeError("its agent is gone")
        done.append(session_id)

    assert await asyncio.wait_for(directory.recover(activate), TIMEOUT) == ["s-1", "s-2", "s-3"]
    assert done == ["s-3", "s-1"]


def _host() -> SessionHost:
    """An in-process host (its directory's ``recover`` is the test's to replace)."""
    return SessionHost("h", HostOptions(store="memory://", namespace="n", extra={"local": True}), InProcessCluster)


async def test_the_supervisors_recover_takes_the_one_the_restarted_host_began() -> None:
    # A restarted host re-activates its sessions from __init__; the supervisor then calls
    # ``recover`` to learn them. That call waits for the boot's recovery: the directory is read,
    # and every session activated, once. A later call recovers anew.
    reads: list[int] = []
    gate = Gate()

    async def recover(activate: object) -> list[str]:
        reads.append(1)
        if len(reads) == 1:
            await gate.wait()  # the boot's recovery is still running when the supervisor calls
        return ["s-1", "s-2"]

    host = _host()
    host.directory.recover = recover  # type: ignore[method-assign]  # before the boot task's first step
    asked = asyncio.create_task(host.recover())
    await gate.reached(TIMEOUT)
    gate.open()
    assert await asyncio.wait_for(asked, TIMEOUT) == ["s-1", "s-2"]
    assert len(reads) == 1
    assert await asyncio.wait_for(host.recover(), TIMEOUT) == ["s-1", "s-2"]
    assert len(reads) == 2
    await host.shutdown()


async def test_the_supervisors_recover_runs_again_when_the_boots_failed() -> None:
    reads: list[int] = []

    async def recover(activate: object) -> list[str]:
        reads.append(1)
        if len(reads) == 1:
            raise OSError("the store is not there yet")
        return ["s-1"]

    host = _host()
    host.directory.recover = recover  # type: ignore[method-assign]
    assert await asyncio.wait_for(host.recover(), TIMEOUT) == ["s-1"]
    assert len(reads) == 2
    await host.shutdown()
