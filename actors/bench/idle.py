"""``troupe bench idle``: N idle sessions, what each costs at rest, and how fast one comes back.

Idle sessions are real: one session runs a turn through the Ray hosts (a user message, a
streamed answer), and its log is the template. Each of the N sessions gets that log under its own
session id and input id (the derived event ids, the turn's input list and the decision's command id
follow), written in bulk with the store's ``append_many`` (thousands of sessions a transaction).
None of them is in memory: a host activates one on its next command, folding its log, exactly as
after a deactivation.

Then it measures: the memory the N sessions take at rest (RSS of the hosts and the driver, after
against before, per session), the store's bytes per session, and the reactivation latency of a
random sample, one at a time (a state read of a session nobody holds: the host opens it from the
store and answers). A few of the sample then take a second turn, which must see the first.
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil

from actors.bench.local_ray import bench_runtime
from actors.runtime import Runtime
from orchestrator.core.events import Event
from orchestrator.core.ids import new_id
from orchestrator.models.scripted import ScriptedModel
from orchestrator.run.agent import Agent
from orchestrator.store.base import AppendBatch, EventStore, Measurable

__all__ = ["IdleFigures", "LogTemplate", "bench_idle", "format_idle", "idle_agent"]

MB = 2**20
FIRST = "Remember: the mug is blue."
SECOND = "What colour was the mug?"
REPLY = "Noted."


def idle_agent() -> Agent:
    """An agent that answers every turn in one short streamed text."""
    return Agent("idler", "Be brief.", ScriptedModel([[{"text": REPLY, "chunk": 3}]], per_turn=True))


class LogTemplate:
    """A session's log, as text with its session id and input ids left open, to stamp out copies."""

    def __init__(self, session_id: str, events: list[Event]) -> None:
        inputs = [e.id for e in events if e.type == "ai.input"]
        rows = [[e.id, e.type, e.payload, e.at] for e in events]
        text = json.dumps(rows, separators=(",", ":"))
        for i, input_id in enumerate(inputs):
            text = text.replace(input_id, f"\x00input{i}\x00")
        self.text = text.replace(session_id, "\x00session\x00")
        if session_id in self.text or any(i in self.text for i in inputs):
            raise AssertionError("the template still names its session or inputs")
        self.inputs = len(inputs)
        self.events = len(events)

    def stamp(self, session_id: str) -> list[Event]:
        """The template's events for ``session_id``, with fresh input ids."""
        text = self.text.replace("\x00session\x00", json.dumps(session_id)[1:-1])
        for i in range(self.inputs):
            text = text.replace(f"\x00input{i}\x00", new_id("msg"))
        return [Event(eid, kind, payload, at) for eid, kind, payload, at in json.loads(text)]


