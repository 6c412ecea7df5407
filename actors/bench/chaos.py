"""``troupe bench chaos``: many sessions under killed hosts and a killed supervisor, every promise checked.

The workload: N sessions, each ``turns`` user turns in a row, on a local Ray with a SQLite store.
Every turn of the ``clerk`` agent runs three model steps: some text and a ``charge`` call (a
``report`` tool: its side effect must never happen twice), a delegation to the ``auditor``
sub-agent (which calls ``lookup``, a ``rerun`` tool, and answers), then a closing text. Both
tools append one line to a ledger file outside Troupe (``<session> <call> <pid>``), which is what
an external side effect looks like to the world.

While the sessions run, a chaos task SIGKILLs a random host process every ``kill_every`` seconds
and, once, kills the supervisor. Then it checks, and fails on any of:

- **finished**: sessions whose every turn completed, out of N;
- **lost inputs**: inputs the client had a receipt for that are not in their session's log;
- **duplicate report effects**: a ``charge`` call with more than one ledger line;
- **unexplained reruns**: a ``lookup`` call that ran more than once where an earlier run was not
  in a process that was killed;
- **fold differs**: sessions whose log, folded from scratch, differs from the live state;

and reports how long each fault took to heal (a killed host answering again; the supervisor
answering again), p50 and max.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import statistics
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import ray

from actors.bench.local_ray import start_local_ray
from actors.runtime import Runtime
from orchestrator.core.fold import fold_events
from orchestrator.models.scripted import ScriptedModel
from orchestrator.run.agent import Agent
from tools import Tool, ToolContext, tool

__all__ = ["ChaosFigures", "bench_chaos", "chaos_agent", "format_chaos"]


def _ledger_tool(name: str, ledger: str, recovery: Any, pause: float) -> Tool:
    """A tool whose every execution appends ``<session> <call> <pid>`` to ``ledger`` (its side effect)."""

    @tool(name=name, recovery=recovery)
    async def effect(context: ToolContext, item: str) -> str:
        """Record one side effect.

        Args:
            context: The call (its session and call id go into the ledger line).
            item: What the effect is about.
        """
        line = f"{context.session_id} {context.call_id} {os.getpid()}\n".encode()
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)  # one write with O_APPEND: a line is never torn or interleaved
        finally:
            os.close(fd)
        await asyncio.sleep(pause)  # a kill can land while the effect is done but its result not stored
        return f"{name} {item}: ok"

    return effect


def chaos_agent(workdir: str, *, pause: float = 0.05) -> Agent:
    """``clerk`` (``charge``, report) delegating to ``auditor`` (``lookup``, rerun); ledgers in ``workdir``."""
    charges, lookups = str(Path(workdir) / "charges.ledger"), str(Path(workdir) / "lookups.ledger")
    auditor = Agent(
        "auditor",
        "Audit the charge.",
        ScriptedModel(
            [
                [{"text": "Checking the books. ", "chunk": 6}, {"tool": "lookup", "input": {"item": "ledger"}}],
                [{"text": "The books balance.", "chunk": 6}],
            ],
            per_turn=True,
        ),
        tools=[_ledger_tool("lookup", lookups, "rerun", pause)],
    )
    return Agent(
        "clerk",
        "Charge the customer, then have it audited.",
        ScriptedModel(
            [
                [{"text": "Charging your card now. ", "chunk": 6}, {"tool": "charge", "input": {"item": "order"}}],
                [{"tool": "delegate_to_auditor", "input": {"task": "audit the charge"}}],
                [{"text": "Charged and audited: all done.", "chunk": 6}],
            ],
            per_turn=True,
        ),
        tools=[_ledger_tool("charge", charges, "report", pause)],
        agents=[auditor],
    )


@dataclass
class ChaosFigures:
    """What a chaos run found (see the module docstring)."""

    sessions: int
    turns: int
    finished: int = 0
    lost_inputs: int = 0
    duplicate_reports: int = 0
    report_calls: int = 0
    rerun_calls: int = 0
    rerun_extras: int = 0
    unexplained_reruns: int = 0
    fold_differs: int = 0
    host_kills: int = 0
    supervisor_kills: int = 0
    heal_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every check held."""
        return (
            self.finished == self.sessions
            and not self.lost_inputs
            and not self.duplicate_reports
            and not self.unexplained_reruns
            and not self.fold_differs
        )

    def summary(self) -> dict[str, Any]:
        """The figures as JSON-able values, with the heal times' p50 and max."""
        heal = sorted(self.heal_s)
        return {
            **{k: v for k, v in asdict(self).items() if k != "heal_s"},
            "ok": self.ok,
            "heal_p50_s": round(statistics.median(heal), 3) if heal else None,
            "heal_max_s": round(heal[-1], 3) if heal else None,
        }


