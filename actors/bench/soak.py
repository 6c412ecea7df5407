"""``troupe bench soak``: sessions cycled for M minutes, the memory of every host process over time.

The workload: cycles of K new shop sessions (``actors.bench.shop``) run at once; each session is
activated by its first command, runs the shop's three turns under a live view (every chunk, tool
call and nested part verified), and then goes idle. The runtime's own eviction deactivates it: the
hosts run with a short ``idle_timeout``, so an idle session leaves memory a second later, its
state in the store, while the next cycles run. Cycles follow each other until M minutes are up.

A sampler reads the RSS of every host process (by the pid each host reports) and of the driver
every few seconds. After a warm-up (the first quarter of the run, at most 5 minutes: Ray's
workers, the agents' imports, SQLite's page cache fill up), the slope of the hosts' RSS against
sessions served, by least squares, is what must be flat: the run fails when it exceeds
``max_slope`` MB per 1,000 sessions served (for the hosts together, and for the driver), when a
turn is not verified, or when sessions are still active once the hosts had time to evict them.

``debug=True`` also asks every host (``SessionHost.memory``), and the driver, for its RSS, what
SQLite holds, and its gc-tracked objects by type, at the end of the warm-up and at the end; it
reports the types that grew (real retention shows there; a cache filling up or the allocator does
not), and what one ``malloc_trim`` then gives back (memory the allocator held, freed by Python but
not returned to the OS).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil

from actors.bench.local_ray import bench_runtime
from actors.bench.shop import PROMPTS, shop_agent, shop_session
from actors.memory import TRIM_EVERY, memory_report
from actors.runtime import Runtime

__all__ = ["SoakFigures", "SoakSample", "bench_soak", "format_soak", "slope_per_1000"]

MB = 2**20


@dataclass(frozen=True, slots=True)
class SoakSample:
    """The memory at one moment of the run."""

    elapsed_s: float
    served: int
    """Sessions whose every turn finished so far."""
    hosts_mb: dict[str, float]
    """RSS of each host process, by host name."""
    driver_mb: float
    active: int
    """Sessions in the hosts' memory at that moment (the cycle in flight and those not yet evicted)."""


