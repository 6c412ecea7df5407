"""``troupe bench``: the benchmarks that measure this machine (the README quotes their figures).

``reducer`` and ``store`` need no Ray; ``shop`` (and ``actors``) start a local Ray of their own in
a scratch directory, with telemetry off.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from orchestrator.surfaces.cli.common import fail, stdout
from orchestrator.surfaces.event_loop import run_async

__all__ = ["ACTORS_BENCH", "bench_app", "load_actors_bench", "parse_sizes"]

bench_app = typer.Typer(
    help="Benchmarks that measure this machine (see the README for the figures).", no_args_is_help=True
)

ACTORS_BENCH = "actors.bench.nested"
"""The module of ``troupe bench actors``: ``async bench_actors(...) -> dict``, ``format_actors(dict) -> str``."""


def _write_json(path: Path | None, data: object) -> None:
    if path is not None:
        path.write_text(json.dumps(data, indent=2, default=str) + "\n")
        stdout().print(f"figures written to {path}")


@bench_app.command("reducer")
def bench_reducer_command(
    deltas: Annotated[int, typer.Option(min=1, help="Text-deltas applied per measurement.")] = 200_000,
    repeats: Annotated[int, typer.Option(min=1, help="Measurements per case (the median is reported).")] = 5,
    json_file: Annotated[Path | None, typer.Option("--json", help="Also write the figures to this JSON file.")] = None,
) -> None:
    """Text-deltas/s through the session reducer: 10 vs 10,000 messages, and nested two deep."""
    from orchestrator.surfaces.bench.reducer import bench_reducer, format_reducer_bench

    results = bench_reducer(deltas=deltas, repeats=repeats)
    stdout().print(format_reducer_bench(results), highlight=False, soft_wrap=True)
    _write_json(json_file, [dataclasses.asdict(case) for case in results])


@bench_app.command("fold")
def bench_fold_command(
    sessions: Annotated[int, typer.Option(min=1, help="Shop sessions to run here and fold.")] = 10,
    repeats: Annotated[int, typer.Option(min=1, help="Measurements (the median is reported).")] = 5,
    json_file: Annotated[Path | None, typer.Option("--json", help="Also write the figures to this JSON file.")] = None,
) -> None:
    """Events/s through the log fold, on the shop workload's own logs (run in this process)."""
    from orchestrator.surfaces.bench.fold import bench_fold, format_fold_bench

    figures = bench_fold(sessions=sessions, repeats=repeats)
    stdout().print(format_fold_bench(figures), highlight=False, soft_wrap=True)
    _write_json(json_file, {**dataclasses.asdict(figures), "us_per_event": round(figures.us_per_event, 2)})


@bench_app.command("instructions")
def bench_instructions_command(
    low: Annotated[int, typer.Option(min=1, help="Sessions in the smaller counted run.")] = 20,
    high: Annotated[int, typer.Option(min=2, help="Sessions in the larger counted run.")] = 60,
    chunk: Annotated[
        int,
        typer.Option(min=1, help="Characters per text chunk (1000: each text one chunk; see the module's docstring)."),
    ] = 1000,
    json_file: Annotated[Path | None, typer.Option("--json", help="Also write the figures to this JSON file.")] = None,
) -> None:
    """Instructions per shop session under callgrind (in process): a CPU figure the machine's speed does not move."""
    from orchestrator.surfaces.bench.instructions import bench_instructions, format_instructions

    figures = bench_instructions(low=low, high=high, chunk=chunk)
    stdout().print(format_instructions(figures), highlight=False, soft_wrap=True)
    _write_json(
        json_file,
        {**dataclasses.asdict(figures), "per_session": round(figures.per_session), "per_turn": round(figures.per_turn)},
    )


