"""What the benchmarks sample of a local Ray's processes: their memory and CPU, by kind.

``MemorySampler`` follows the RSS of this process and every descendant while a run goes (the
peak, and each kind's share of it); ``process_kind`` names what a process is (the driver, a
session host, the supervisor, Ray's own, ``--profile``'s py-spy); ``memory_settled`` waits for
Ray's own processes to finish starting before a baseline is taken. ``bench shop`` and ``bench
data`` measure with them.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable, Sequence

import psutil

__all__ = ["MemorySampler", "memory_settled", "process_kind"]


class MemorySampler:
    """Samples the RSS of this process and every descendant (Ray's processes included).

    It must not tax what it measures: one sample every ``interval`` reads each known process's RSS
    once, and the process tree (a walk of all of ``/proc``) is looked up again only every
    ``rescan`` samples. The sampler's own CPU is kept (``cpu_s``) so a report can leave it out.
    """

    def __init__(self, interval: float = 0.2, rescan: int = 5) -> None:
        self.interval = interval
        self.rescan = rescan
        self.peak = 0
        self.peak_by_kind: dict[str, int] = {}
        """Each process kind's RSS at the sample of ``peak`` (``process_kind``; this process is ``driver``)."""
        self.cpu_s = 0.0
        """CPU seconds the sampling thread spent."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _tree() -> list[tuple[psutil.Process, str]]:
        """This process and every descendant, each with its kind."""
        me = psutil.Process()
        out = [(me, "driver")]
        for proc in me.children(recursive=True):
            try:
                out.append((proc, process_kind(proc.name(), proc.cmdline())))
            except psutil.Error:
                pass
        return out

    @staticmethod
    def _by_kind(
        read: Callable[[psutil.Process], float], procs: Sequence[tuple[psutil.Process, str]]
    ) -> dict[str, float]:
        """``read`` summed by kind over ``procs`` (a process that ended counts 0)."""
        out: dict[str, float] = {}
        for proc, kind in procs:
            try:
                out[kind] = out.get(kind, 0.0) + read(proc)
            except psutil.Error:
                pass
        return out

    @staticmethod
    def rss_by_kind() -> dict[str, int]:
        """The RSS of this process and every descendant by kind, in bytes."""
        rss = MemorySampler._by_kind(_rss, MemorySampler._tree())
        return {kind: int(value) for kind, value in rss.items()}

    @staticmethod
    def total() -> int:
        """The RSS of this process and every descendant, in bytes."""
        return sum(MemorySampler.rss_by_kind().values())

    @staticmethod
    def cpu_by_kind() -> dict[str, float]:
        """CPU seconds (user + system) of this process and every descendant, by kind (``process_kind``)."""
        return MemorySampler._by_kind(lambda proc: sum(proc.cpu_times()[:2]), MemorySampler._tree())

    def _sample(self, procs: Sequence[tuple[psutil.Process, str]]) -> None:
        rss = self._by_kind(_rss, procs)
        total = int(sum(rss.values()))
        if total > self.peak:
            self.peak = total
            self.peak_by_kind = {kind: int(value) for kind, value in rss.items()}

    def _run(self) -> None:
        start = time.thread_time()
        procs: list[tuple[psutil.Process, str]] = []
        for sample in itertools.count():
            if self._stop.is_set():
                break
            if sample % self.rescan == 0:
                procs = self._tree()
            self._sample(procs)
            self.cpu_s = time.thread_time() - start
            self._stop.wait(self.interval)
        self.cpu_s = time.thread_time() - start

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample(self._tree())


def _rss(proc: psutil.Process) -> float:
    return float(proc.memory_info().rss)


def process_kind(name: str, cmdline: Sequence[str]) -> str:
    """What a process of a local Ray is, for the CPU split: ``hosts``, ``supervisor``, ``ray``, ``other``.

    And ``profiler``: ``--profile``'s py-spy, whose CPU is not the workload's.
    """
    title = cmdline[0] if cmdline else name
    if name == "py-spy":
        return "profiler"
    if title.startswith("ray::SessionHost"):
        return "hosts"
    if title.startswith("ray::Supervisor"):
        return "supervisor"
    if title.startswith("ray::") or name in ("raylet", "gcs_server") or "ray" in title:
        return "ray"  # Ray's own: the raylet, the GCS, the per-node agents, idle workers
    return "other"


async def memory_settled(interval: float = 0.5, tolerance: int = 2 * 2**20, limit: float = 20.0) -> None:
    """Wait until Ray's own processes have finished starting (their RSS stops growing).

    Ray's dashboard agent and head load their modules for several seconds after ``ray.init``;
    a baseline taken before that charges their start-up to the first run's sessions.
    """
    deadline = time.monotonic() + limit
    last = MemorySampler.total()
    while time.monotonic() < deadline:
        await asyncio.sleep(interval)
        now = MemorySampler.total()
        if abs(now - last) < tolerance:
            return
        last = now
