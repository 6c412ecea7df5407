"""A host process's start-up, stage by stage: what a restart costs before its sessions stream again.

Ray restarts a killed host in a new worker process. The process starts; Ray's worker boots in it
(Python, ``import ray``, the connection to its node); Troupe's modules are imported (from the
``actors`` package, ``actors.IMPORTED_AT``, to the end of ``actors.host``, ``LOADED_AT``); Ray
hands the worker the actor; the host's ``__init__`` runs; the host re-activates the sessions it
had (``SessionHost.recover``), and each restarts its interrupted step. A worker Ray started ahead
(``actors.spare_workers``) with Troupe imported ahead (``actors.options.PRELOAD_MODULES``) has
done the first three before the crash. ``BootTimes`` is when each stage ended (seconds since the
epoch, this machine's clock), and ``recovery_legs`` splits a measured recovery, from the kill to
the first part committed again, into those stages (``troupe bench actors`` prints them).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Final

import psutil

import actors

__all__ = ["LEGS", "BootTimes", "process_started", "recovery_legs"]

LEGS: Final = {
    "process": "Ray starts a worker process (0: one started ahead)",
    "ray": "the worker boots (Python, Ray) and, unless Troupe was imported ahead, takes the actor",
    "imports": "Troupe's modules are imported (0: imported ahead)",
    "actor": "the actor's arguments unpickled (Troupe imported ahead: from the kill, Ray hands it over)",
    "init": "the host's __init__",
    "reactivate": "its sessions re-activated",
    "resume": "the step restarted, to its first part committed",
}
"""The stages of a recovery, in order, as ``recovery_legs`` names them."""


@dataclass(slots=True)
class BootTimes:
    """When this host process reached each stage of its start-up (seconds since the epoch)."""

    process: float
    """The process started (``process_started``)."""
    importing: float
    """Troupe's ``actors`` package began to import (Ray's worker had booted)."""
    imported: float
    """``actors.host`` was imported: every module a host runs is loaded."""
    init: float
    """``SessionHost.__init__`` began (every module imported, the actor's arguments unpickled)."""
    ready: float = 0.0
    """``__init__`` ended."""
    recovered: float = 0.0
    """The first ``recover`` ended: the sessions the host had are active again (0: not yet)."""

    @classmethod
    def starting(cls, imported: float) -> BootTimes:
        """The times so far, taken as ``__init__`` begins; ``imported``: ``actors.host.LOADED_AT``."""
        return cls(process_started(), actors.IMPORTED_AT, imported, time.time())

    def as_dict(self) -> dict[str, float]:
        """The times as a plain dict (what ``SessionHost.ready`` returns under ``boot``)."""
        return asdict(self)


def process_started() -> float:
    """When this process started, in seconds since the epoch on this machine's clock, to ~10 ms.

    On Linux from the kernel's record (``/proc/self/stat``: clock ticks after boot) and the time
    since boot; ``psutil``'s ``create_time`` counts from a boot time rounded to the second, so it
    can be a second off, which is the size of what is measured here. Elsewhere: ``psutil``'s.
    """
    try:
        with open("/proc/self/stat", "rb") as stat, open("/proc/uptime", "rb") as uptime:
            ticks = int(stat.read().rsplit(b")", 1)[1].split()[19])  # field 22, starttime
            since_boot = float(uptime.read().split()[0])
        return time.time() - (since_boot - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return float(psutil.Process().create_time())


def recovery_legs(boot: dict[str, float], killed: float, resumed: float) -> dict[str, float]:
    """Seconds each stage of a recovery took (``LEGS``), from ``killed`` to ``resumed``.

    ``boot`` is the restarted host's ``BootTimes.as_dict()``; ``resumed`` is when the first part
    of the restarted step was committed. The legs add up to ``resumed - killed``. A stage that
    ended before the one before it (Ray gave the restart a worker it had started ahead, before
    the kill, and imported Troupe in it; the step's first part was committed before ``recover``
    returned) counts 0, and the next stage is timed from the end of the one before.
    """
    ends = [
        boot["process"],
        boot["importing"],
        boot["imported"],
        boot["init"],
        boot["ready"],
        boot["recovered"],
        resumed,
    ]
    legs: dict[str, float] = {}
    last = killed
    for name, end in zip(LEGS, ends, strict=True):
        end = max(end, last)
        legs[name] = round(end - last, 4)
        last = end
    return legs