@bench_app.command("long")
def bench_long_command(
    turns: Annotated[int, typer.Option(min=1, help="Turns in each conversation.")] = 2000,
    sessions: Annotated[int, typer.Option(min=1, help="Conversations run side by side.")] = 4,
    window: Annotated[int, typer.Option(min=1, help="Turns per measured window.")] = 250,
    json_file: Annotated[Path | None, typer.Option("--json", help="Also write the figures to this JSON file.")] = None,
) -> None:
    """CPU per turn and the loop's longest stall as a conversation grows to thousands of turns (in process, SQLite)."""
    from orchestrator.surfaces.bench.long import bench_long, format_long_bench

    figures = bench_long(sessions=sessions, turns=turns, window=window)
    stdout().print(format_long_bench(figures), highlight=False, soft_wrap=True)
    _write_json(json_file, {**dataclasses.asdict(figures), "growth": round(figures.growth, 3)})


StoresOption = Annotated[
    list[str] | None,
    typer.Option(
        "--store",
        help="sqlite (default; sqlite?synchronous=full for SQLite URL options), postgres (a throwaway server), "
        "or a postgresql:// URL whose server gets scratch "
        "databases; repeat to run several side by side.",
    ),
]


@bench_app.command("store")
def bench_store_command(
    parts: Annotated[int, typer.Option(min=1, help="Text-delta parts appended per batch size.")] = 100_000,
    sessions: Annotated[int, typer.Option(min=1, help="Sessions appending at once.")] = 100,
    store: StoresOption = None,
    json_file: Annotated[Path | None, typer.Option("--json", help="Also write the figures to this JSON file.")] = None,
) -> None:
    """Stream parts/s into a store (SQLite, PostgreSQL), append latency under load, bytes per part and per session."""
    from orchestrator.surfaces.bench.scratch import scratch_stores
    from orchestrator.surfaces.bench.store import bench_store, format_store_bench

    results = []
    for kind in store or ["sqlite"]:
        with scratch_stores(kind) as scratch:
            result = run_async(bench_store(scratch, parts=parts, sessions=sessions))
        stdout().print(format_store_bench(result), highlight=False, soft_wrap=True)
        results.append(result)
    _write_json(json_file, results if len(results) > 1 else results[0])


def parse_sizes(text: str) -> tuple[int, ...]:
    """``"1,10,100"`` -> ``(1, 10, 100)``; every size a positive integer."""
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise typer.BadParameter(f"{text!r}: give comma-separated session counts, e.g. 1,10,100") from None
    if not sizes or min(sizes) < 1:
        raise typer.BadParameter(f"{text!r}: every size must be at least 1, e.g. 1,10,100")
    return sizes


