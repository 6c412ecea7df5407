"""The CLI end to end on a real (local) Ray, as a user runs it: ``troupe run`` and the Ray benchmarks."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pg import _require_binaries

from .cli_process import REPO, troupe


@pytest.fixture
def workdir() -> Iterator[Path]:
    # A short working folder: the CLI puts Ray's files in ./.troupe/ray, under Unix socket limits.
    path = Path(tempfile.mkdtemp(prefix="tcr-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_troupe_run_on_ray(workdir: Path) -> None:
    # The README's first command, as it is: the demo's three default turns.
    assert ".venv/bin/troupe run configs/shop.yaml   # set up, run the demo" in (REPO / "README.md").read_text()
    done = troupe("run", str(REPO / "configs" / "shop.yaml"), cwd=workdir, timeout=180)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    out = done.stdout
    assert "a gift for a coffee lover" in out and "What's in my cart?" in out
    assert "welcome to the Troupe shop" in out and "Total: $9.98" in out
    assert '⚙ add_to_cart {"slug": "stoneware-mug", "qty": 2} → Added.  ✓ done' in out
    assert '⚙ lookup_price {"slug": "stoneware-mug"} → 4.99  ✓ done' in out  # the sub-agent ran in its own actor
    assert "| Mugworks        | $6.50 |" in out
    assert "turn results" in out and "completed" in out
    assert (workdir / "troupe.db").is_file() and (workdir / ".troupe" / "ray").is_dir()


@pytest.mark.slow
def test_troupe_bench_shop_verifies_every_session(workdir: Path) -> None:
    out = workdir / "shop.json"
    done = troupe("bench", "shop", "--sizes", "1,4", "--repeats", "1", "--json", str(out), cwd=workdir)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    figures = json.loads(out.read_text())
    assert "sessions/s" in done.stdout
    assert "compare-shop 4 1" in done.stdout  # how to compare with a peer on this machine
    assert sorted(figures, key=int) == ["1", "4"], figures
    run = figures["4"]["runs"][0]
    assert run["cpu_us_per_chunk"] > run["consumer_us_per_chunk"] > 0  # the driver's share is part of the whole
    assert 0.5 <= run["busiest_host"] <= 1.0 and "on the busiest host" in done.stdout  # 4 sessions on 2 hosts
    # memory by process kind adds up to the whole (which is never below 0; each share is rounded on its own)
    assert {"driver", "hosts"} <= run["memory_split_kb"].keys(), run["memory_split_kb"]
    grown = sum(run["memory_split_kb"].values())
    assert max(grown, 0) == pytest.approx(run["memory_per_session_kb"], abs=1.0), run["memory_split_kb"]
    assert "memory KB/session by process" in done.stdout


@pytest.mark.slow
def test_troupe_bench_shop_cuts_the_texts_in_other_chunks(workdir: Path) -> None:
    # Each text whole: four chunks a turn, the turns' other work as it is (what a session costs apart from its chunks).
    out = workdir / "shop.json"
    done = troupe("bench", "shop", "--sizes", "2", "--repeats", "1", "--chunk", "1000", "--json", str(out), cwd=workdir)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    said = " ".join(done.stdout.split())  # the console wraps long lines at its width
    assert "texts in chunks of 1000 characters (4 in the compared workload)" in said
    assert "(this workload in 4-character chunks): ../shared/bench/compare-shop 2 1" in said
    run = json.loads(out.read_text())["2"]["runs"][0]
    assert run["text_chunks_per_s"] * run["wall_s"] == pytest.approx(2 * 3 * 4, rel=0.01)  # 2 sessions x 3 turns x 4
    # cpu_s is rounded to 10 ms: over 2 sessions, within 2.5 ms of the unrounded figure per session
    assert run["cpu_ms_per_session"] == pytest.approx(run["cpu_s"] / 2 * 1e3, abs=2.6)
    assert "CPU ms per session" in said
    refused = troupe("bench", "shop", "--sizes", "2", "--chunk", "0", cwd=workdir)
    assert refused.returncode != 0 and "--chunk" in refused.stdout + refused.stderr


@pytest.mark.slow
def test_troupe_bench_shop_profiles_one_more_run(workdir: Path) -> None:
    out = workdir / "shop.json"
    # 30 sessions: at 1,000 samples a second the driver's live views get ~30 samples. At N=3 they got
    # ~3 (1-2 µs of ~2,250 chunks), so about one run in twenty had none and their row no driver entry.
    done = troupe("bench", "shop", "--sizes", "30", "--repeats", "1", "--profile", "--json", str(out), cwd=workdir)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    figures = json.loads(out.read_text())["30"]
    assert len(figures["runs"]) == 1  # the profiled run is kept out of the figures
    profile = figures["profile_us_per_chunk"]
    # py-spy sampled the hosts and the driver: their work is where the code says it is
    assert profile["runner and steps"]["hosts"] > 0 and profile["fold and reducer"]["hosts"] > 0, profile
    assert profile["store append"]["hosts"] > 0 and profile["client: live views"]["driver"] > 0, profile
    assert profile["Ray: its threads in our processes"]["driver"] > 0, profile  # its core worker's I/O thread
    # every kind's CPU is split, not more and not less (each share is rounded on its own)
    total = sum(us for by_kind in profile.values() for us in by_kind.values())
    assert total == pytest.approx(figures["profile_run_cpu_us_per_chunk"], rel=0.05), profile
    assert figures["profile_py_spy_us_per_chunk"] > 0  # py-spy's own CPU, left out of the rows
    assert "N=30, one more run under py-spy --gil" in done.stdout and "runner and steps" in done.stdout


@pytest.mark.slow
def test_troupe_bench_shop_dedicated_waits_for_a_bounded_pool(workdir: Path) -> None:
    out = workdir / "shop.json"
    args = ("--placement", "dedicated", "--max-dedicated", "3", "--sizes", "6", "--repeats", "1", "--json", str(out))
    done = troupe("bench", "shop", *args, cwd=workdir)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    figures = json.loads(out.read_text())["6"]
    assert figures["actors_peak"] <= 3, figures  # 6 sessions and 6 sub-agent runs, never more than 3 actors
    assert figures["sessions_waited"] > 0 and "actors peak" in done.stdout, figures
    assert figures["busiest_host"] == 0.0 and "busiest host" not in done.stdout  # a host each: no split to show


@pytest.mark.slow
def test_troupe_bench_actors(workdir: Path) -> None:
    out = workdir / "actors.json"
    args = ("--parts", "5000", "--trials", "2", "--recoveries", "1", "--json", str(out))
    done = troupe("bench", "actors", *args, cwd=workdir)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    figures = json.loads(out.read_text())
    nested = figures["nested"]
    assert nested["parts"] == 5000 and nested["parts_per_s"] > 0
    # The median of three warm runs; the first stream on fresh hosts (5,000 parts: at most --parts) apart.
    assert len(nested["runs_parts_per_s"]) == 3 and nested["parts_per_s"] == sorted(nested["runs_parts_per_s"])[1]
    assert nested["cold_parts"] == 5000 and nested["cold_parts_per_s"] > 0 and "cold" in done.stdout
    # The streams start after the supervisor's first spare worker (asked for at its start) has
    # booted, and each run says what the processes other than the hosts took meanwhile.
    assert nested["spares_before"] >= 1, nested
    assert len(nested["runs_others_cpu_s"]) == 3 and all(s >= 0 for s in nested["runs_others_cpu_s"])
    assert "the other processes (driver, supervisor, Ray's own) took" in done.stdout
    assert figures["first_nested_part"]["pooled"]["trials"] == 2
    assert figures["first_nested_part"]["streaming"]["trials"] == 2  # a child still streaming after its first text
    assert "pooled, streaming child" in done.stdout
    # Dedicated trials in a warm pool: each trial's sessions release their actors, which the next reuses.
    pool = figures["first_nested_part"]["dedicated"]["pool"]
    assert pool["actors"] >= 2 and pool["started"] == 0 and pool["shared"] == 0, pool
    assert "a warm pool of" in done.stdout
    for row in figures["first_nested_part"].values():  # the call, the child's first part, the batch back
        legs_ms = row["legs_p50_ms"]
        assert list(legs_ms) == ["call", "child", "back"] and all(ms >= 0 for ms in legs_ms.values()), legs_ms
    assert "the call to the child's host" in done.stdout and "its batch to the parent" in done.stdout
    ray_call = figures["ray_call"]  # Ray's own one-way call between two plain actors: the floor beside them
    assert ray_call["calls"] == 30 and ray_call["idle_p50_ms"] > 0 and ray_call["busy_p50_ms"] > 0, ray_call
    assert "Ray's own call between two async actors" in done.stdout
    assert len(figures["recovery"]["runs"]) == 1 and "recovery" in done.stdout
    legs = figures["recovery"]["legs_p50_s"]  # the restarted host's own start-up stages (actors.boot)
    assert list(legs) == ["process", "ray", "imports", "actor", "init", "reactivate", "resume"]
    assert sum(legs.values()) == pytest.approx(figures["recovery"]["runs"][0], abs=0.01)
    # Until __init__ runs, the time goes to a worker booting and importing Troupe, or (a spare with
    # Troupe imported ahead, actors.options.PRELOAD_MODULES) to Ray handing the actor over.
    assert legs["ray"] + legs["imports"] + legs["actor"] > 0 and legs["init"] >= 0
    assert "Troupe's modules are imported" in done.stdout and "arguments unpickled" in done.stdout


@pytest.mark.slow
def test_troupe_bench_shop_runs_sqlite_and_postgresql_side_by_side(workdir: Path) -> None:
    _require_binaries()
    out = workdir / "shop.json"
    args = ("--sizes", "2", "--repeats", "1", "--store", "sqlite", "--store", "postgres", "--json", str(out))
    done = troupe("bench", "shop", *args, cwd=workdir)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    figures = json.loads(out.read_text())
    assert sorted(figures) == ["postgres", "sqlite"]
    for by_size in figures.values():
        assert by_size["2"]["sessions_per_s"] > 0 and by_size["2"]["store_bytes_per_session"] > 0
    assert "N=2: postgres sessions/s =" in done.stdout


@pytest.mark.slow
def test_troupe_bench_soak_and_idle(workdir: Path) -> None:
    out = workdir / "soak.json"
    args = ("--minutes", "0.25", "--sessions-per-cycle", "2", "--max-slope", "500", "--json", str(out))
    done = troupe("bench", "soak", *args, cwd=workdir)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    figures = json.loads(out.read_text())
    assert figures["ok"] and figures["served"] > 0 and figures["left_active"] == 0, figures
    assert "host 0 MB" in done.stdout and "MB per 1,000 sessions served" in done.stdout
    out = workdir / "idle.json"
    done = troupe("bench", "idle", "--sessions", "100", "--sample", "10", "--json", str(out), cwd=workdir)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    figures = json.loads(out.read_text())
    assert figures["ok"] and figures["sampled"] == 10 and figures["continued"] == 3, figures
    assert "reactivation     p50" in done.stdout
