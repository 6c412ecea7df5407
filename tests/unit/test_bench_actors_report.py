"""``troupe bench actors``'s report: every figure beside issue 15's target, ok or MISSED."""

from __future__ import annotations

from typing import Any

from actors.bench.nested import TARGETS, format_actors


def _result(*, rate: int, pooled_ms: float, dedicated_ms: float, recovery_max_s: float) -> dict[str, Any]:
    def first(p50: float) -> dict[str, Any]:
        return {"p50_ms": p50, "max_ms": p50 * 1.5, "cold_ms": p50 * 2, "trials": 10}

    return {
        "nested": {
            "parts": 200_000,
            "seconds": 200_000 / rate,
            "parts_per_s": rate,
            "nested_writes": 120,
            "runs_parts_per_s": [rate - 9_000, rate, rate + 4_000],
            "cold_parts_per_s": rate // 2,
            "cold_parts": 20_000,
        },
        "first_nested_part": {"pooled": first(pooled_ms), "streaming": first(8.0), "dedicated": first(dedicated_ms)},
        "recovery": {
            "p50_s": recovery_max_s - 0.1,
            "max_s": recovery_max_s,
            "runs": [recovery_max_s],
            "legs_p50_s": {
                "process": 0.01,
                "ray": 0.2,
                "imports": 0.15,
                "actor": 0.03,
                "init": 0.01,
                "reactivate": 0.02,
                "resume": 0.06,
            },
        },
        "targets": dict(TARGETS),
    }


def _line(report: str, start: str) -> str:
    return next(line for line in report.splitlines() if line.startswith(start))


def test_the_report_holds_each_figure_to_issue_15s_target() -> None:
    report = format_actors(_result(rate=268_000, pooled_ms=4.9, dedicated_ms=26.8, recovery_max_s=0.45))
    assert _line(report, "nested parts/s").endswith("target >= 250,000  ok")
    assert _line(report, "first nested part, pooled  ").endswith("target <= 5 ms  ok")
    assert _line(report, "first nested part, dedicated").endswith("target <= 30 ms  ok")
    assert "target" not in _line(report, "first nested part, pooled, streaming")  # no target of its own
    assert _line(report, "recovery").endswith("target <= 0.5 s  ok")
    legs = report.splitlines()[-1]  # the recovery's stages, in order (actors.boot)
    assert legs.startswith("  of which, p50: ")
    assert legs.index("started ahead) 0.01 s") < legs.index("takes the actor 0.20 s") < legs.index("ahead) 0.15 s")
    assert legs.index("ahead) 0.15 s") < legs.index("hands it over) 0.03 s")
    assert legs.endswith("to its first part committed 0.06 s")


def test_each_first_nested_part_has_its_legs_under_it_in_order() -> None:
    result = _result(rate=268_000, pooled_ms=5.7, dedicated_ms=26.8, recovery_max_s=0.45)
    legs_of = {"pooled": (3.1, 0.9, 1.7), "streaming": (4.0, 1.0, 3.0), "dedicated": (20.0, 1.5, 5.3)}
    for name, legs in legs_of.items():
        result["first_nested_part"][name]["legs_p50_ms"] = dict(zip(("call", "child", "back"), legs, strict=True))
    lines = format_actors(result).splitlines()
    pooled = lines.index(_line("\n".join(lines), "first nested part, pooled  "))
    under = lines[pooled + 1]
    assert under.startswith("  of which, p50: the call to the child's host")
    assert under.index("staged 3.1 ms") < under.index("first part 0.9 ms") < under.index("staging it 1.7 ms")
    dedicated = lines.index(_line("\n".join(lines), "first nested part, dedicated"))
    assert lines[dedicated + 1].endswith("staging it 5.3 ms")


def test_the_dedicated_trials_say_what_their_pool_did() -> None:
    result = _result(rate=268_000, pooled_ms=5.7, dedicated_ms=16.8, recovery_max_s=0.45)
    result["first_nested_part"]["dedicated"]["pool"] = {"actors": 4, "started": 0, "shared": 0}
    lines = format_actors(result).splitlines()
    dedicated = lines.index(_line("\n".join(lines), "first nested part, dedicated"))
    assert lines[dedicated + 1].startswith("  a warm pool of 4 actors: 0 started and 0 children on their parent")
    assert sum("a warm pool" in line for line in lines) == 1  # the pooled rows have no pool of their own


def test_the_nested_rate_is_the_median_of_warm_runs_with_the_cold_one_apart() -> None:
    line = _line(format_actors(_result(rate=268_000, pooled_ms=4.9, dedicated_ms=26.8, recovery_max_s=0.45)), "nested")
    assert line.startswith("nested parts/s (child -> parent, across actors): 268,000 (median of 3: 259,000, 268,000,")
    assert "cold 134,000 (20,000 parts on fresh hosts)" in line


def test_a_report_of_one_run_names_no_median() -> None:
    result = _result(rate=268_000, pooled_ms=4.9, dedicated_ms=26.8, recovery_max_s=0.45)
    for key in ("runs_parts_per_s", "cold_parts_per_s", "cold_parts"):
        del result["nested"][key]  # a result from before the cold run was measured apart
    line = _line(format_actors(result), "nested")
    assert "median" not in line and "cold" not in line and line.endswith("target >= 250,000  ok")


def test_a_figure_over_its_target_is_marked_missed() -> None:
    report = format_actors(_result(rate=163_000, pooled_ms=11.8, dedicated_ms=68.5, recovery_max_s=1.75))
    for start in ("nested parts/s", "first nested part, pooled  ", "first nested part, dedicated", "recovery"):
        assert _line(report, start).endswith("MISSED"), start


def test_rays_own_call_is_printed_beside_the_first_nested_parts_when_measured() -> None:
    result = _result(rate=268_000, pooled_ms=5.7, dedicated_ms=26.8, recovery_max_s=0.45)
    assert "Ray's own call" not in format_actors(result)  # a result from before it was measured
    result["ray_call"] = {"idle_p50_ms": 1.96, "busy_p50_ms": 0.81, "calls": 30}
    lines = format_actors(result).splitlines()
    line = _line("\n".join(lines), "Ray's own call between two async actors, one way")
    assert line.endswith("p50 2.0 ms after 10 ms idle, 0.8 ms back to back (30 calls each)")
    assert "a first nested part across hosts makes two" in line
    assert lines.index(line) < lines.index(_line("\n".join(lines), "recovery"))  # after the first nested parts