@bench_app.command("shop")
def bench_shop_command(
    sizes: Annotated[str, typer.Option(help="Session counts to run, comma separated.")] = "1,10,100,1000",
    repeats: Annotated[int, typer.Option(min=1, help="Runs per size (the median is reported).")] = 3,
    json_file: Annotated[Path | None, typer.Option("--json", help="Also write the figures to this JSON file.")] = None,
    placement: Annotated[
        Literal["pooled", "dedicated"], typer.Option(help="pooled: sessions share host actors; dedicated: one each.")
    ] = "pooled",
    workdir: Annotated[
        Path | None, typer.Option(help="Keep Ray's files here (default: a scratch dir, removed).")
    ] = None,
    store: StoresOption = None,
    max_dedicated: Annotated[
        int | None,
        typer.Option(min=1, help="Dedicated placement: actors at most (default: 4 per CPU, within 1/4 of memory)."),
    ] = None,
    profile: Annotated[
        bool,
        typer.Option(
            "--profile",
            help="One more run at each N under py-spy (kept out of the figures): CPU µs per chunk by stage.",
        ),
    ] = False,
    chunk: Annotated[
        int,
        typer.Option(
            min=1,
            help="Characters per text chunk (4: the workload compared with LangGraph). The turns' other work "
            "stays, so a larger chunk shows what a session's turns cost apart from its chunks.",
        ),
    ] = 4,
) -> None:
    """The shop workload end to end on Ray: N sessions x 3 turns with a sub-agent, verified live.

    With several ``--store``s the runs alternate between them (one run of each, then the next
    round), each on a fresh local Ray and a fresh store, so that the machine's drift falls on all.
    ``--profile`` adds a run under py-spy after the last round (``actors.bench.profile``).
    """
    counts = parse_sizes(sizes)
    from actors.bench.profile import Profiler, format_profile
    from actors.bench.shop import ShopFigures, ShopRun, bench_shop, format_shop, write_json
    from orchestrator.surfaces.bench.scratch import scratch_stores

    if profile:
        Profiler.executable()  # no py-spy: say so before any run

    console = stdout()
    kinds = store or ["sqlite"]
    done: dict[tuple[str, int], int] = {}

    def progress(kind: str) -> Callable[[ShopRun], None]:
        def report(run: ShopRun) -> None:
            key = (kind, run.sessions)
            done[key] = done.get(key, 0) + 1
            console.print(
                f"{kind:<8} N={run.sessions:<5} run {done[key]}/{repeats}: {run.wall_s:.2f} s, "
                f"{run.sessions_per_s:.1f} sessions/s, {run.text_chunks_per_s:,.0f} chunks/s, "
                f"TTFT p50 {run.ttft_ms_p50:.1f} ms"
                + (f", {run.busiest_host:.0%} on the busiest host" if run.busiest_host else "")
                + (
                    f"; actors peak {run.actors_peak}, {run.sessions_waited} waited (max {run.wait_s_max:.1f} s)"
                    if run.actors_peak
                    else ""
                ),
                highlight=False,
            )

        return report

    plan = f"sizes {', '.join(map(str, counts))}, {repeats} run(s) each, {placement}"
    if placement == "dedicated":
        plan += f" (max_dedicated {max_dedicated or 'by default'})"
    if chunk != 4:
        plan += f", texts in chunks of {chunk} characters (4 in the compared workload)"
    console.print(f"bench shop: {plan}, store {' vs '.join(kinds)}")
    figures: dict[str, dict[int, ShopFigures]] = {kind: {n: ShopFigures(n) for n in counts} for kind in kinds}
    labels: dict[str, str] = {}
    with contextlib.ExitStack() as scratches:
        opened = {kind: scratches.enter_context(scratch_stores(kind)) for kind in kinds}
        for round_ in range(repeats):
            for kind, scratch in opened.items():
                labels[kind] = scratch.label
                url = scratch.fresh()
                try:
                    ran = run_async(
                        bench_shop(
                            counts,
                            repeats=1,
                            placement=placement,
                            workdir=None if workdir is None else str(workdir.resolve()),
                            store=url,
                            max_dedicated=max_dedicated,
                            progress=progress(kind),
                            profile=profile and round_ == repeats - 1,
                            chunk=chunk,
                        )
                    )
                finally:
                    scratch.drop(url)
                for result in ran:
                    into = figures[kind][result.sessions]
                    into.runs.extend(result.runs)
                    if result.profile is not None:
                        into.profile = result.profile
    for kind in kinds:
        if len(kinds) > 1:
            console.print(f"\nstore: {labels[kind]}", highlight=False)
        console.print(format_shop(list(figures[kind].values())), highlight=False, soft_wrap=True)
        for profiled in figures[kind].values():
            if profiled.profile is not None:
                console.print(format_profile(profiled.sessions, profiled.profile), highlight=False, soft_wrap=True)
    n = counts[-1]
    workload = "same workload" if chunk == 4 else "this workload in 4-character chunks"
    console.print(
        f"Absolute figures move 2x between machines: compare with a peer as a ratio from one run on one "
        f"machine. Side by side with LangGraph 1.2 ({workload}): ../shared/bench/compare-shop {n} {repeats}",
        highlight=False,
    )
    if len(kinds) > 1:
        first = kinds[0]
        for kind in kinds[1:]:
            for n in counts:
                ratio = figures[kind][n].median("sessions_per_s") / figures[first][n].median("sessions_per_s")
                console.print(f"N={n}: {kind} sessions/s = {ratio:.2f}x {first}'s", highlight=False)
    if json_file is not None:
        if len(kinds) == 1:
            write_json(str(json_file), list(figures[kinds[0]].values()))
        else:
            json_file.write_text(
                json.dumps({kind: {str(n): f.summary() for n, f in by_n.items()} for kind, by_n in figures.items()})
                + "\n"
            )
        console.print(f"figures written to {json_file}")


# `troupe bench actors` runs actors/bench/nested.py: `async def bench_actors(...) -> dict` and
# `def format_actors(dict) -> str` (loaded by name, so this module needs no Ray to import).