@dataclass
class IdleFigures:
    """What an idle run measured (see the module docstring)."""

    sessions: int
    events_per_session: int = 0
    create_s: float = 0.0
    created_per_s: float = 0.0
    memory_before_mb: float = 0.0
    memory_after_mb: float = 0.0
    memory_per_session_kb: float = 0.0
    hosts_mb: dict[str, float] = field(default_factory=dict)
    driver_mb: float = 0.0
    store_bytes_per_session: float = 0.0
    sampled: int = 0
    reactivate_ms_p50: float = 0.0
    reactivate_ms_p99: float = 0.0
    reactivate_ms_max: float = 0.0
    continued: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every session written, every sampled one reactivated with its turn, the continued ones right."""
        return not self.failures and self.sampled > 0

    def summary(self) -> dict[str, Any]:
        """The figures as JSON-able values."""
        return {**asdict(self), "ok": self.ok}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))] if ordered else 0.0


async def _memory(rt: Runtime) -> tuple[dict[str, float], float]:
    """RSS of every host process and of the driver, in MB, after a collection in each."""
    gc.collect()
    hosts: dict[str, float] = {}
    for name, handle in zip(rt.host_names, await rt.hosts(), strict=True):
        info = await asyncio.wait_for(handle.ready.remote(), 60)
        await asyncio.wait_for(handle.memory.remote(1), 120)  # a gc.collect there too
        hosts[name] = psutil.Process(int(info["pid"])).memory_info().rss / MB
    return hosts, psutil.Process().memory_info().rss / MB


async def _stored(store: EventStore) -> int:
    return await store.stored_bytes() if isinstance(store, Measurable) else 0


async def _create(
    store: EventStore, template: LogTemplate, ids: list[str], batch: int, progress: Callable[[int], None] | None
) -> None:
    """Write the logs, ``batch`` sessions an ``append_many`` (one transaction each)."""
    for start in range(0, len(ids), batch):
        chunk = ids[start : start + batch]
        results = await store.append_many([AppendBatch(sid, template.stamp(sid), 0) for sid in chunk])
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            raise failed[0]
        if progress is not None:
            progress(start + len(chunk))


async def _reactivate(rt: Runtime, agent: Agent, ids: list[str], figures: IdleFigures) -> None:
    times: list[float] = []
    for sid in ids:
        session = rt.session(sid, agent=agent)
        begun = time.perf_counter()
        snapshot = await session.state()
        times.append(time.perf_counter() - begun)
        texts = [m.text for m in snapshot.state.messages]
        if texts != [FIRST, REPLY]:
            figures.failures.append(f"{sid}: reactivated with messages {texts}")
    figures.sampled = len(times)
    figures.reactivate_ms_p50 = round(_percentile(times, 0.5) * 1000, 2)
    figures.reactivate_ms_p99 = round(_percentile(times, 0.99) * 1000, 2)
    figures.reactivate_ms_max = round(max(times, default=0) * 1000, 2)


async def _continue(rt: Runtime, agent: Agent, ids: list[str], figures: IdleFigures) -> None:
    for sid in ids:
        session = rt.session(sid, agent=agent)
        result = await (await session.prompt(SECOND)).finished
        texts = [m.text for m in await session.messages()]
        if not result.success or texts != [FIRST, REPLY, SECOND, REPLY]:
            figures.failures.append(f"{sid}: the second turn gave {result.outcome}, messages {texts}")
        else:
            figures.continued += 1


async def bench_idle(
    *,
    sessions: int = 50_000,
    sample: int = 1000,
    store: str | None = None,
    hosts: int = 2,
    batch: int = 2000,
    seed: int = 7,
    workdir: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> IdleFigures:
    """Create ``sessions`` idle sessions and measure them (see the module docstring).

    ``store``: an empty store's URL (default: a SQLite file in ``workdir``); ``batch``: sessions
    per ``append_many``.
    """
    figures = IdleFigures(sessions)
    run_id = uuid.uuid4().hex[:6]
    async with bench_runtime("idle", workdir, store, namespace=f"idle-{run_id}", hosts_per_node=hosts) as (rt, _):
        agent = idle_agent()
        first = rt.session(f"idle-{run_id}-template", agent=agent)
        result = await (await first.prompt(FIRST)).finished
        if not result.success:
            raise AssertionError(f"the template session's turn failed: {result.outcome} {result.error}")
        await rt.deactivate_idle()
        template = LogTemplate(first.id, await rt.store.read(first.id))
        figures.events_per_session = template.events
        ids = [f"idle-{run_id}-{i:07d}" for i in range(sessions)]
        await _memory(rt)  # warm: every host has answered once
        hosts_before, driver_before = await _memory(rt)
        bytes_before = await _stored(rt.store)
        begun = time.perf_counter()
        await _create(rt.store, template, ids, batch, progress)
        figures.create_s = round(time.perf_counter() - begun, 2)
        figures.created_per_s = round(sessions / max(figures.create_s, 1e-9), 1)
        figures.store_bytes_per_session = round((await _stored(rt.store) - bytes_before) / sessions, 1)
        picked = random.Random(seed).sample(ids, min(sample, sessions))
        await _reactivate(rt, agent, picked, figures)
        await _continue(rt, agent, picked[:3], figures)
        await rt.deactivate_idle()
        hosts_after, driver_after = await _memory(rt)
        before = sum(hosts_before.values()) + driver_before
        after = sum(hosts_after.values()) + driver_after
        figures.memory_before_mb = round(before, 1)
        figures.memory_after_mb = round(after, 1)
        figures.memory_per_session_kb = round((after - before) * 1024 / sessions, 3)
        figures.hosts_mb = {n: round(v, 1) for n, v in hosts_after.items()}
        figures.driver_mb = round(driver_after, 1)
    return figures


def format_idle(figures: IdleFigures) -> str:
    """The figures as the README shows them, then the first failures (if any)."""
    rows = [
        ("idle sessions", f"{figures.sessions:,} (one turn each, {figures.events_per_session} events)"),
        ("created in", f"{figures.create_s:.1f} s ({figures.created_per_s:,.0f} sessions/s, in bulk)"),
        (
            "memory at rest",
            f"{figures.memory_per_session_kb:.3f} KB per session (hosts + driver {figures.memory_before_mb:.0f} "
            f"-> {figures.memory_after_mb:.0f} MB)",
        ),
        ("store", f"{figures.store_bytes_per_session:,.0f} bytes per session"),
        (
            "reactivation",
            f"p50 {figures.reactivate_ms_p50:.1f} ms, p99 {figures.reactivate_ms_p99:.1f} ms, "
            f"max {figures.reactivate_ms_max:.1f} ms ({figures.sampled} sampled, one at a time)",
        ),
        ("continued", f"{figures.continued} sampled sessions took a second turn that saw the first"),
    ]
    lines = [f"{name:<16} {value}" for name, value in rows]
    lines.extend(f"FAILED: {failure}" for failure in figures.failures[:10])
    lines.append("result: every sampled session came back" if figures.ok else "result: FAILED (see above)")
    return "\n".join(lines)