@dataclass
class SoakFigures:
    """What a soak run measured (see the module docstring)."""

    minutes: float
    sessions_per_cycle: int
    max_slope: float
    """The bound: MB per 1,000 sessions served, after the warm-up."""
    warmup_s: float
    samples: list[SoakSample] = field(default_factory=list)
    served: int = 0
    turns: int = 0
    cycles: int = 0
    left_active: int = 0
    """Sessions still in memory after the hosts had time to evict every one."""
    hosts_slope: float | None = None
    driver_slope: float | None = None
    per_host_slope: dict[str, float] = field(default_factory=dict)
    debug: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every turn verified, every session evicted, memory flat within the bound."""
        flat = all(s is not None and s <= self.max_slope for s in (self.hosts_slope, self.driver_slope))
        return not self.failures and not self.left_active and self.served > 0 and flat

    def summary(self) -> dict[str, Any]:
        """The figures as JSON-able values."""
        return {**asdict(self), "ok": self.ok}


def slope_per_1000(points: list[tuple[int, float]]) -> float | None:
    """The least-squares slope of MB against sessions served, per 1,000 sessions (``None``: too few)."""
    if len(points) < 3:
        return None
    xs = [float(x) for x, _ in points]
    ys = [y for _, y in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return None
    return 1000 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var


class _Sampler:
    """Samples every host's RSS and the driver's, every ``every`` seconds."""

    def __init__(self, rt: Runtime, figures: SoakFigures, every: float, begun: float) -> None:
        self.rt = rt
        self.figures = figures
        self.every = every
        self.begun = begun
        self.stopping = asyncio.Event()

    async def sample(self) -> SoakSample:
        hosts: dict[str, float] = {}
        active = 0
        for name, handle in zip(self.rt.host_names, await self.rt.hosts(), strict=True):
            info = await asyncio.wait_for(handle.ready.remote(), 60)
            held = await asyncio.wait_for(handle.stats.remote(), 60)
            active += int(held["active"])
            with contextlib.suppress(psutil.Error):  # restarting: this sample has no figure for it
                hosts[name] = round(psutil.Process(int(info["pid"])).memory_info().rss / MB, 1)
        driver = round(psutil.Process().memory_info().rss / MB, 1)
        taken = SoakSample(round(time.monotonic() - self.begun, 1), self.figures.served, hosts, driver, active)
        self.figures.samples.append(taken)
        return taken

    async def run(self) -> None:
        while not self.stopping.is_set():
            await self.sample()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), self.every)


async def _cycle(rt: Runtime, figures: SoakFigures, run_id: str, agent: Any) -> None:
    """K new sessions at once, each three verified turns; they then idle until the hosts evict them."""
    ids = [f"soak-{run_id}-{figures.cycles}-{i}" for i in range(figures.sessions_per_cycle)]
    results = await asyncio.gather(
        *(shop_session(rt.session(sid, agent=agent), []) for sid in ids), return_exceptions=True
    )
    figures.cycles += 1
    for sid, result in zip(ids, results, strict=True):
        if isinstance(result, BaseException):
            figures.failures.append(f"{sid}: {type(result).__name__}: {result}")
        else:
            figures.served += 1
            figures.turns += len(PROMPTS)


async def _debug_memory(rt: Runtime, trim: bool) -> dict[str, dict[str, Any]]:
    """Every host's ``memory`` report, and the driver's own (``driver``)."""
    reports = await asyncio.gather(*(h.memory.remote(500, None, trim) for h in await rt.hosts()))
    return {**{str(r["name"]): r for r in reports}, "driver": memory_report(top=500, trim=trim)}


def _growth(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per host: the gc-tracked object types whose count grew (largest first), and what a trim gave back."""
    out: dict[str, Any] = {}
    for name, end in after.items():
        start = before.get(name, {})
        types = {t: n - start.get("types", {}).get(t, 0) for t, n in end["types"].items()}
        out[name] = {
            "gc_objects": end["gc_objects"] - start.get("gc_objects", 0),
            "types_grown": {t: d for t, d in sorted(types.items(), key=lambda kv: -kv[1]) if d > 0},
            "rss_mb": round(end["rss"] / MB, 1),
            "trim_gave_mb": round((end.get("rss_before_trim", end["rss"]) - end["rss"]) / MB, 1),
            "sqlite_mb": [round((r.get("sqlite") or 0) / MB, 1) for r in (start, end)],
            "rss_mb_at": [round(r.get("rss_before_trim", r.get("rss", 0)) / MB, 1) for r in (start, end)],
        }
    return out


async def bench_soak(
    *,
    minutes: float = 30.0,
    sessions_per_cycle: int = 20,
    store: str | None = None,
    hosts: int = 2,
    idle_timeout: float = 1.0,
    sample_every: float | None = None,
    max_slope: float = 5.0,
    trim_every: float = TRIM_EVERY,
    debug: bool = False,
    workdir: str | None = None,
    progress: Callable[[SoakSample], None] | None = None,
) -> SoakFigures:
    """Run the soak (see the module docstring) for ``minutes`` and return what it measured.

    ``store``: an empty store's URL (default: a SQLite file in ``workdir``). ``sample_every``:
    seconds between two samples (default: 5, or a 24th of a shorter run). ``trim_every``: the
    hosts' ``malloc_trim`` schedule (``Runtime(trim_every=...)``; negative: never).
    """
    total_s = minutes * 60
    figures = SoakFigures(minutes, sessions_per_cycle, max_slope, warmup_s=min(300.0, total_s / 4))
    run_id = uuid.uuid4().hex[:6]
    options = {"hosts_per_node": hosts, "idle_timeout": idle_timeout, "trim_every": trim_every}
    async with bench_runtime("soak", workdir, store, namespace=f"soak-{run_id}", **options) as (rt, _):
        agent = shop_agent()
        begun = time.monotonic()
        every = sample_every if sample_every is not None else min(5.0, max(0.5, total_s / 24))
        sampler = _Sampler(rt, figures, every, begun)
        sampling = asyncio.ensure_future(sampler.run())
        before: dict[str, dict[str, Any]] = {}
        try:
            while time.monotonic() - begun < total_s:
                await _cycle(rt, figures, run_id, agent)
                if debug and not before and time.monotonic() - begun >= figures.warmup_s:
                    before = await _debug_memory(rt, trim=False)
                if progress is not None and figures.samples:
                    progress(figures.samples[-1])
        finally:
            sampler.stopping.set()
            await sampling
        # Every session idles now: the hosts must evict them all (idle timeout, sub-agents' linger).
        deadline = time.monotonic() + idle_timeout + 60
        last = await sampler.sample()
        while last.active and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            last = await sampler.sample()
        figures.left_active = last.active
        if debug:
            figures.debug = _growth(before, await _debug_memory(rt, trim=True))
        _slopes(figures)
    return figures