def load_actors_bench(module: str = ACTORS_BENCH) -> tuple[Any, Any]:
    """``(bench_actors, format_actors)`` from ``module``.

    Raises:
        CommandFailed: the module (or one of the two functions) is not there yet.
    """
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name is not None and module.startswith(error.name):
            fail(f"troupe bench actors needs {module} (bench_actors, format_actors), which this install lacks yet")
        raise
    bench, show = getattr(loaded, "bench_actors", None), getattr(loaded, "format_actors", None)
    if bench is None or show is None:
        fail(f"{module} must define bench_actors() and format_actors(result) for troupe bench actors")
    return bench, show


@bench_app.command("actors")
def bench_actors_command(
    parts: Annotated[int, typer.Option(min=1, help="Text parts the child streams to its parent.")] = 200_000,
    trials: Annotated[int, typer.Option(min=1, help="Delegate calls timed to their first nested part.")] = 10,
    recoveries: Annotated[int, typer.Option(min=1, help="Host kills timed to streaming again.")] = 3,
    json_file: Annotated[Path | None, typer.Option("--json", help="Also write the figures to this JSON file.")] = None,
) -> None:
    """Sub-agents across Ray actors: nested parts/s, time to the first nested part, recovery from a killed host."""
    bench, show = load_actors_bench()
    result = run_async(bench(parts=parts, trials=trials, recoveries=recoveries))
    stdout().print(show(result), highlight=False, soft_wrap=True)
    _write_json(json_file, result)


@bench_app.command("chaos")
def bench_chaos_command(
    sessions: Annotated[int, typer.Option(min=1, help="Sessions to run (each --turns turns in a row).")] = 1000,
    turns: Annotated[int, typer.Option(min=1, help="User turns per session.")] = 3,
    kill_every: Annotated[float, typer.Option(min=0.2, help="Seconds between two faults.")] = 2.0,
    spread: Annotated[
        int | None,
        typer.Option(
            min=1, help="Inject this many faults, spread evenly over the run's turns, not every --kill-every s."
        ),
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Sessions running at once.")] = 200,
    hosts: Annotated[int, typer.Option(min=1, help="Host actors (processes) per node.")] = 2,
    store: Annotated[
        str,
        typer.Option(help="sqlite (a scratch file), postgres (a throwaway server), or a postgresql:// URL."),
    ] = "sqlite",
    faults: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated kinds of fault: host,supervisor,driver,node,db,stall "
            "(default: all that apply to the store; db only with --store postgres). "
            "stall freezes a host (SIGSTOP) for --stall-seconds, then continues it (SIGCONT)."
        ),
    ] = None,
    stall_seconds: Annotated[
        float, typer.Option(min=0.1, help="Seconds the stall fault keeps its host frozen (a long GC pause).")
    ] = 3.0,
    limit: Annotated[float, typer.Option(min=1, help="Seconds the whole run may take before it fails.")] = 1800.0,
    seed: Annotated[int, typer.Option(help="Seed of the fault schedule (which host is killed).")] = 7,
    json_file: Annotated[Path | None, typer.Option("--json", help="Also write the figures to this JSON file.")] = None,
) -> None:
    """Sessions under killed hosts, supervisor and driver, a removed node, a restarted database, a frozen host."""
    from actors.bench.chaos import bench_chaos, format_chaos
    from actors.bench.faults import FAULT_KINDS
    from orchestrator.surfaces.bench.chaos_store import chaos_store

    kinds = list(FAULT_KINDS) if faults is None else [k.strip() for k in faults.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in FAULT_KINDS]
    if unknown or not kinds:
        fail(f"--faults {faults!r}: give some of {','.join(FAULT_KINDS)} (comma-separated)")
    if store != "postgres":
        if faults is not None and "db" in kinds:
            fail("--faults db restarts a PostgreSQL server the run starts itself: add --store postgres")
        kinds = [k for k in kinds if k != "db"]
    console = stdout()
    console.print(
        f"bench chaos: {sessions} sessions x {turns} turns, store {store}, faults {','.join(kinds)} "
        + (f"({spread} spread over the run)" if spread else f"(one every {kill_every:g} s)")
        + (f", stalls of {stall_seconds:g} s" if "stall" in kinds else "")
    )
    with chaos_store(store) as (url, label, restart):
        figures = run_async(
            bench_chaos(
                sessions=sessions,
                turns=turns,
                kill_every=kill_every,
                faults=spread,
                kinds=kinds,
                store=url,
                store_label=label,
                restart_db=restart,
                concurrency=concurrency,
                hosts=hosts,
                seed=seed,
                limit=limit,
                stall_seconds=stall_seconds,
            )
        )
    console.print(format_chaos(figures), highlight=False, soft_wrap=True)
    _write_json(json_file, figures.summary())
    if not figures.ok:
        fail("the chaos run broke a promise (see above)")


