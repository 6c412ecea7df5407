"""``troupe bench actors``: sub-agents across Ray actors, and recovery from a killed host.

Three figures, each end to end on a local Ray with a SQLite store:

- **Nested parts/s.** A parent session delegates to a child placed on *another* host actor; the
  child's model streams ``parts`` text parts of 4 characters as fast as it can. The rate is
  ``parts`` over the time from the child's step starting (its log) to the parent having
  committed the last nested part (the parent's log): generation, the child's fold and log, the
  batches across actors, and the parent's fold and log, all included. A stream of its own rate:
  the median of ``RATE_RUNS`` runs on hosts that have run one delegate stream already; that
  first one (``WARMUP_PARTS`` parts on fresh hosts: the agent loaded, the hosts' first calls to
  each other, code run for the first time) is reported apart as ``cold``. The streams start once
  the spare worker the supervisor asks for at its start has booted (``_settled``): booting, it
  took 1.3-1.7 CPU-seconds of a 2-vCPU VM during the first measured run (105,000-150,000
  parts/s, against 180,000-275,000 for the runs after it). Each run reports the CPU the other
  processes took meanwhile (all but the two hosts: the driver, the supervisor, Ray's own).
- **First nested part.** From the parent's delegate call starting (its ``ai.tool.started``) to
  the parent committing the first part the child's model streamed: the child's activation on
  its host, its first write, the batch to the parent and the parent's write. Pooled (hosts
  shared) and dedicated (an actor per session, from a warm pool), with a child that says one
  word and finishes; and pooled with a child that keeps streaming (``streaming``: a part every
  5 ms, so the first text is not carried along by the child's end). The first trial of each is
  reported apart as ``cold`` (it loads the agent on the host). Dedicated trials run in a warm
  pool (``_pool_settled``): each trial's sessions leave their actors when it ends, as idle
  sessions do, and the next starts once no actor is starting. Its legs, from the two logs' times
  (``FIRST_PART_LEGS``): the call to the child's host until the child's input is staged, the
  child's first write and part, and the way back to the parent. Beside them, Ray's own one-way
  call between two plain async actors (``actors.bench.ray_call``): the first and the last leg
  each hold one such call.
- **Recovery.** A session streams a part every 5 ms; its host actor is killed (``ray.kill``,
  Ray restarts it). The time from the kill to the first stream part of the restarted step
  being committed, and its legs (``actors.boot``): Ray starting a worker process, the worker's
  boot, Troupe's imports, the host's ``__init__``, re-activating the session, and its step
  restarting. Each kill finds the cluster settled: the spare worker the one before took has been
  replaced (``actors.spare_workers``).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
import uuid
from typing import Any, cast

import ray

from actors.bench.local_ray import start_local_ray
from actors.bench.models import Burst, Drip
from actors.bench.ray_call import IDLE_PAUSE, ray_call_ms
from actors.bench.sampler import MemorySampler
from actors.boot import LEGS, recovery_legs
from actors.router import rendezvous
from actors.runtime import Runtime
from orchestrator.core import event_types as ai
from orchestrator.core.events import Event
from orchestrator.core.fold import fold_events
from orchestrator.core.parts import ToolPart
from orchestrator.models.scripted import ScriptedModel
from orchestrator.run.agent import Agent

__all__ = ["TARGETS", "bench_actors", "format_actors"]

TARGETS: dict[str, float] = {
    "nested_parts_per_s": 250_000,
    "first_nested_part_pooled_ms": 5,
    "first_nested_part_dedicated_ms": 30,
    "recovery_s": 0.5,
}
"""Issue 15's figures to keep (its "Keep" line): each printed beside its measure, ``ok`` or ``MISSED``.
The first nested part is judged by its warm p50, recovery by its worst run. Absolute figures move
2x between machines (they were met on the machine that set them, not on every one)."""

SETTLE_LIMIT = 30.0
"""Seconds a dedicated trial waits for the pool to settle (``_pool_settled``) before it runs anyway."""

POOL_QUIET = 0.2
"""Seconds between the pool settling and a dedicated trial (the released sessions' last writes)."""

SPARE_BOOT = 1.5
"""Seconds a new spare worker is given to boot before the next kill (~0.5 s on a 2-vCPU VM)."""

RATE_RUNS = 3
"""Runs of the nested stream the rate is the median of (after the cold one)."""

WARMUP_PARTS = 20_000
"""Parts of the first, cold, nested stream (at most ``parts``)."""

CALL = "d1"
"""The delegate call's id in every parent session (so the child's id is known in advance)."""

FIRST_PART_LEGS: dict[str, str] = {
    "call": "the call to the child's host, the child activated and its input staged",
    "child": "the child's first write and its model's first part",
    "back": "the child's write of it, its batch to the parent and the parent staging it",
}
"""The legs of the first nested part, in order, from the two logs' times (``_first_part``): each
ends where the next begins, so they add up to the whole. Times are the hosts' clocks, one machine."""


def _parent(child: Agent) -> Agent:
    return Agent(
        "parent",
        "Delegate.",
        ScriptedModel(
            [[{"tool": f"delegate_to_{child.name}", "input": {"task": "go"}, "id": CALL}], [{"text": "ok"}]],
            per_turn=True,
        ),
        agents=[child],
    )


def _apart(hosts: list[str], prefix: str) -> str:
    """A session id whose child (``<id>/d1``) lands on another host than the session itself."""
    for i in range(10_000):
        candidate = f"{prefix}-{i}"
        if len(hosts) < 2 or rendezvous(candidate, hosts) != rendezvous(f"{candidate}/{CALL}", hosts):
            return candidate
    raise RuntimeError("no session id puts its child on another host")


def _delegate(log: list[Event]) -> ToolPart | None:
    state = fold_events(log)
    return next((p for m in state.messages for p in m.parts if isinstance(p, ToolPart) and p.id == CALL), None)


async def _nested_rates(rt: Runtime, parts: int, runs: int = RATE_RUNS) -> dict[str, Any]:
    """The cold stream on fresh hosts, then ``runs`` more: the median run, the others' rates beside it."""
    cold = await _nested_rate(rt, min(parts, WARMUP_PARTS))
    measured = [await _nested_rate(rt, parts) for _ in range(runs)]
    median = sorted(measured, key=lambda run: run["parts_per_s"])[len(measured) // 2]
    return {
        **median,
        "runs_parts_per_s": [run["parts_per_s"] for run in measured],
        "runs_others_cpu_s": [run["others_cpu_s"] for run in measured],
        "cold_parts_per_s": cold["parts_per_s"],
        "cold_parts": cold["parts"],
    }


async def _nested_rate(rt: Runtime, parts: int) -> dict[str, Any]:
    agent = _parent(Agent("child", "Stream.", Burst(parts)))
    session_id = _apart(rt.host_names, f"rate-{uuid.uuid4().hex[:6]}")
    before = _others_cpu()
    turn = await rt.session(session_id, agent=agent).prompt("go")
    result = await asyncio.wait_for(turn.finished, 600)
    others = _others_cpu() - before
    assert result.success, result
    parent_log = await rt.store.read(session_id)
    child_log = await rt.store.read(f"{session_id}/{CALL}")
    start = next(e.at for e in child_log if e.type == ai.STEP_STARTED)
    nested = [e for e in parent_log if e.type == ai.NESTED]
    end = nested[-1].at
    delegate = _delegate(parent_log)
    text = delegate.agent.messages[-1].text if delegate is not None and delegate.agent is not None else ""
    if text != "A000" * parts:
        raise AssertionError(f"the parent's nested copy holds {len(text) // 4} of {parts} parts")
    return {
        "parts": parts,
        "seconds": round(end - start, 4),
        "parts_per_s": round(parts / (end - start)),
        "nested_writes": len(nested),
        "others_cpu_s": round(others, 2),
    }


def _others_cpu() -> float:
    """CPU seconds so far of this process and its descendants, the session hosts left out."""
    return sum(seconds for kind, seconds in MemorySampler.cpu_by_kind().items() if kind != "hosts")


async def _first_part(rt: Runtime, agent: Agent, prefix: str) -> tuple[float, dict[str, float]]:
    """Milliseconds from the delegate call's start to the parent staging the child's first text, and its legs."""
    hosts = rt.host_names
    session_id = _apart(hosts, f"{prefix}-{uuid.uuid4().hex[:6]}") if hosts else f"{prefix}-{uuid.uuid4().hex[:6]}"
    turn = await rt.session(session_id, agent=agent).prompt("go")
    result = await asyncio.wait_for(turn.finished, 120)
    assert result.success, result
    log = await rt.store.read(session_id)
    child = await rt.store.read(f"{session_id}/{CALL}")
    started = next(e.at for e in log if e.type == ai.TOOL_STARTED and e.payload.get("callId") == CALL)
    child_input = next(e.at for e in child if e.type == ai.INPUT)
    child_text = next(e.at for e in child if e.type == ai.STREAM)
    for i, event in enumerate(log):
        if event.type != ai.NESTED:
            continue
        delegate = _delegate(log[: i + 1])
        if delegate is not None and delegate.agent is not None and delegate.agent.messages[-1].text:
            legs = {"call": child_input - started, "child": child_text - child_input, "back": event.at - child_text}
            return (event.at - started) * 1000, {leg: seconds * 1000 for leg, seconds in legs.items()}
    raise AssertionError("the child's first part never reached the parent")


STREAMING_CHILD = [[{"text": "hello from a child that keeps streaming", "chunk": 4, "pace": 0.005}]]
"""A child whose step goes on after its first text (a part every 5 ms), as a model's does."""


async def _first_parts(
    rt: Runtime, trials: int, prefix: str, script: list[Any] | None = None, *, dedicated: bool = False
) -> dict[str, Any]:
    steps = script if script is not None else [[{"text": "hello"}]]
    agent = _parent(Agent("child", "Say hello.", ScriptedModel(steps, per_turn=True)))
    cold, _ = await _first_part(rt, agent, prefix)
    warm = []
    pools: list[dict[str, Any]] = []
    for _ in range(trials):
        if dedicated:
            pools.append(await _pool_settled(rt))
        warm.append(await _first_part(rt, agent, prefix))
    row: dict[str, Any] = {
        "cold_ms": round(cold, 2),
        "p50_ms": round(statistics.median(ms for ms, _ in warm), 2),
        "max_ms": round(max(ms for ms, _ in warm), 2),
        "trials": trials,
        "legs_p50_ms": {leg: round(statistics.median(legs[leg] for _, legs in warm), 2) for leg in FIRST_PART_LEGS},
    }
    if pools:  # what the pool did during the trials: a warm pool starts no actor, and shares none
        before, after = pools[0], await _pool(rt)
        row["pool"] = {
            "actors": before["live"],
            "started": after["started"] - before["started"],
            "shared": after["shared"] - before["shared"],
        }
    return row


async def _pool(rt: Runtime) -> dict[str, Any]:
    """The dedicated pool's figures (``DedicatedPool.stats``)."""
    info: dict[str, Any] = await asyncio.wait_for(rt.supervisor.info.remote(), 60)
    return cast(dict[str, Any], info["dedicated"])


async def _pool_settled(rt: Runtime) -> dict[str, Any]:
    """Dedicated placement: release the last trial's actors, and wait until they are back and none is starting.

    A warm pool, as a running app has one: its idle sessions leave their actors (here at once,
    ``deactivate_idle``; after ``idle_timeout`` in an app), which go back to the pool warm. Until
    round thirty-seven each trial's parent kept its actor, so the pool grew by an actor a trial:
    trials ran while new actors booted (~1 CPU-second each on a 2-vCPU VM), and once the pool was
    full a child ran on its parent's actor. The same code gave a p50 of 28-31 ms that way, and
    12-23 ms in a warm pool. Returns the pool's figures once settled (or ``SETTLE_LIMIT`` passed).
    """
    await rt.deactivate_idle()
    deadline = time.monotonic() + SETTLE_LIMIT
    pool = await _pool(rt)
    while (pool["starting"] or pool["sessions"]) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        pool = await _pool(rt)
    await asyncio.sleep(POOL_QUIET)
    return pool


async def _recovery_s(rt: Runtime) -> tuple[float, dict[str, float]]:
    """Seconds from a host's kill to its session's step streaming again, and that time's legs (``actors.boot``)."""
    session_id = f"recover-{uuid.uuid4().hex[:6]}"
    session = rt.session(session_id, agent=Agent("dripper", "Drip.", Drip()))
    await session.prompt("go")

    async def streaming(after_step: str | None) -> tuple[str, float]:
        """The running step and when its first part was committed (a step other than ``after_step``)."""
        while True:
            log = await rt.store.read(session_id)
            steps = [e.payload["stepId"] for e in log if e.type == ai.STEP_STARTED]
            step = steps[-1] if steps and steps[-1] != after_step else None
            first = next((e.at for e in log if e.type == ai.STREAM and e.payload.get("stepId") == step), None)
            if step is not None and first is not None:
                return str(step), first
            await asyncio.sleep(0.005)

    step, _ = await asyncio.wait_for(streaming(None), 60)
    host = rt.router.host(await rt.router.place(session_id))
    spares = (await asyncio.wait_for(rt.supervisor.info.remote(), 60))["spares"]
    asked = spares["asked"] + spares["refused"]
    killed = time.time()
    ray.kill(host, no_restart=False)  # Ray restarts the actor; it re-activates its sessions
    _, resumed = await asyncio.wait_for(streaming(step), 60)
    info = await asyncio.wait_for(host.ready.remote(), 60)  # the restarted host: when it reached each stage
    await session.stop()
    await _settled(rt, asked)
    return resumed - killed, recovery_legs(info["boot"], killed, resumed)


async def _settled(rt: Runtime, asked: int, limit: float = 20.0) -> int:
    """Wait until the supervisor has asked for spare workers beyond ``asked`` and they have booted.

    After a kill: the cluster is as it was before it, the spare worker the restart took replaced,
    so each kill is timed alike (a host failing again at once finds no spare:
    ``actors.spare_workers``). At the start (``asked`` 0): the first spares, booting on the cores
    the measured streams need, are up before them. Returns the spares asked for (or refused) so far.
    """
    deadline = time.monotonic() + limit
    while True:
        spares = (await asyncio.wait_for(rt.supervisor.info.remote(), 60))["spares"]
        if not spares["per_node"] or spares["asked"] + spares["refused"] > asked or time.monotonic() >= deadline:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(SPARE_BOOT)
    return int(spares["asked"] + spares["refused"])


async def bench_actors(
    *, parts: int = 200_000, trials: int = 10, recoveries: int = 3, workdir: str | None = None
) -> dict[str, Any]:
    """Run the three measurements (see the module docstring) and return their figures."""
    scratch = workdir or tempfile.mkdtemp(prefix="troupe-bench-actors-")
    started = start_local_ray("troupe-bench")
    try:
        store = f"sqlite:///{scratch}/actors.db"
        # Sub-agents spread over the hosts: the child runs in another actor than its parent.
        pooled = Runtime(store=store, namespace=f"bench-p-{uuid.uuid4().hex[:6]}", hosts_per_node=2, children="spread")
        await pooled.start()
        try:
            spares = await _settled(pooled, 0)  # the spare worker asked for at the start has booted
            rate = {**await _nested_rates(pooled, parts), "spares_before": spares}
            first_pooled = await _first_parts(pooled, trials, "first")
            first_streaming = await _first_parts(pooled, trials, "streaming", script=STREAMING_CHILD)
            recovered = [await _recovery_s(pooled) for _ in range(recoveries)]
        finally:
            await pooled.close()
        dedicated = Runtime(store=store, namespace=f"bench-d-{uuid.uuid4().hex[:6]}", placement="dedicated")
        await dedicated.start()
        try:
            first_dedicated = await _first_parts(dedicated, trials, "dedicated", dedicated=True)
        finally:
            await dedicated.close()
        # Last: its two actors take worker processes, the spares a recovery (and the dedicated pool) would use.
        ray_call = await ray_call_ms()
    finally:
        if started:
            ray.shutdown()
    recovery = [seconds for seconds, _ in recovered]
    return {
        "nested": rate,
        "first_nested_part": {"pooled": first_pooled, "streaming": first_streaming, "dedicated": first_dedicated},
        "ray_call": ray_call,
        "recovery": {
            "p50_s": round(statistics.median(recovery), 3),
            "max_s": round(max(recovery), 3),
            "runs": [round(r, 3) for r in recovery],
            "legs_p50_s": {leg: round(statistics.median(legs[leg] for _, legs in recovered), 3) for leg in LEGS},
        },
        "targets": dict(TARGETS),
    }


def format_actors(result: dict[str, Any]) -> str:
    """The figures as a short plain-text report, each against its target."""
    nested = result["nested"]
    first = result["first_nested_part"]
    recovery = result["recovery"]
    targets = result["targets"]

    def mark(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    rate, least = nested["parts_per_s"], targets["nested_parts_per_s"]
    runs = nested.get("runs_parts_per_s") or [rate]
    spread = f"median of {len(runs)}: " + ", ".join(f"{r:,}" for r in runs) + "; " if len(runs) > 1 else ""
    others = nested.get("runs_others_cpu_s")
    others_note = (
        "; the other processes (driver, supervisor, Ray's own) took "
        + ", ".join(f"{s:.2f}" for s in others)
        + " CPU-s during the runs"
        if others
        else ""
    )
    cold = nested.get("cold_parts_per_s")
    cold_note = f"; cold {cold:,} ({nested['cold_parts']:,} parts on fresh hosts)" if cold is not None else ""
    lines = [
        f"nested parts/s (child -> parent, across actors): {rate:,} "
        f"({spread}{nested['parts']:,} parts in {nested['seconds']:.3f} s, {nested['nested_writes']} parent writes"
        f"{cold_note}{others_note})  target >= {least:,.0f}  {mark(rate >= least)}",
    ]
    labels = {"pooled": "pooled", "streaming": "pooled, streaming child", "dedicated": "dedicated"}
    for name, label in labels.items():
        row = first.get(name)
        if row is None:
            continue
        line = (
            f"first nested part, {label:<23}: p50 {row['p50_ms']:.1f} ms, max {row['max_ms']:.1f} ms, "
            f"cold {row['cold_ms']:.1f} ms ({row['trials']} trials)"
        )
        target = targets.get(f"first_nested_part_{name}_ms")
        if target is not None:
            line += f"  target <= {target:g} ms  {mark(row['p50_ms'] <= target)}"
        lines.append(line)
        legs_ms = row.get("legs_p50_ms")
        if legs_ms:
            parts = (f"{FIRST_PART_LEGS[leg]} {legs_ms[leg]:.1f} ms" for leg in FIRST_PART_LEGS if leg in legs_ms)
            lines.append("  of which, p50: " + ", ".join(parts))
        pool = row.get("pool")
        if pool:
            lines.append(
                f"  a warm pool of {pool['actors']} actors: {pool['started']} started and {pool['shared']} children "
                "on their parent's actor during the trials (each trial's sessions released when it ends)"
            )
    ray_call = result.get("ray_call")
    if ray_call:
        lines.append(
            f"Ray's own call between two async actors, one way (no Troupe; a first nested part across hosts "
            f"makes two): p50 {ray_call['idle_p50_ms']:.1f} ms after {IDLE_PAUSE * 1000:g} ms idle, "
            f"{ray_call['busy_p50_ms']:.1f} ms back to back ({ray_call['calls']} calls each)"
        )
    lines.append(
        f"recovery (host killed -> streaming again): p50 {recovery['p50_s']:.2f} s, max {recovery['max_s']:.2f} s"
        f"  target <= {targets['recovery_s']:g} s  {mark(recovery['max_s'] <= targets['recovery_s'])}"
    )
    legs = recovery.get("legs_p50_s")
    if legs:
        lines.append("  of which, p50: " + ", ".join(f"{LEGS[leg]} {legs[leg]:.2f} s" for leg in LEGS if leg in legs))
    return "\n".join(lines)