def _slopes(figures: SoakFigures) -> None:
    after = [s for s in figures.samples if s.elapsed_s >= figures.warmup_s]
    names = sorted({n for s in after for n in s.hosts_mb})
    complete = [s for s in after if len(s.hosts_mb) == len(names)]
    figures.hosts_slope = slope_per_1000([(s.served, sum(s.hosts_mb.values())) for s in complete])
    figures.driver_slope = slope_per_1000([(s.served, s.driver_mb) for s in after])
    for name in names:
        slope = slope_per_1000([(s.served, s.hosts_mb[name]) for s in after if name in s.hosts_mb])
        if slope is not None:
            figures.per_host_slope[name] = round(slope, 2)


def _rows(figures: SoakFigures) -> list[SoakSample]:
    """One sample per minute (the last of each), or per sixth of the run when it is short, and the last."""
    if not figures.samples:
        return []
    step = 60.0 if figures.minutes >= 3 else max(figures.minutes * 10, 1e-9)
    rows: dict[int, SoakSample] = {}
    for sample in figures.samples:
        rows[int(sample.elapsed_s // step)] = sample
    return [*rows.values()]


def format_soak(figures: SoakFigures) -> str:
    """The table (minute, sessions served, RSS per host and the driver), the slopes, the verdict."""
    names = sorted({n for s in figures.samples for n in s.hosts_mb})
    labels = [f"host {i} MB" for i in range(len(names))]
    header = (
        f"{'minute':>7} {'served':>7} {'active':>7} " + " ".join(f"{x:>10}" for x in labels) + f" {'driver MB':>10}"
    )
    lines = [header]
    for sample in _rows(figures):
        cells = " ".join(f"{sample.hosts_mb.get(n, float('nan')):>10.1f}" for n in names)
        lines.append(
            f"{sample.elapsed_s / 60:>7.1f} {sample.served:>7} {sample.active:>7} {cells} {sample.driver_mb:>10.1f}"
        )

    def show(slope: float | None) -> str:
        return "n/a (too few samples)" if slope is None else f"{slope:+.2f}"

    lines.append(
        f"after warm-up ({figures.warmup_s / 60:.1f} min), MB per 1,000 sessions served: "
        f"hosts {show(figures.hosts_slope)} "
        f"({', '.join(f'{v:+.2f}' for v in figures.per_host_slope.values())}), driver {show(figures.driver_slope)}; "
        f"bound {figures.max_slope:g}"
    )
    lines.append(
        f"sessions served {figures.served} ({figures.turns} turns verified) in {figures.cycles} cycles of "
        f"{figures.sessions_per_cycle}; left in memory after eviction: {figures.left_active}"
    )
    for name, grown in figures.debug.items():
        top = ", ".join(f"{t} +{d}" for t, d in list(grown["types_grown"].items())[:8]) or "none"
        (rss0, rss1), (sql0, sql1) = grown["rss_mb_at"], grown["sqlite_mb"]
        lines.append(
            f"{name}: RSS {rss0:.1f} -> {rss1:.1f} MB after warm-up, of which SQLite {sql0:.1f} -> {sql1:.1f} MB; "
            f"gc objects {grown['gc_objects']:+d} (grown: {top}); "
            f"one malloc_trim gave back {grown['trim_gave_mb']:.1f} MB"
        )
    for failure in figures.failures[:10]:
        lines.append(f"FAILED: {failure}")
    lines.append("result: memory flat, every turn verified" if figures.ok else "result: FAILED (see above)")
    return "\n".join(lines)