@bench_app.command("data")
def bench_data_command(
    rows: Annotated[int, typer.Option(min=1, help="Rows, one session each.")] = 10_000,
    concurrency: Annotated[int, typer.Option(min=1, help="Ray Data actors running sessions.")] = 1,
    in_flight: Annotated[int, typer.Option(min=1, help="Sessions each Ray Data actor runs at once.")] = 512,
    batch_size: Annotated[int, typer.Option(min=1, help="Rows per Ray Data batch.")] = 128,
    json_file: Annotated[Path | None, typer.Option("--json", help="Also write the figures to this JSON file.")] = None,
) -> None:
    """N sessions (a two-step agent) through Ray Data beside a plain asyncio.gather: rows/s, peak memory."""
    from actors.bench.data import DataRun, as_json, bench_data, format_data

    console = stdout()

    def progress(run: DataRun) -> None:
        console.print(
            f"{run.way}: {run.rows} rows in {run.wall_s:.1f} s ({run.rows_per_s:.1f} rows/s)", highlight=False
        )

    console.print(f"bench data: {rows} rows, Ray Data with {concurrency} actor(s) x {in_flight} in flight")
    runs = run_async(
        bench_data(rows, concurrency=concurrency, in_flight=in_flight, batch_size=batch_size, progress=progress)
    )
    console.print(format_data(runs), highlight=False, soft_wrap=True)
    _write_json(json_file, as_json(runs))


@bench_app.command("http")
def bench_http_command(
    sessions: Annotated[int, typer.Option(min=1, help="Sessions to create (each runs turns during the load).")] = 50,
    followers: Annotated[int, typer.Option(min=1, help="SSE followers, spread over the sessions.")] = 500,
    requests: Annotated[
        int, typer.Option(min=1, help="Requests in the mixed burst (and in the reads-only run).")
    ] = 1000,
    connections: Annotated[int, typer.Option(min=1, help="Connections the requests go over.")] = 200,
    url: Annotated[
        str | None, typer.Option(help="Load this running server (`troupe serve configs/bench-http.yaml`) instead.")
    ] = None,
    local: Annotated[bool, typer.Option("--local", help="Serve on an in-process runtime, not a local Ray.")] = False,
    store: Annotated[str | None, typer.Option(help="The served store's URL (default: a scratch SQLite file).")] = None,
    limit: Annotated[float, typer.Option(min=10, help="Seconds the whole run may take.")] = 600.0,
    json_file: Annotated[Path | None, typer.Option("--json", help="Also write the figures to this JSON file.")] = None,
) -> None:
    """The HTTP API under a bounded loopback load: SSE followers, a mixed burst, reads alone."""
    from orchestrator.surfaces.bench.http import bench_http, format_http

    console = stdout()
    console.print(
        f"bench http: {sessions} sessions, {followers} SSE followers, {requests} requests over {connections} "
        f"connections ({'in process' if local else 'on a local Ray'}{'' if url is None else ', at ' + url})"
    )
    figures = run_async(
        bench_http(
            sessions=sessions,
            followers=followers,
            requests=requests,
            connections=connections,
            url=url,
            local=local,
            store=store,
            limit=limit,
        )
    )
    console.print(format_http(figures), highlight=False, soft_wrap=True)
    _write_json(json_file, figures.summary())
    if not figures.ok:
        fail("a request failed, or an SSE follower lost or repeated an event (see above)")


