"""``troupe bench data``: rows/s and peak memory of a Ray Data job of sessions, beside a plain gather.

The workload: N rows (10,000 by default), one session each, running a short two-step agent on
the scripted model: step 1 says "Looking." and calls ``lookup_price`` (1 ms), step 2 answers
"Mugs are 4.99.". The same N prompts run twice, each time on a fresh local Ray (2 host actors, one SQLite file):

- ``gather``: ``asyncio.gather`` over ``rt.session(id).prompt(text)`` and ``turn.finished`` for
  every row at once, in the driver: the plain way;
- ``ray data``: ``actors.data.run_sessions`` over ``ray.data.range(N)``, consumed as a stream
  (``iter_batches``), with ``concurrency`` actors of ``in_flight`` sessions each.

Each reports wall time, rows/s, and the peak RSS of this process and every descendant (Ray's
processes, the hosts, the Ray Data actors), sampled every 100 ms, with the baseline before it.
Every row must succeed with the expected text, or the run fails.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import ray

from actors.bench.sampler import MemorySampler, memory_settled
from actors.data import run_sessions
from actors.runtime import Runtime
from orchestrator.models.scripted import ScriptedModel
from orchestrator.run.agent import Agent
from tools.builtin import lookup_price

__all__ = ["ANSWER", "DataRun", "as_json", "bench_data", "format_data", "two_step_agent"]

ANSWER = "Mugs are 4.99."


def two_step_agent() -> Agent:
    """The workload's agent: a tool call, then an answer."""
    steps: list[list[dict[str, Any]]] = [
        [{"text": "Looking."}, {"tool": "lookup_price", "input": {"slug": "mug"}}],
        [{"text": ANSWER}],
    ]
    return Agent("pricer", "Look up prices.", ScriptedModel(steps, per_turn=True), tools=[lookup_price])


@dataclass
class DataRun:
    """One way of running the N rows."""

    way: str
    rows: int
    wall_s: float
    rows_per_s: float
    peak_rss_mb: float
    baseline_rss_mb: float


async def _gather(rt: Runtime, agent: Agent, rows: int) -> None:
    async def one(i: int) -> None:
        turn = await rt.session(f"gather-{i}", agent=agent).prompt(f"price of mugs, row {i}")
        result = await turn.finished
        if not result.success or result.text != ANSWER:
            raise AssertionError(f"gather-{i}: {result.outcome} {result.error} {result.text!r}")

    await asyncio.gather(*(one(i) for i in range(rows)))


def _ray_data(rt: Runtime, agent: Agent, rows: int, concurrency: int, in_flight: int, batch_size: int) -> None:
    ds = ray.data.range(rows).map(lambda row: {"id": f"data-{row['id']}", "prompt": f"price of mugs, row {row['id']}"})
    results = run_sessions(
        ds,
        runtime=rt,
        agent=agent,
        prompt="prompt",
        key="id",
        concurrency=concurrency,
        in_flight=in_flight,
        batch_size=batch_size,
    )
    seen = 0
    batch: Any
    for batch in results.iter_batches(batch_format="pyarrow", batch_size=None):
        for row in batch.select(["session_id", "success", "text", "error"]).to_pylist():
            if not row["success"] or row["text"] != ANSWER:
                raise AssertionError(f"{row['session_id']}: {row['error']} {row['text']!r}")
        seen += batch.num_rows
    if seen != rows:
        raise AssertionError(f"ray data gave {seen} rows of {rows}")


async def _measure(way: str, rows: int, run: Any) -> DataRun:
    baseline = MemorySampler.total()
    with MemorySampler() as memory:
        start = time.perf_counter()
        await run()
        wall = time.perf_counter() - start
    return DataRun(
        way=way,
        rows=rows,
        wall_s=round(wall, 2),
        rows_per_s=round(rows / wall, 1),
        peak_rss_mb=round(memory.peak / 2**20, 1),
        baseline_rss_mb=round(baseline / 2**20, 1),
    )


async def bench_data(
    rows: int = 10_000,
    *,
    concurrency: int = 1,
    in_flight: int = 512,
    batch_size: int = 128,
    workdir: str | None = None,
    progress: Any = None,
) -> list[DataRun]:
    """Run the N rows through ``gather``, then through Ray Data: each on a fresh local Ray and SQLite file.

    A Ray of its own for each way, so neither starts with the other's memory in its hosts.
    """
    own = workdir is None
    base = Path(workdir or tempfile.mkdtemp(prefix="troupe-bench-data-"))
    os.makedirs(base, exist_ok=True)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    agent = two_step_agent()
    runs: list[DataRun] = []
    try:
        for way in ("gather", "ray data"):
            scratch = base / way.replace(" ", "-")
            async with Runtime(
                store=f"sqlite:///{scratch / 'data.db'}",
                namespace="troupe-bench-data",
                ray_options={"_temp_dir": str(scratch / "ray"), "num_cpus": os.cpu_count() or 2},
            ) as rt:
                await _gather(rt, agent, 20)  # warm up the hosts
                await rt.deactivate_idle()
                await memory_settled()
                if way == "gather":
                    runs.append(await _measure(way, rows, lambda: _gather(rt, agent, rows)))
                else:

                    async def data() -> None:
                        await asyncio.to_thread(_ray_data, rt, agent, rows, concurrency, in_flight, batch_size)

                    runs.append(await _measure(way, rows, data))
            if progress is not None:
                progress(runs[-1])
    finally:
        if own:
            shutil.rmtree(base, ignore_errors=True)
    return runs


def format_data(runs: list[DataRun]) -> str:
    """The table for the README."""
    lines = [f"{'way':<10} {'rows':>7} {'wall s':>8} {'rows/s':>8} {'peak RSS MB':>12} {'baseline MB':>12}"]
    for r in runs:
        lines.append(
            f"{r.way:<10} {r.rows:>7} {r.wall_s:>8.1f} {r.rows_per_s:>8.1f} {r.peak_rss_mb:>12.0f} "
            f"{r.baseline_rss_mb:>12.0f}"
        )
    return "\n".join(lines)


def as_json(runs: list[DataRun]) -> list[dict[str, Any]]:
    """The runs, for ``--json``."""
    return [asdict(r) for r in runs]
