"""``troupe bench chaos``: many sessions under injected faults, every promise checked.

The workload: N sessions, each ``turns`` user turns in a row, on Ray with a SQLite or PostgreSQL
store. Every turn of the ``clerk`` agent runs three model steps: some text and a ``charge`` call (a
``report`` tool: its side effect must never happen twice), a delegation to the ``auditor``
sub-agent (which calls ``lookup``, a ``rerun`` tool, and answers), then a closing text. Both
tools append one line to a ledger file outside Troupe (``<session> <call> <pid>``), which is what
an external side effect looks like to the world.

While the sessions run, faults come (``actors/bench/faults.py``): host processes SIGKILLed every
``kill_every`` seconds and, once each, the supervisor killed, the driver SIGKILLed and a new one
joining, a node removed (these two in a cluster of the run's own: ``chaos_cluster``), the
PostgreSQL server restarted, and a host frozen for ``stall_seconds`` (SIGSTOP, then SIGCONT).
Each session has a live view (``session.live()``) open for the whole run, in a process no fault
kills (``chaos_views``). Then it checks, and fails on any of:

- **finished**: sessions whose every turn completed, out of N;
- **lost inputs**: inputs the client had a receipt for that are not in their session's log;
- **duplicate report effects**: a ``charge`` call with more than one ledger line;
- **unexplained reruns**: a ``lookup`` call that ran more than once where an earlier run was not
  in a process that was killed;
- **fold differs**: sessions whose log, folded from scratch, differs from the live state;
- **view mismatches**: live views that did not reach their log's last index, or show something
  else than the log folded through it (a missed or repeated append);
- **missed faults**: a kind of fault asked for that never came due;

and reports how long each kind of fault took to heal, p50 and max.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Final

import ray

from actors.bench.chaos_cluster import run_cluster
from actors.bench.chaos_views import SessionViews
from actors.bench.chaos_work import (
    ChaosFigures,
    ChaosPlan,
    chaos_agent,
    check_ledgers,
    check_sessions,
    drive_session,
)
from actors.bench.faults import FAULT_KINDS, STALL_SECONDS, Faults, db_restart
from actors.bench.local_ray import start_local_ray
from actors.runtime import Runtime
from orchestrator.core.errors import UsageError

__all__ = ["ChaosFigures", "bench_chaos", "chaos_agent", "format_chaos"]


async def bench_chaos(
    *,
    sessions: int = 1000,
    turns: int = 3,
    kill_every: float = 2.0,
    faults: int | None = None,
    kinds: Collection[str] = ("host", "supervisor"),
    store: str | None = None,
    store_label: str = "sqlite",
    restart_db: Callable[[], None] | None = None,
    concurrency: int = 200,
    hosts: int = 2,
    seed: int = 7,
    limit: float = 1800.0,
    workdir: str | None = None,
    stall_seconds: float = STALL_SECONDS,
    interest_seconds: float = 30.0,
) -> ChaosFigures:
    """Run the chaos workload (see the module docstring) and return what it found.

    Faults (of ``kinds``) come every ``kill_every`` seconds, or ``faults`` of them spread over the
    run's progress; the ``stall`` fault freezes its host for ``stall_seconds`` (longer than the
    hosts' ``interest_seconds``, it makes the live views re-read their snapshot). ``store`` is the
    store's URL (default: a SQLite file in ``workdir``);
    ``restart_db`` restarts its PostgreSQL server (the ``db`` fault). With a ``driver`` or ``node``
    fault the run is a cluster of its own (``chaos_cluster``): this process must not be connected
    to a Ray already.

    Raises:
        UsageError: an unknown kind, or a fault this run cannot inject (``db`` without ``restart_db``),
            or a ``stall_seconds`` that is not positive.
    """
    unknown = sorted(set(kinds) - set(FAULT_KINDS))
    kinds = tuple(k for k in FAULT_KINDS if k in kinds)
    if unknown or not kinds:
        raise UsageError(f"faults must be some of {', '.join(FAULT_KINDS)}, not {unknown or 'none'}")
    if "db" in kinds and restart_db is None:
        raise UsageError("the db fault restarts a PostgreSQL server the run started itself: use --store postgres")
    if not stall_seconds > 0:
        raise UsageError(f"the stall fault freezes a host for a positive number of seconds, not {stall_seconds}")
    scratch = Path(workdir or tempfile.mkdtemp(prefix="troupe-bench-chaos-"))
    os.makedirs(scratch, exist_ok=True)
    url = store or f"sqlite:///{scratch}/chaos.db"
    figures = ChaosFigures(sessions, turns, kinds=kinds, store=store_label)
    plan = ChaosPlan(sessions, turns, concurrency, hosts, url, str(scratch), interest_seconds)
    try:
        run = run_cluster if "driver" in kinds or "node" in kinds else _run_local
        await run(
            plan,
            figures,
            kill_every=kill_every,
            faults=faults,
            seed=seed,
            limit=limit,
            restart_db=restart_db,
            stall_seconds=stall_seconds,
        )
    finally:
        if workdir is None and figures.ok:  # a scratch directory of its own: kept only to look into a failure
            shutil.rmtree(scratch, ignore_errors=True)
        elif workdir is None:
            figures.failures.insert(0, f"the run's ledgers, store and driver logs are kept in {scratch}")
    return figures


async def _run_local(
    plan: ChaosPlan,
    figures: ChaosFigures,
    *,
    kill_every: float,
    faults: int | None,
    seed: int,
    limit: float,
    restart_db: Callable[[], None] | None,
    stall_seconds: float,
) -> None:
    """The run in this process's Ray (started unless it is connected to one): host, supervisor, stall, db."""
    scratch = Path(plan.workdir)
    turns, concurrency, hosts, url = plan.turns, plan.concurrency, plan.hosts, plan.store
    kinds = figures.kinds
    started = start_local_ray("troupe-chaos")
    rt = Runtime(
        store=url,
        namespace=f"chaos-{uuid.uuid4().hex[:6]}",
        hosts_per_node=hosts,
        interest_seconds=plan.interest_seconds,
    )
    await rt.start()
    agent = chaos_agent(str(scratch))
    views = SessionViews(rt, agent)
    try:
        ids = plan.session_ids()
        accepted: dict[str, list[str]] = defaultdict(list)
        gate = asyncio.Semaphore(concurrency)
        special = {"db": db_restart(rt.store, restart_db)} if restart_db is not None else {}
        chaos = Faults(
            rt,
            figures,
            kinds,
            kill_every=kill_every,
            count=faults,
            seed=seed,
            special=special,
            stall_seconds=stall_seconds,
        )

        async def one(session_id: str) -> bool:
            async with gate:
                await views.open(session_id)  # open until the end: every later fault passes it too
                return await drive_session(
                    rt,
                    agent,
                    session_id,
                    turns,
                    accepted=lambda s, i: accepted[s].append(i),
                    done=lambda *_: chaos.turn_done(),
                )

        begun = time.monotonic()
        injecting = asyncio.ensure_future(chaos.run())
        try:
            results = await asyncio.wait_for(asyncio.gather(*(one(s) for s in ids), return_exceptions=True), limit)
        finally:
            chaos.stopping.set()
            await injecting
        figures.wall_s = round(time.monotonic() - begun, 2)
        for session_id, result in zip(ids, results, strict=True):
            if result is True:
                figures.finished += 1
            else:
                figures.failures.append(f"{session_id}: did not finish ({result!r})")
        await check_sessions(rt, agent, figures, ids, accepted)
        figures.views_checked = await views.check(ids)
        figures.view_mismatches.extend(views.mismatches)
        figures.view_resets = views.resets
        check_ledgers(scratch, figures, chaos.killed_pids)
    finally:
        await views.close()
        await rt.close()
        if started:
            ray.shutdown()