@bench_app.command("soak")
def bench_soak_command(
    minutes: Annotated[float, typer.Option(min=0.1, help="How long to cycle sessions (minutes).")] = 30.0,
    sessions_per_cycle: Annotated[int, typer.Option(min=1, help="New sessions run at once in each cycle.")] = 20,
    store: Annotated[str | None, typer.Option(help="An empty store's URL (default: a scratch SQLite file).")] = None,
    hosts: Annotated[int, typer.Option(min=1, help="Host actors (processes) the sessions spread over.")] = 2,
    max_slope: Annotated[
        float, typer.Option(min=0, help="Fail above this many MB per 1,000 sessions served, after the warm-up.")
    ] = 5.0,
    trim_every: Annotated[
        float, typer.Option(help="The hosts' malloc_trim schedule in seconds (negative: never; to compare).")
    ] = 5.0,
    debug_memory: Annotated[
        bool, typer.Option("--debug-memory", help="Also report the object types and lines that grew in the hosts.")
    ] = False,
    json_file: Annotated[Path | None, typer.Option("--json", help="Also write the figures to this JSON file.")] = None,
) -> None:
    """Sessions cycled through activate, turns, idle and eviction for M minutes: RSS per host must stay flat."""
    from actors.bench.soak import SoakSample, bench_soak, format_soak

    console = stdout()
    console.print(
        f"bench soak: {minutes:g} min, cycles of {sessions_per_cycle} shop sessions (3 verified turns each) "
        f"over {hosts} hosts, evicted when idle; bound {max_slope:g} MB per 1,000 sessions"
    )
    shown: set[float] = set()

    def progress(sample: SoakSample) -> None:
        minute = sample.elapsed_s // 60
        if minute in shown:
            return
        shown.add(minute)
        hosts_mb = ", ".join(f"{mb:.0f}" for mb in sample.hosts_mb.values())
        console.print(
            f"minute {minute:.0f}: {sample.served} sessions served, hosts {hosts_mb} MB, "
            f"driver {sample.driver_mb:.0f} MB",
            highlight=False,
        )

    figures = run_async(
        bench_soak(
            minutes=minutes,
            sessions_per_cycle=sessions_per_cycle,
            store=store,
            hosts=hosts,
            max_slope=max_slope,
            trim_every=trim_every,
            debug=debug_memory,
            progress=progress,
        )
    )
    console.print(format_soak(figures), highlight=False, soft_wrap=True)
    _write_json(json_file, figures.summary())
    if not figures.ok:
        fail("the soak failed: memory grew past the bound, a turn was not verified, or a session was not evicted")


@bench_app.command("idle")
def bench_idle_command(
    sessions: Annotated[
        int, typer.Option(min=1, help="Idle sessions to create (one turn each, written in bulk).")
    ] = 50_000,
    sample: Annotated[int, typer.Option(min=1, help="Sessions reactivated one at a time for the latency.")] = 1000,
    store: Annotated[str | None, typer.Option(help="An empty store's URL (default: a scratch SQLite file).")] = None,
    hosts: Annotated[int, typer.Option(min=1, help="Host actors (processes) the sessions are routed over.")] = 2,
    json_file: Annotated[Path | None, typer.Option("--json", help="Also write the figures to this JSON file.")] = None,
) -> None:
    """N idle sessions: memory and store bytes each, reactivation latency p50/p99 of a random sample."""
    from actors.bench.idle import bench_idle, format_idle

    console = stdout()
    console.print(f"bench idle: {sessions:,} sessions of one turn, {min(sample, sessions):,} reactivated")
    shown = [0]

    def progress(done: int) -> None:
        if done - shown[0] >= sessions / 10 or done == sessions:  # about every tenth
            shown[0] = done
            console.print(f"{done:,} sessions written", highlight=False)

    figures = run_async(bench_idle(sessions=sessions, sample=sample, store=store, hosts=hosts, progress=progress))
    console.print(format_idle(figures), highlight=False, soft_wrap=True)
    _write_json(json_file, figures.summary())
    if not figures.ok:
        fail("an idle session did not come back as it was written (see above)")
