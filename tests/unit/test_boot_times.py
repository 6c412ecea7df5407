"""``actors.boot``: a host's start-up stages, and a recovery split into them."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

import actors
from actors.boot import LEGS, BootTimes, process_started, recovery_legs
from actors.host import LOADED_AT

_CHILD = "import time; t0 = time.time(); from actors.boot import process_started; print(t0, process_started())"


def test_a_process_start_is_read_from_the_kernel_before_its_code_runs() -> None:
    child = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True)
    code_began, started = map(float, child.stdout.split())
    assert started <= code_began + 0.02  # the process existed before its first line ran (to a clock tick)
    assert process_started() == pytest.approx(psutil.Process(os.getpid()).create_time(), abs=1.5)


def test_a_hosts_start_up_is_stamped_in_order() -> None:
    boot = BootTimes.starting(LOADED_AT)
    assert boot.process == pytest.approx(process_started(), abs=0.05)
    assert (
        boot.process <= boot.importing == actors.IMPORTED_AT <= boot.imported == LOADED_AT <= boot.init <= time.time()
    )
    assert boot.ready == boot.recovered == 0.0  # __init__ and the first recover set these


def test_the_legs_of_a_recovery_add_up_to_it() -> None:
    killed = 1000.0
    boot = {
        "process": 1000.05,
        "importing": 1000.6,
        "imported": 1001.28,
        "init": 1001.3,
        "ready": 1001.32,
        "recovered": 1001.4,
    }
    legs = recovery_legs(boot, killed, resumed=1001.5)
    assert list(legs) == list(LEGS)
    assert legs == pytest.approx(
        {"process": 0.05, "ray": 0.55, "imports": 0.68, "actor": 0.02, "init": 0.02, "reactivate": 0.08, "resume": 0.1}
    )
    assert sum(legs.values()) == pytest.approx(1.5)


def test_a_worker_that_imported_troupe_before_the_kill_only_takes_the_actor() -> None:
    # A spare started ahead with Troupe preloaded (actors.options.PRELOAD_MODULES): its process,
    # boot and imports all ended before the kill; the time to __init__ is Ray handing it the actor.
    boot = {"process": 10.0, "importing": 10.4, "imported": 10.8, "init": 100.14, "ready": 100.18, "recovered": 100.23}
    legs = recovery_legs(boot, killed=100.0, resumed=100.25)
    assert legs == pytest.approx(
        {"process": 0, "ray": 0, "imports": 0, "actor": 0.14, "init": 0.04, "reactivate": 0.05, "resume": 0.02}
    )


def test_a_stage_that_ended_before_the_one_before_counts_zero() -> None:
    # Ray gave the restart a worker process it had started ahead (before the kill), and the host
    # has not recovered yet (recover not returned): each is 0, and the next is timed from before.
    boot = {"process": 0.2, "importing": 2.0, "imported": 2.9, "init": 3.0, "ready": 4.0, "recovered": 0.0}
    legs = recovery_legs(boot, killed=0.5, resumed=4.5)
    assert legs["process"] == 0.0 and legs["ray"] == pytest.approx(1.5)
    assert legs["reactivate"] == 0.0 and legs["resume"] == pytest.approx(0.5)
    assert sum(legs.values()) == pytest.approx(4.0)