def _ledger(path: Path) -> list[tuple[str, str, int]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        session, call, pid = line.split(" ")
        rows.append((session, call, int(pid)))
    return rows


class _Chaos:
    """Kills host processes and the supervisor once (the second fault), timing each heal.

    Faults come every ``kill_every`` seconds, or, with ``faults``, that many spread evenly over
    the run's progress (the k-th once k/(faults+1) of all turns are done): a schedule that lands
    mid-run however fast or slow the machine is.
    """

    def __init__(self, rt: Runtime, figures: ChaosFigures, kill_every: float, faults: int | None, seed: int) -> None:
        self.rt = rt
        self.figures = figures
        self.kill_every = kill_every
        self.faults = faults
        self.random = random.Random(seed)
        self.killed_pids: set[int] = set()
        self.stopping = asyncio.Event()
        self.turns_done = 0
        self.progress = asyncio.Event()
        self.healing: dict[str, asyncio.Task[None]] = {}
        """Hosts killed and not answering yet: name -> the task that times their heal."""

    def turn_done(self) -> None:
        """A turn finished (the progress schedule counts them)."""
        self.turns_done += 1
        self.progress.set()

    async def _due(self, fault: int) -> bool:
        """Wait until fault number ``fault`` (from 1) is due; ``False`` when the run is over first."""
        if self.faults is None:
            waiting = asyncio.ensure_future(self.stopping.wait())
            done, _ = await asyncio.wait({waiting}, timeout=self.kill_every)
            waiting.cancel()
            return not done
        if fault > self.faults:
            return False
        total = self.figures.sessions * self.figures.turns
        due = total * fault // (self.faults + 1)
        while self.turns_done < due:
            if self.stopping.is_set():
                return False
            self.progress.clear()
            waits = {asyncio.ensure_future(self.stopping.wait()), asyncio.ensure_future(self.progress.wait())}
            await asyncio.wait(waits, return_when="FIRST_COMPLETED")
            for wait in waits:  # the one that lost is cancelled, not left pending
                wait.cancel()
        return not self.stopping.is_set()

    async def run(self) -> None:
        """Inject the faults as they come due; then wait for every heal (each is timed)."""
        fault = 0
        try:
            while True:
                fault += 1
                if not await self._due(fault):
                    return
                if fault == 2:
                    await self._kill_supervisor()
                else:
                    await self._kill_host()
        finally:
            await asyncio.gather(*self.healing.values())

    async def _kill_host(self) -> None:
        """SIGKILL one host that is up (what a crash looks like: no cleanup); its heal is timed beside the run."""
        up = [name for name in self.rt.host_names if name not in self.healing]
        if not up:
            return
        name = self.random.choice(up)
        handle = self.rt.router.host(name)
        pid = int((await asyncio.wait_for(handle.ready.remote(), 60))["pid"])
        self.killed_pids.add(pid)
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        self.figures.host_kills += 1
        self.healing[name] = asyncio.ensure_future(self._healed(name, handle, pid, killed))

    async def _healed(self, name: str, handle: Any, pid: int, killed: float) -> None:
        while True:  # healed: the host answers again, in a new process
            with contextlib.suppress(Exception):  # the host is restarting: ask again
                info = await asyncio.wait_for(handle.ready.remote(), 30)
                if int(info["pid"]) != pid:
                    break
            await asyncio.sleep(0.02)
        self.figures.heal_s.append(time.monotonic() - killed)
        del self.healing[name]

    async def _kill_supervisor(self) -> None:
        killed = time.monotonic()
        ray.kill(self.rt.supervisor, no_restart=False)
        self.figures.supervisor_kills += 1
        while True:
            with contextlib.suppress(Exception):  # the supervisor is restarting: ask again
                await asyncio.wait_for(self.rt.supervisor.info.remote(), 30)
                break
            await asyncio.sleep(0.02)
        self.figures.heal_s.append(time.monotonic() - killed)


async def _drive(
    rt: Runtime, agent: Agent, session_id: str, turns: int, accepted: dict[str, list[str]], chaos: _Chaos
) -> bool:
    session = rt.session(session_id, agent=agent)
    ok = True
    for turn in range(turns):
        input_id = f"{session_id}-in-{turn}"
        handle = await session.prompt(f"Turn {turn}: charge me.", id=input_id)
        if handle.receipt is not None and handle.receipt.outcome == "applied":
            accepted[session_id].append(input_id)
        outcome = await handle.finished
        chaos.turn_done()
        ok = ok and outcome.success
    return ok


async def _check(
    rt: Runtime, agent: Agent, figures: ChaosFigures, ids: list[str], accepted: dict[str, list[str]]
) -> None:
    for session_id in ids:
        log = await rt.store.read(session_id)
        logged = {e.id for e in log}
        lost = [i for i in accepted[session_id] if i not in logged]
        figures.lost_inputs += len(lost)
        figures.failures.extend(f"{session_id}: accepted input {i} is not in the log" for i in lost)
        live = await rt.session(session_id, agent=agent).state()
        if fold_events(log, None, None) != live.state:
            figures.fold_differs += 1
            figures.failures.append(f"{session_id}: the folded log differs from the live state")


def _check_ledgers(workdir: Path, figures: ChaosFigures, killed: set[int]) -> None:
    charges = Counter((s, c) for s, c, _ in _ledger(workdir / "charges.ledger"))
    figures.report_calls = len(charges)
    for (session_id, call), count in charges.items():
        if count > 1:
            figures.duplicate_reports += 1
            figures.failures.append(f"{session_id}: report call {call} ran {count} times")
    runs: dict[tuple[str, str], list[int]] = defaultdict(list)
    for session_id, call, pid in _ledger(workdir / "lookups.ledger"):
        runs[(session_id, call)].append(pid)
    figures.rerun_calls = len(runs)
    for (session_id, call), pids in runs.items():
        figures.rerun_extras += len(pids) - 1
        unexplained = [p for p in pids[:-1] if p not in killed]
        if unexplained:
            figures.unexplained_reruns += 1
            figures.failures.append(f"{session_id}: rerun call {call} ran again after pid(s) {unexplained} that lived")


async def bench_chaos(
    *,
    sessions: int = 1000,
    turns: int = 3,
    kill_every: float = 2.0,
    faults: int | None = None,
    concurrency: int = 200,
    hosts: int = 2,
    seed: int = 7,
    limit: float = 1800.0,
    workdir: str | None = None,
) -> ChaosFigures:
    """Run the chaos workload (see the module docstring) and return what it found.

    Faults come every ``kill_every`` seconds, or ``faults`` of them spread over the run's progress.
    """
    scratch = Path(workdir or tempfile.mkdtemp(prefix="troupe-bench-chaos-"))
    os.makedirs(scratch, exist_ok=True)
    started = start_local_ray("troupe-chaos")
    figures = ChaosFigures(sessions, turns)
    rt = Runtime(store=f"sqlite:///{scratch}/chaos.db", namespace=f"chaos-{uuid.uuid4().hex[:6]}", hosts_per_node=hosts)
    await rt.start()
    try:
        agent = chaos_agent(str(scratch))
        ids = [f"chaos-{i:05d}" for i in range(sessions)]
        accepted: dict[str, list[str]] = defaultdict(list)
        gate = asyncio.Semaphore(concurrency)
        chaos = _Chaos(rt, figures, kill_every, faults, seed)

        async def one(session_id: str) -> bool:
            async with gate:
                return await _drive(rt, agent, session_id, turns, accepted, chaos)

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
        await _check(rt, agent, figures, ids, accepted)
        _check_ledgers(scratch, figures, chaos.killed_pids)
    finally:
        await rt.close()
        if started:
            ray.shutdown()
    return figures


def format_chaos(figures: ChaosFigures) -> str:
    """The run as the table the README shows, then the first failures (if any)."""
    s = figures.summary()
    heal = "-" if s["heal_p50_s"] is None else f"p50 {s['heal_p50_s']:.2f} s, max {s['heal_max_s']:.2f} s"
    rows = [
        ("sessions finished", f"{figures.finished} / {figures.sessions} ({figures.turns} turns each)"),
        ("faults", f"{figures.host_kills} host SIGKILLs, {figures.supervisor_kills} supervisor kill(s)"),
        ("accepted inputs lost", str(figures.lost_inputs)),
        ("duplicate report effects", f"{figures.duplicate_reports} (of {figures.report_calls} report calls)"),
        (
            "rerun extras",
            f"{figures.rerun_extras} extra run(s) of {figures.rerun_calls} rerun calls, "
            f"{figures.unexplained_reruns} not explained by a kill",
        ),
        ("logs whose fold differs", str(figures.fold_differs)),
        ("time to heal", heal),
        ("wall time", f"{figures.wall_s:.1f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    lines.append("result: " + ("every check held" if figures.ok else "FAILED"))
    lines.extend(f"  {failure}" for failure in figures.failures[:20])
    return "\n".join(lines)
