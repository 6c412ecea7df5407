"""``troupe bench shop --profile``'s attribution (``actors.bench.profile``): frames to stages, samples to µs."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import Counter

import pytest

from actors.bench.profile import (
    RAY_THREADS,
    Profile,
    Profiler,
    format_profile,
    python_threads,
    stage_of,
    stages_of,
    thread_cpu,
)
from actors.bench.sampler import process_kind
from actors.bench.shop import busiest_host_share
from orchestrator.core.errors import UsageError


@pytest.mark.parametrize(
    ("frame", "kind", "stage"),
    [
        ("SessionRunner._drain (orchestrator/run/runner.py:234)", "hosts", "runner and steps"),
        ("SessionLog.fold (orchestrator/run/log.py:114)", "hosts", "fold and reducer"),
        ("session_reducer (orchestrator/core/reducer.py:91)", "hosts", "fold and reducer"),
        ("NestedInbox.take (orchestrator/run/nested.py:147)", "hosts", "sub-agent batches"),
        ("SqliteStore._write_batch (orchestrator/store/sqlite.py:289)", "hosts", "store append"),
        ("pack (orchestrator/core/wire.py:593)", "hosts", "store append"),
        ("_read_fields (orchestrator/core/_wire_fields.py:104)", "hosts", "store append"),
        ("Event.__post_init__ (orchestrator/core/events.py:67)", "hosts", "event payloads and ids"),
        ("diff (orchestrator/core/mutations.py:109)", "hosts", "mutation diff"),
        ("diff (orchestrator/core/mutations.py:109)", "driver", "client: live views"),
        ("LiveView._track (actors/live.py:300)", "driver", "client: live views"),
        ("MutationHub.poll (actors/hub.py:120)", "hosts", "hub and long poll"),
        ("SessionHost.touch (actors/host.py:308)", "hosts", "host shell"),
        ("ScriptedModel.stream (orchestrator/models/scripted.py:177)", "hosts", "model (scripted)"),
        ("add_to_cart (tools/builtin.py:40)", "hosts", "tools"),
        ("Worker.main_loop (ray/_private/worker.py:1069)", "hosts", "Ray: calls, (de)serialisation"),
        ("Pickler.dump (ray/cloudpickle/cloudpickle.py:1313)", "hosts", "Ray: calls, (de)serialisation"),
        ("RayTransport.call (actors/ray_transport.py:43)", "driver", "Ray: calls, (de)serialisation"),
        ("sleep (asyncio/tasks.py:640)", "hosts", "event loop and threads"),
        ("Thread.run (threading.py:982)", "hosts", "event loop and threads"),
        ("shop_session (actors/bench/shop.py:335)", "driver", "bench: sessions, checks, memory"),
        ("__init__ (<string>:19)", "hosts", None),  # a dataclass's generated code: its caller's
        ("cast (typing.py:2268)", "hosts", None),
        ("model_validate (pydantic/main.py:700)", "hosts", None),  # a library: whoever called it
    ],
)
def test_a_frame_belongs_to_its_stage(frame: str, kind: str, stage: str | None) -> None:
    assert stage_of(frame, kind) == stage


def test_a_sample_counts_to_its_innermost_frame_with_a_stage() -> None:
    raw = [
        # uvloop's C code under the pump: the runner's
        "Thread.run (threading.py:982);SessionRunner._drain (orchestrator/run/runner.py:234) 7\n",
        # a generated __init__ called by the fold: the fold's
        "SessionRunner._drain (orchestrator/run/runner.py:234);SessionLog.fold (orchestrator/run/log.py:114);"
        "__init__ (<string>:3) 5\n",
        # asyncio under the model: the event loop's, the innermost frame with a stage
        "Steps._run_step (orchestrator/run/steps.py:294);ScriptedModel.stream (orchestrator/models/scripted.py:177);"
        "sleep (asyncio/tasks.py:640) 3\n",
        " 2\n",  # a thread with no Python frame, holding the lock
        "<module> (x.py:1);_find_and_load (<frozen importlib._bootstrap>:1176) 100\n",  # start-up: left out
        "main (app.py:3);model_validate (pydantic/main.py:700) 1\n",  # nothing of ours: other
    ]
    assert stages_of(raw, "hosts") == Counter(
        {"runner and steps": 7, "fold and reducer": 5, "event loop and threads": 5, "other": 1}
    )


def test_each_kinds_cpu_is_split_by_its_samples() -> None:
    profiler = Profiler({"driver": [], "hosts": [], "supervisor": []})
    profiler.samples = {
        "hosts": Counter({"runner and steps": 3, "store append": 1}),
        "driver": Counter({"client: live views": 1, "Ray: calls, (de)serialisation": 1}),
        "supervisor": Counter(),  # idle: never held the lock while sampled
    }
    table = profiler.table({"hosts": 20.0, "driver": 4.0, "supervisor": 0.3, "ray": 0.5, "other": 0.1})
    assert table["runner and steps"] == {"hosts": 15.0}
    assert table["store append"] == {"hosts": 5.0}
    assert table["client: live views"] == {"driver": 2.0}
    # Ray's own processes are not sampled: their CPU is Ray's row
    assert table["Ray: calls, (de)serialisation"] == {"driver": 2.0, "ray": pytest.approx(0.6)}
    assert table["other"] == {"supervisor": 0.3}  # its CPU stays in the whole
    printed = format_profile(100, Profile(table, 24.9, 12.0))
    assert "runner and steps" in printed.splitlines()[2]  # the biggest first
    assert printed.splitlines()[-1].split()[-1] == "24.9"


def test_the_cpu_of_threads_without_python_is_rays_row_and_the_rest_goes_by_samples() -> None:
    # The driver's Ray core worker I/O thread never runs Python: py-spy never samples it, and
    # spread by the samples' shares its CPU would land in the client's row.
    profiler = Profiler({"driver": [], "hosts": []})
    profiler.samples = {
        "hosts": Counter({"runner and steps": 1}),
        "driver": Counter({"client: live views": 1, "Ray: calls, (de)serialisation": 1}),
    }
    profiler.native = {"driver": 0.25, "hosts": 0.0}
    table = profiler.table({"hosts": 20.0, "driver": 4.0})
    assert table[RAY_THREADS] == {"driver": 1.0}
    assert table["client: live views"] == {"driver": 1.5}
    assert table["Ray: calls, (de)serialisation"] == {"driver": 1.5}
    assert table["runner and steps"] == {"hosts": 20.0}
    assert sum(v for row in table.values() for v in row.values()) == pytest.approx(24.0)


def test_a_processs_threads_and_which_of_them_run_python() -> None:
    spent = thread_cpu(os.getpid())
    assert threading.get_native_id() in spent and all(cpu >= 0 for cpu in spent.values())
    assert threading.get_native_id() in python_threads(Profiler.executable(), os.getpid())
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(10)
    assert thread_cpu(gone.pid) == {}
    assert python_threads(Profiler.executable(), gone.pid) == set()  # cannot tell: all counted as Python


def test_a_process_py_spy_cannot_sample_is_a_clear_error() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(10)
    profiler = Profiler({"hosts": [gone.pid]})
    profiler.start()
    with pytest.raises(UsageError, match="py-spy wrote no samples; attaching needs root"):
        profiler.stop(timeout=30)


def test_py_spy_is_a_kind_of_its_own() -> None:
    # its CPU is left out of the profiled run's rows, not counted as Ray's
    assert process_kind("py-spy", ["/venv/bin/py-spy", "record", "--pid", "1"]) == "profiler"
    assert process_kind("raylet", ["/venv/lib/ray/core/src/ray/raylet/raylet"]) == "ray"
    assert process_kind("python", ["ray::SessionHost.poll"]) == "hosts"


def test_the_busiest_hosts_share_of_a_runs_sessions() -> None:
    assert busiest_host_share(["h1", "h2", "h1", "h2"]) == 0.5  # even
    assert busiest_host_share(["h1", "h2", "h2", "h2"]) == 0.75
    assert busiest_host_share(["h1"] * 44 + ["h2"] * 56) == 0.56
    assert busiest_host_share(["h1", None]) == 0.0  # a host not known (dedicated placement): no figure
    assert busiest_host_share([]) == 0.0