_FAULT_ROWS: Final = {
    "host": "host SIGKILL",
    "supervisor": "supervisor kill",
    "driver": "driver SIGKILL + new driver",
    "node": "node removed",
    "db": "PostgreSQL restart",
    "stall": "host SIGSTOP + SIGCONT",
}


def format_chaos(figures: ChaosFigures) -> str:
    """The run as the table the README shows (a heal row per fault), then the first failures (if any)."""
    injected = ", ".join(f"{figures.injected.get(k, 0)} {_FAULT_ROWS[k]}" for k in figures.kinds)
    rows = [
        ("sessions finished", f"{figures.finished} / {figures.sessions} ({figures.turns} turns each)"),
        ("store", figures.store),
        ("faults", injected),
        ("accepted inputs lost", str(figures.lost_inputs)),
        ("duplicate report effects", f"{figures.duplicate_reports} (of {figures.report_calls} report calls)"),
        (
            "rerun extras",
            f"{figures.rerun_extras} extra run(s) of {figures.rerun_calls} rerun calls, "
            f"{figures.unexplained_reruns} not explained by a kill",
        ),
        ("logs whose fold differs", str(figures.fold_differs)),
        (
            "live views off the log",
            f"{len(figures.view_mismatches)} (of {figures.views_checked} checked; "
            f"{figures.view_resets} snapshot re-read(s))",
        ),
    ]
    for kind, heal in figures.heal_times().items():
        rows.append(
            (f"heal: {_FAULT_ROWS[kind]}", f"p50 {heal['p50_s']:.2f} s, max {heal['max_s']:.2f} s (n={heal['n']:g})")
        )
    rows.append(("wall time", f"{figures.wall_s:.1f} s"))
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    lines.append("result: " + ("every check held" if figures.ok else "FAILED"))
    lines.extend(f"  {unhealed}" for unhealed in figures.unhealed)
    lines.extend(f"  the {kind} fault never came due (the run ended first)" for kind in figures.missed)
    lines.extend(f"  {m.session_id}: live view: {m.difference}" for m in figures.view_mismatches[:20])
    lines.extend(f"  {failure}" for failure in figures.failures[:20])
    return "\n".join(lines)
