"""``troupe bench shop``: a faithful, reproducible agent workload, end to end on Ray.

The workload (defined exactly, so it can be compared with other systems):

- Two agents on ``ScriptedModel``. ``shop`` has ``add_to_cart`` and ``delegate_to_researcher``;
  its sub-agent ``researcher`` has ``lookup_price``.
- Each user turn ``shop`` runs three model steps: (1) 50 text chunks of 4 characters
  (``A000``..``A049``), then ``add_to_cart {"slug": "mug", "qty": 2}``; (2)
  ``delegate_to_researcher {"task": "compare mug prices"}``; (3) 100 chunks ``C000``..``C099``,
  finish. ``researcher`` runs two steps: 50 chunks ``R000``..``R049`` then
  ``lookup_price {"slug": "mug"}``; then 50 chunks ``S000``..``S049``, finish (that text is the
  delegate call's result).
- ``add_to_cart`` sleeps 2 ms and returns "Added."; ``lookup_price`` sleeps 1 ms and returns
  "4.99"; the model yields to the event loop after every chunk, as a network stream would.
- A session is three user turns in a row. The store is a SQLite file (or the store URL given:
  ``troupe bench shop --store postgres``). N sessions start at once;
  a consumer subscribes to every session (subscribe, then snapshot, then mutations) and must see
  every chunk, tool call and result live, nested parts under their delegate call. Everything
  delivered is verified per turn; a missing item fails the run.

``chunk`` (``--chunk``) cuts the same texts into longer or shorter chunks; everything else in a
turn stays, so the CPU a session saves with longer chunks is what its chunks cost.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from actors.bench.profile import Profile, Profiler
from actors.bench.sampler import MemorySampler, memory_settled
from actors.client import LiveView, Session
from actors.runtime import Runtime
from orchestrator.core.errors import UsageError
from orchestrator.core.parts import AgentMessage, TextPart, ToolPart
from orchestrator.models.scripted import ScriptedModel
from orchestrator.run.agent import Agent
from orchestrator.store.base import EventStore, Measurable
from tools.builtin import add_to_cart, lookup_price

__all__ = [
    "PROMPTS",
    "ShopFigures",
    "bench_shop",
    "busiest_host_share",
    "chunks_per_turn",
    "format_shop",
    "shop_agent",
    "shop_session",
    "verify_turn",
]

PROMPTS = (
    "I would like two mugs, please.",
    "Add two more mugs and check the price.",
    "One more round: two mugs, and compare prices again.",
)
CHUNK = 4
"""Characters per text chunk: the workload compared with LangGraph (``bench shop --chunk`` changes it)."""
TURN_TEXTS = (50, 100, 50, 50)
"""A turn's four texts, in 4-character pieces: ``shop``'s two, then ``researcher``'s two (nested)."""
CHUNKS_PER_TURN = sum(TURN_TEXTS)
"""Text chunks a turn delivers: 150 at the top level, 100 nested under the delegate call."""


def chunks_per_turn(chunk: int = CHUNK) -> int:
    """Text chunks a turn delivers when its texts are cut every ``chunk`` characters (250 at 4)."""
    return sum(_cut(4 * pieces, chunk) for pieces in TURN_TEXTS)


