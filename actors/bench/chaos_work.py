"""The chaos workload of ``troupe bench chaos`` (``chaos``): its agent, its drive, its checks and figures.

Shared by the run in one process (``chaos``) and the drivers of a cluster run (``chaos_cluster``).
The ``clerk`` agent's every turn runs a ``charge`` call (a ``report`` tool: its side effect must
never happen twice), a delegation to the ``auditor`` (whose ``lookup`` is a ``rerun`` tool), and a
closing text; both tools append ``<session> <call> <pid>`` to a ledger file outside Troupe.
"""

from __future__ import annotations

import asyncio
import os
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from actors.bench.chaos_views import ViewMismatch
from actors.bench.faults import FAULT_KINDS
from actors.runtime import Runtime
from orchestrator.core.fold import fold_events
from orchestrator.models.scripted import ScriptedModel
from orchestrator.run.agent import Agent
from tools import Tool, ToolContext, tool

__all__ = [
    "ChaosFigures",
    "ChaosPlan",
    "chaos_agent",
    "check_ledgers",
    "check_sessions",
    "drive_session",
]


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
    views_checked: int = 0
    """Sessions whose live view, open for the whole run, was compared with the log (``chaos_views``)."""
    view_resets: int = 0
    """Times a live view was told to re-read its snapshot (a host restarted, or a poller not seen
    for ``interest_seconds``): the path a view takes when it cannot be sent what it missed."""
    view_mismatches: list[ViewMismatch] = field(default_factory=list)
    """Live views that did not reach their log's end, or differ from it (each fails the run)."""
    kinds: tuple[str, ...] = ("host", "supervisor")
    """The kinds of fault asked for (``faults.FAULT_KINDS``)."""
    store: str = "sqlite"
    injected: dict[str, int] = field(default_factory=dict)
    """Faults injected, by kind."""
    heal: dict[str, list[float]] = field(default_factory=dict)
    """Seconds each fault took to heal, by kind."""
    unhealed: list[str] = field(default_factory=list)
    """Faults that did not heal within the limit (each fails the run)."""
    wall_s: float = 0.0
    failures: list[str] = field(default_factory=list)

    @property
    def missed(self) -> list[str]:
        """Kinds asked for that never came due (the run ended first): an untested fault fails the run."""
        return [kind for kind in self.kinds if not self.injected.get(kind)]

    @property
    def ok(self) -> bool:
        """Every check held, and every fault asked for was injected."""
        return (
            self.finished == self.sessions
            and not self.lost_inputs
            and not self.duplicate_reports
            and not self.unexplained_reruns
            and not self.fold_differs
            and not self.view_mismatches
            and not self.missed
            and not self.unhealed
        )

    def heal_times(self) -> dict[str, dict[str, float]]:
        """Each kind's heal times: how many, p50 and max (seconds)."""
        times = {}
        for kind in (k for k in FAULT_KINDS if self.heal.get(k)):
            heal = sorted(self.heal[kind])
            times[kind] = {"n": len(heal), "p50_s": round(statistics.median(heal), 3), "max_s": round(heal[-1], 3)}
        return times

    def summary(self) -> dict[str, Any]:
        """The figures as JSON-able values, with each fault's heal times (p50, max)."""
        return {
            **{k: v for k, v in asdict(self).items() if k != "heal"},
            "ok": self.ok,
            "missed": self.missed,
            "heal": self.heal_times(),
        }


@dataclass(frozen=True)
class ChaosPlan:
    """The workload: what every driver of a run needs to know."""

    sessions: int
    turns: int
    concurrency: int
    hosts: int
    store: str
    workdir: str
    interest_seconds: float = 30.0
    """The hosts' ``interest_seconds`` (``HostOptions``): a stall longer than it crosses it."""

    def session_ids(self) -> list[str]:
        """The sessions' ids, in the order they start."""
        return [f"chaos-{i:05d}" for i in range(self.sessions)]


def _ledger(path: Path) -> list[tuple[str, str, int]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        session, call, pid = line.split(" ")
        rows.append((session, call, int(pid)))
    return rows


async def drive_session(
    rt: Runtime,
    agent: Agent,
    session_id: str,
    turns: int,
    *,
    first: int = 0,
    accepted: Callable[[str, str], None],
    done: Callable[[str, int, bool], None],
) -> bool:
    """Run turns ``first``..``turns-1`` of one session in a row; whether every one succeeded.

    Input ids are ``<session>-in-<turn>``: a driver that takes over from a killed one prompts a turn
    again with the same id and text, which the session takes as the same input (it waits for that
    turn's outcome instead of starting another). ``accepted`` hears of every input the session
    applied, ``done`` of every turn that ended.
    """
    session = rt.session(session_id, agent=agent)
    ok = True
    for turn in range(first, turns):
        input_id = f"{session_id}-in-{turn}"
        handle = await session.prompt(f"Turn {turn}: charge me.", id=input_id)
        if handle.receipt is not None and handle.receipt.outcome == "applied":
            accepted(session_id, input_id)
        outcome = await handle.finished
        done(session_id, turn, outcome.success)
        ok = ok and outcome.success
    return ok


async def check_sessions(
    rt: Runtime, agent: Agent, figures: ChaosFigures, ids: list[str], accepted: dict[str, list[str]]
) -> None:
    """Count accepted inputs missing from their session's log, and logs whose fold differs from the live state."""
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


def check_ledgers(workdir: Path, figures: ChaosFigures, killed: set[int]) -> None:
    """Count repeated report effects, and reruns whose earlier run was in a process that was not ``killed``."""
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