def _cut(length: int, chunk: int) -> int:
    """The chunks a text of ``length`` characters is cut into, ``chunk`` at a time (the last may be shorter)."""
    return -(-length // chunk)


@functools.cache
def chunks(prefix: str, count: int) -> str:
    """``A000A001...``: ``count`` chunks of 4 characters."""
    return "".join(f"{prefix}{i:03d}" for i in range(count))


def shop_agent(chunk: int = CHUNK) -> Agent:
    """The two agents of the workload, their texts cut every ``chunk`` characters."""
    researcher = Agent(
        "researcher",
        "Compare prices.",
        ScriptedModel(
            [
                [{"text": chunks("R", 50), "chunk": chunk}, {"tool": "lookup_price", "input": {"slug": "mug"}}],
                [{"text": chunks("S", 50), "chunk": chunk}, {"finish": "stop"}],
            ],
            per_turn=True,
        ),
        tools=[lookup_price],
    )
    return Agent(
        "shop",
        "You help the user shop.",
        ScriptedModel(
            [
                [
                    {"text": chunks("A", 50), "chunk": chunk},
                    {"tool": "add_to_cart", "input": {"slug": "mug", "qty": 2}},
                ],
                [{"tool": "delegate_to_researcher", "input": {"task": "compare mug prices"}}],
                [{"text": chunks("C", 100), "chunk": chunk}, {"finish": "stop"}],
            ],
            per_turn=True,
        ),
        tools=[add_to_cart],
        agents=[researcher],
    )


def _show(part: object) -> str:
    text = part.text if isinstance(part, TextPart) else repr(part)
    return f"{text[:24]!r}...{text[-24:]!r} ({len(text)} chars)"


def verify_turn(reply: AgentMessage, chunk: int = CHUNK) -> int:
    """Check one turn's assistant message as a subscriber assembled it; returns chunks seen.

    Raises:
        AssertionError: naming what is missing or wrong.
    """
    kinds = [p.type for p in reply.parts]
    assert kinds == ["text", "tool", "tool", "text"], f"{reply.id}: parts {kinds}"
    first, cart, delegate, last = reply.parts
    assert isinstance(first, TextPart) and first.text == chunks("A", 50), f"{reply.id}: first text {_show(first)}"
    assert isinstance(cart, ToolPart) and (cart.name, cart.state, cart.output) == ("add_to_cart", "done", "Added.")
    assert cart.input == {"slug": "mug", "qty": 2}, f"{reply.id}: add_to_cart input {cart.input}"
    assert isinstance(delegate, ToolPart) and delegate.name == "delegate_to_researcher", f"{reply.id}: delegate"
    assert (delegate.state, delegate.output) == ("done", chunks("S", 50)), f"{reply.id}: delegate result"
    assert isinstance(last, TextPart) and last.text == chunks("C", 100), f"{reply.id}: final text {_show(last)}"
    nested = delegate.agent
    assert nested is not None, f"{reply.id}: no nested run under the delegate call"
    child = nested.messages[-1]
    kinds = [p.type for p in child.parts]
    assert kinds == ["text", "tool", "text"], f"{reply.id}: nested parts {kinds}"
    r_text, price, s_text = child.parts
    assert isinstance(r_text, TextPart) and r_text.text == chunks("R", 50), f"{reply.id}: nested text {_show(r_text)}"
    assert isinstance(price, ToolPart) and (price.name, price.state, price.output) == ("lookup_price", "done", "4.99")
    assert isinstance(s_text, TextPart) and s_text.text == chunks("S", 50), f"{reply.id}: nested final text"
    return sum(_cut(text.length, chunk) for text in (first, last, r_text, s_text))


@dataclass
class ShopRun:
    """One run at one N."""

    sessions: int
    wall_s: float
    sessions_per_s: float
    text_chunks_per_s: float
    ttft_ms_p50: float
    ttft_ms_p99: float
    peak_rss_mb: float
    baseline_rss_mb: float
    memory_per_session_kb: float
    store_bytes_per_session: float
    cpu_s: float
    """CPU seconds of every process (Ray's and the driver), less the memory sampler's own."""
    cpu_us_per_chunk: float = 0.0
    """``cpu_s`` per text chunk delivered, in µs."""
    cpu_ms_per_session: float = 0.0
    """``cpu_s`` per session (three turns), in ms: with ``--chunk`` apart, what a session's chunks cost
    and what its turns cost whatever the chunking (the events, writes, steps, tools and sub-agent)."""
    cpu_split_us: dict[str, float] = field(default_factory=dict)
    """``cpu_us_per_chunk`` by process: ``driver`` (the consumer), ``hosts``, ``supervisor``, ``ray`` (its own)."""
    consumer_us_per_chunk: float = 0.0
    """The driver's share per chunk, in µs: the consumer (live views merging mutations, the checks)
    and the sessions' client calls."""
    memory_split_kb: dict[str, float] = field(default_factory=dict)
    """``memory_per_session_kb`` by process kind, at the peak's sample (each kind's RSS then, less its baseline)."""
    actors_peak: int = 0
    """Dedicated placement: the most actors live at once (since the runtime started)."""
    sessions_waited: int = 0
    """Dedicated placement: sessions and sub-agents of this run that waited for an actor."""
    wait_s_max: float = 0.0
    """Dedicated placement: the longest wait for an actor (since the runtime started)."""
    busiest_host: float = 0.0
    """Pooled placement: the share of the run's sessions on the host with the most (0.5 with two
    hosts is even). A session's host is a hash of its id, so each run's split differs, and the
    busiest host works on alone at the end (``0.0``: dedicated placement)."""


@dataclass
class ShopFigures:
    """Every run at one N, and their median and spread."""

    sessions: int
    runs: list[ShopRun] = field(default_factory=list)
    profile: Profile | None = None
    """``--profile``: where one more run's CPU went (``actors.bench.profile``)."""

    def median(self, key: str) -> float:
        """The median of one figure over the runs."""
        return float(statistics.median(getattr(r, key) for r in self.runs))

    def spread(self, key: str) -> float:
        """Max minus min of one figure over the runs."""
        values = [getattr(r, key) for r in self.runs]
        return float(max(values) - min(values))

    def split(self, key: str = "cpu_split_us") -> dict[str, float]:
        """The median over the runs of each process kind's share of a figure split by kind.

        ``key``: ``cpu_split_us`` (CPU µs per chunk) or ``memory_split_kb`` (KB per session).
        """
        splits: list[dict[str, float]] = [getattr(r, key) for r in self.runs]
        kinds = sorted({k for split in splits for k in split})
        return {k: round(statistics.median(split.get(k, 0.0) for split in splits), 1) for k in kinds}

    def summary(self) -> dict[str, Any]:
        """Medians (and spreads) of every figure, for ``--json``."""
        keys = [k for k in asdict(self.runs[0]) if k not in ("sessions", "cpu_split_us", "memory_split_kb")]
        out: dict[str, Any] = {"sessions": self.sessions, "repeats": len(self.runs)}
        for key in keys:
            out[key] = round(self.median(key), 3)
            out[f"{key}_spread"] = round(self.spread(key), 3)
        out["cpu_split_us"] = self.split()
        out["memory_split_kb"] = self.split("memory_split_kb")
        out["runs"] = [asdict(r) for r in self.runs]
        if self.profile is not None:
            stages = self.profile.stages
            out["profile_us_per_chunk"] = {
                stage: {kind: round(us, 2) for kind, us in by_kind.items()} for stage, by_kind in stages.items()
            }
            out["profile_run_cpu_us_per_chunk"] = self.profile.chunk_us
            out["profile_py_spy_us_per_chunk"] = self.profile.spy_us
        return out


async def shop_session(session: Session, ttfts: list[float], chunk: int = CHUNK) -> int:
    """Three turns, watched by a live view; returns the text chunks the view saw."""
    view: LiveView = await session.live()
    waiting: dict[str, Any] = {}

    def seen(_: object) -> None:
        start = waiting.get("start")
        if start is None:
            return
        messages = view.view.state.messages
        if messages and messages[-1].role == "assistant" and messages[-1].text and len(messages) > waiting["count"]:
            ttfts.append(time.perf_counter() - start)
            waiting["start"] = None

    view.listeners.append(seen)
    delivered = 0
    try:
        for number, prompt in enumerate(PROMPTS, start=1):
            waiting["count"] = len(view.view.state.messages) + 1
            waiting["start"] = time.perf_counter()
            turn = await session.prompt(prompt)
            result = await turn.finished
            if not result.success:
                raise AssertionError(f"{session.id} turn {number}: {result.outcome} {result.error}")
            await view.wait_for(_reached(result.index), timeout=60)
            reply = view.view.state.messages[-1]
            assert view.view.state.messages[-2].text == prompt, f"{session.id} turn {number}: the prompt is missing"
            delivered += verify_turn(reply, chunk)
    finally:
        view.listeners.remove(seen)  # the listener refers to the view: a cycle left to the collector
        await view.close()
    expected = chunks_per_turn(chunk) * len(PROMPTS)
    if delivered != expected:
        raise AssertionError(f"{session.id}: {delivered} chunks delivered, expected {expected}")
    return delivered


def _reached(index: int) -> Any:
    """A predicate: the view has merged everything through ``index``."""
    return lambda view: view.index >= index


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    k = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[k]


async def _run_once(rt: Runtime, n: int, run: int, baseline: dict[str, int], chunk: int = CHUNK) -> ShopRun:
    agent = shop_agent(chunk)
    sessions = [rt.session(f"bench-{run}-{i}", agent=agent) for i in range(n)]
    ttfts: list[float] = []
    before_bytes = await _store_bytes(rt.store)
    waited0: int = ((await rt.supervisor.info.remote())["dedicated"] or {}).get("waited", 0)
    kinds0 = MemorySampler.cpu_by_kind()
    with MemorySampler() as memory:
        start = time.perf_counter()
        delivered = await asyncio.gather(*(shop_session(s, ttfts, chunk) for s in sessions))
        wall = time.perf_counter() - start
    kinds = MemorySampler.cpu_by_kind()  # one walk of the process tree: the total and the driver's share too
    split = {k: kinds[k] - kinds0.get(k, 0.0) - (memory.cpu_s if k == "driver" else 0.0) for k in kinds}
    cpu, driver = sum(split.values()), split.get("driver", 0.0)
    chunks_seen = max(sum(delivered), 1)
    base = sum(baseline.values())
    await rt.deactivate_idle()
    stored = await _store_bytes(rt.store) - before_bytes
    pool: dict[str, Any] = (await rt.supervisor.info.remote())["dedicated"] or {}
    placed = [rt.router.place_now(s.id) for s in sessions] if rt.placement == "pooled" else []
    return ShopRun(
        sessions=n,
        wall_s=round(wall, 3),
        sessions_per_s=round(n / wall, 2),
        text_chunks_per_s=round(sum(delivered) / wall, 1),
        ttft_ms_p50=round(_percentile(ttfts, 0.5) * 1000, 2),
        ttft_ms_p99=round(_percentile(ttfts, 0.99) * 1000, 2),
        peak_rss_mb=round(memory.peak / 2**20, 1),
        baseline_rss_mb=round(base / 2**20, 1),
        memory_per_session_kb=round(max(memory.peak - base, 0) / n / 1024, 1),
        store_bytes_per_session=round(stored / n, 1),
        cpu_s=round(cpu, 2),
        cpu_us_per_chunk=round(cpu / chunks_seen * 1e6, 1),
        cpu_ms_per_session=round(cpu / n * 1e3, 2),
        cpu_split_us={k: round(v / chunks_seen * 1e6, 1) for k, v in sorted(split.items())},
        consumer_us_per_chunk=round(driver / chunks_seen * 1e6, 1),
        memory_split_kb={
            kind: round((memory.peak_by_kind.get(kind, 0) - baseline.get(kind, 0)) / n / 1024, 1)
            for kind in sorted(memory.peak_by_kind.keys() | baseline.keys())
        },
        actors_peak=pool.get("peak", 0),
        sessions_waited=pool.get("waited", 0) - waited0,
        wait_s_max=pool.get("wait_s_max", 0.0),
        busiest_host=busiest_host_share(placed),
    )


def busiest_host_share(placed: Sequence[str | None]) -> float:
    """The share of sessions on the host with the most, from each session's host; ``0.0`` if one is not known."""
    if not placed or None in placed:
        return 0.0
    return round(max(Counter(placed).values()) / len(placed), 3)


async def _profiled_run(rt: Runtime, result: ShopFigures, run: int, chunk: int = CHUNK) -> None:
    """One more run at ``result``'s N under py-spy; its stage table goes into ``result.profile``."""
    await rt.deactivate_idle()
    pids: dict[str, list[int]] = {"driver": [], "hosts": [], "supervisor": []}
    for proc, kind in MemorySampler._tree():
        if kind in pids:
            pids[kind].append(proc.pid)
    profiler = Profiler(pids)
    profiler.start()
    try:
        await asyncio.sleep(0.5)  # py-spy attaches
        measured = await _run_once(rt, result.sessions, run, MemorySampler.rss_by_kind(), chunk)
    finally:
        profiler.stop()
    spy = measured.cpu_split_us.get("profiler", 0.0)
    result.profile = Profile(profiler.table(measured.cpu_split_us), round(measured.cpu_us_per_chunk - spy, 1), spy)


async def _store_bytes(store: EventStore) -> int:
    """What the store takes now (SQLite's checkpointed file; PostgreSQL's tables with their indexes)."""
    return await store.stored_bytes() if isinstance(store, Measurable) else 0


async def bench_shop(
    sizes: Sequence[int] = (1, 10, 100, 1000),
    *,
    repeats: int = 3,
    workdir: str | None = None,
    placement: str = "pooled",
    hosts_per_node: int | None = None,
    children: str = "local",
    store: str | None = None,
    max_dedicated: int | None = None,
    progress: Any = None,
    profile: bool = False,
    chunk: int = CHUNK,
) -> list[ShopFigures]:
    """Run the workload at every N, ``repeats`` times each, on a fresh local Ray and a fresh store.

    ``store``: the URL of an empty store (default: a SQLite file in ``workdir``). ``max_dedicated``:
    the dedicated pool's limit (``None``: the runtime's default for this machine). ``profile``: one
    more run at each N under py-spy, kept out of the figures (``ShopFigures.profile``). ``chunk``:
    characters per text chunk (4 is the workload compared with LangGraph).

    Raises:
        UsageError: ``chunk`` is not a positive number of characters.
    """
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise UsageError(f"chunk must be a positive number of characters, got {chunk!r}: 4 is the compared workload")
    own = workdir is None
    base = Path(workdir or tempfile.mkdtemp(prefix="troupe-bench-"))
    os.makedirs(base, exist_ok=True)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    figures: list[ShopFigures] = []
    try:
        async with Runtime(
            store=store or f"sqlite:///{base / 'shop.db'}",
            placement=placement,  # type: ignore[arg-type]
            hosts_per_node=hosts_per_node,
            children=children,  # type: ignore[arg-type]
            max_dedicated=max_dedicated,
            namespace="troupe-bench",
            ray_options={"_temp_dir": str(base / "ray"), "num_cpus": os.cpu_count() or 2},
        ) as rt:
            await _run_once(rt, 2, 0, MemorySampler.rss_by_kind(), chunk)  # warm up every host
            await memory_settled()
            for n in sizes:
                result = ShopFigures(n)
                for r in range(repeats):
                    await rt.deactivate_idle()
                    baseline = MemorySampler.rss_by_kind()
                    result.runs.append(await _run_once(rt, n, 1 + len(figures) * 100 + r, baseline, chunk))
                    if progress is not None:
                        progress(result.runs[-1])
                if profile:
                    await _profiled_run(rt, result, 1 + len(figures) * 100 + repeats, chunk)
                figures.append(result)
    finally:
        if own:
            shutil.rmtree(base, ignore_errors=True)
    return figures


def format_shop(figures: Sequence[ShopFigures]) -> str:
    """The table for the README: medians, and the spread in parentheses."""
    header = (
        f"{'N':>5} {'wall s':>8} {'sessions/s':>11} {'chunks/s':>10} {'TTFT p50 ms':>12} {'TTFT p99 ms':>12} "
        f"{'peak RSS MB':>12} {'KB/session':>11} {'store B/session':>16} {'CPU s':>7} {'CPU µs/chunk':>13} "
        f"{'of which driver':>16}"
    )
    lines = [header]
    for f in figures:
        lines.append(
            f"{f.sessions:>5} {f.median('wall_s'):>8.2f} "
            f"{f.median('sessions_per_s'):>11.1f} {f.median('text_chunks_per_s'):>10.0f} "
            f"{f.median('ttft_ms_p50'):>12.1f} {f.median('ttft_ms_p99'):>12.1f} "
            f"{f.median('peak_rss_mb'):>12.0f} {f.median('memory_per_session_kb'):>11.1f} "
            f"{f.median('store_bytes_per_session'):>16.0f} {f.median('cpu_s'):>7.1f} "
            f"{f.median('cpu_us_per_chunk'):>13.1f} {f.median('consumer_us_per_chunk'):>16.1f}"
        )
        lines.append(
            f"{'':>5} {'':>8} {'±' + format(f.spread('sessions_per_s'), '.1f'):>11} "
            f"{'±' + format(f.spread('text_chunks_per_s'), '.0f'):>10} "
            f"{'±' + format(f.spread('ttft_ms_p50'), '.1f'):>12}"
        )
    for f in figures:
        split = ", ".join(f"{kind} {us:.1f}" for kind, us in f.split().items())
        lines.append(f"N={f.sessions}: CPU µs/chunk by process (medians): {split}")
        lines.append(
            f"N={f.sessions}: CPU ms per session (three turns, all processes, median): "
            f"{f.median('cpu_ms_per_session'):.2f}"
        )
        memory = ", ".join(f"{kind} {kb:.1f}" for kind, kb in f.split("memory_split_kb").items())
        lines.append(f"N={f.sessions}: memory KB/session by process (medians): {memory}")
    return "\n".join(lines)


def write_json(path: str, figures: Sequence[ShopFigures]) -> None:
    """The figures, keyed by N."""
    Path(path).write_text(json.dumps({str(f.sessions): f.summary() for f in figures}, indent=2) + "\n")
