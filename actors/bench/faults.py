"""The faults ``troupe bench chaos`` injects, one after another, and the time each took to heal.

Six kinds (``FAULT_KINDS``):

- ``host``: SIGKILL a random host process (a crash: no cleanup); healed when its name answers
  again from a new process. Timed beside the run: the next fault does not wait for it.
- ``supervisor``: ``ray.kill`` the supervisor (Ray restarts it); healed when it answers again.
- ``stall``: freeze a random host process (SIGSTOP) for ``stall_seconds``, then SIGCONT it: a GC
  pause, a VM's stolen time, swapping. The host is not dead: healed when the same process answers
  again, timed from the SIGCONT; one that answers from a new process was taken for dead (by Ray,
  or the supervisor), which is ``unhealed``. Its sessions must simply resume, and a rerun that
  came of it is unexplained (no process was killed).
- ``driver``, ``node``, ``db``: given by the run as ``Fault`` callables (a driver process
  SIGKILLed and a new one joining; a node removed; the PostgreSQL server restarted), each of which
  injects its fault and returns once it healed.

The order (``fault_plan``): a host kill, then the first of the others, a host kill, the next, ...,
then host kills only. Each kind other than ``host`` comes once. Faults come every ``kill_every``
seconds, or, with ``count``, that many spread evenly over the run's progress (the k-th once
k/(count+1) of all turns are done): a schedule that lands mid-run however fast the machine is.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from collections.abc import Awaitable, Callable, Collection, Iterator
from typing import Any, Final, Protocol

import ray

__all__ = ["FAULT_KINDS", "STALL_SECONDS", "Fault", "Faults", "answers_again", "db_restart", "fault_plan"]

FAULT_KINDS: Final = ("host", "supervisor", "driver", "node", "db", "stall")

STALL_SECONDS: Final = 3.0
"""How long the ``stall`` fault freezes a host by default: a long GC pause, not a crash."""

Fault = Callable[[], Awaitable[None]]
"""Injects one fault and returns once it healed."""


class _Figures(Protocol):
    sessions: int
    turns: int
    injected: dict[str, int]
    heal: dict[str, list[float]]
    unhealed: list[str]


def fault_plan(kinds: Collection[str]) -> Iterator[str]:
    """The faults in the order they come (see the module docstring).

    Without ``host`` among ``kinds`` it ends after the others.
    """
    for special in (k for k in FAULT_KINDS if k != "host" and k in kinds):
        if "host" in kinds:
            yield "host"
        yield special
    while "host" in kinds:
        yield "host"


class Faults:
    """Injects the faults of ``fault_plan(kinds)`` as they come due, timing each heal."""

    def __init__(
        self,
        rt: Any,
        figures: _Figures,
        kinds: Collection[str],
        *,
        kill_every: float,
        count: int | None,
        seed: int,
        special: dict[str, Fault] | None = None,
        heal_limit: float = 300.0,
        stall_seconds: float = STALL_SECONDS,
    ) -> None:
        self.rt = rt
        self.figures = figures
        self.kinds = set(kinds)
        self.kill_every = kill_every
        self.count = count
        self.special = dict(special or {})
        self.heal_limit = heal_limit
        """Seconds a fault may take to heal; one that takes longer is ``unhealed`` (the run fails)."""
        self.stall_seconds = stall_seconds
        """Seconds the ``stall`` fault keeps its host frozen (the heal limit starts after them)."""
        missing = self.kinds - {"host", "supervisor", "stall"} - set(self.special)
        if missing:
            raise ValueError(f"no way to inject {sorted(missing)} in this run")
        self.random = random.Random(seed)
        self.killed_pids: set[int] = set()
        """Processes killed (hosts, the removed node's hosts): a rerun after one of them is explained."""
        self.stopping = asyncio.Event()
        self.turns_done = 0
        self.progress = asyncio.Event()
        self.healing: dict[str, asyncio.Task[None]] = {}
        """Hosts killed and not answering yet: name -> the task that times their heal."""

    def turn_done(self) -> None:
        """A turn finished (the progress schedule counts them)."""
        self.turns_done += 1
        self.progress.set()

    async def _due(self, fault: int) -> bool:
        """Wait until fault number ``fault`` (from 1) is due; ``False`` when the run is over first."""
        if self.count is None:
            waiting = asyncio.ensure_future(self.stopping.wait())
            done, _ = await asyncio.wait({waiting}, timeout=self.kill_every)
            waiting.cancel()
            return not done
        if fault > self.count:
            return False
        total = self.figures.sessions * self.figures.turns
        due = total * fault // (self.count + 1)
        while self.turns_done < due:
            if self.stopping.is_set():
                return False
            self.progress.clear()
            waits = {asyncio.ensure_future(self.stopping.wait()), asyncio.ensure_future(self.progress.wait())}
            await asyncio.wait(waits, return_when="FIRST_COMPLETED")
            for wait in waits:  # the one that lost is cancelled, not left pending
                wait.cancel()
        return not self.stopping.is_set()

    async def run(self) -> None:
        """Inject the faults as they come due; then wait for every heal (each is timed)."""
        try:
            for number, kind in enumerate(fault_plan(self.kinds), start=1):
                if not await self._due(number):
                    return
                if kind == "host":
                    await self._kill_host()
                    continue
                begun = time.monotonic()
                try:
                    if kind == "stall":  # timed from the SIGCONT: the freeze itself is the fault
                        begun = await asyncio.wait_for(self._stall_host(), self.heal_limit + self.stall_seconds)
                    else:
                        fault = self._kill_supervisor if kind == "supervisor" else self.special[kind]
                        await asyncio.wait_for(fault(), self.heal_limit)
                except TimeoutError:
                    self.figures.unhealed.append(f"the {kind} fault did not heal within {self.heal_limit:g} s")
                    return
                self._healed_in(kind, time.monotonic() - begun)
        finally:
            await asyncio.gather(*self.healing.values())

    def _healed_in(self, kind: str, seconds: float) -> None:
        self.figures.injected[kind] = self.figures.injected.get(kind, 0) + 1
        self.figures.heal.setdefault(kind, []).append(seconds)

    async def _kill_host(self) -> None:
        """SIGKILL one host that is up (what a crash looks like: no cleanup); its heal is timed beside the run."""
        up = [name for name in self.rt.host_names if name not in self.healing]
        if not up:
            return
        name = self.random.choice(up)
        try:
            pid = int((await asyncio.wait_for(self.rt.router.host(name).ready.remote(), 60))["pid"])
        except Exception:  # it is moving (a lost node) or restarting: the next fault picks again
            self.rt.router.drop(name)
            return
        self.killed_pids.add(pid)
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        self.healing[name] = asyncio.ensure_future(self._host_healed(name, pid, killed))

    async def _host_healed(self, name: str, pid: int, killed: float) -> None:
        try:
            await asyncio.wait_for(answers_again(self.rt, name, lambda info: int(info["pid"]) != pid), self.heal_limit)
        except TimeoutError:
            self.figures.unhealed.append(f"host {name} did not answer within {self.heal_limit:g} s of its SIGKILL")
        else:
            self._healed_in("host", time.monotonic() - killed)
        finally:
            del self.healing[name]

    async def _stall_host(self) -> float:
        """The ``stall`` fault: SIGSTOP a host, SIGCONT it ``stall_seconds`` later; when it was continued.

        Returns once the same process answers again. A host that answers from a new process was
        taken for dead while frozen: that is ``unhealed`` (a stalled host must not be restarted).
        """
        await asyncio.gather(*self.healing.values())  # a host killed before is up again: every pid known
        name = self.random.choice(self.rt.host_names)
        pid = int((await answers_again(self.rt, name, lambda _: True))["pid"])
        os.kill(pid, signal.SIGSTOP)
        try:
            if not await _stopped(pid):
                self.figures.unhealed.append(f"host {name} (pid {pid}) did not stop on SIGSTOP")
            await asyncio.sleep(self.stall_seconds)
        finally:  # whatever happens to the run, the host is not left frozen
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        resumed = time.monotonic()
        info = await answers_again(self.rt, name, lambda _: True)
        if int(info["pid"]) != pid:
            self.figures.unhealed.append(
                f"host {name} answered from a new process after a {self.stall_seconds:g} s stall: "
                "it was taken for dead while frozen"
            )
        return resumed

    async def _kill_supervisor(self) -> None:
        ray.kill(self.rt.supervisor, no_restart=False)
        while True:
            with contextlib.suppress(Exception):  # the supervisor is restarting: ask again
                await asyncio.wait_for(self.rt.supervisor.info.remote(), 30)
                return
            await asyncio.sleep(0.02)


async def answers_again(rt: Any, name: str, healed: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Return what host ``name`` answers ``ready`` with, once ``healed`` accepts it (a new process, a new node).

    Looked up by name every time: a host moved off a lost node is a new actor under the old name.
    """
    while True:
        with contextlib.suppress(Exception):  # the host is restarting (or not registered again yet): ask again
            rt.router.drop(name)
            info: dict[str, Any] = await asyncio.wait_for(rt.router.host(name).ready.remote(), 30)
            if healed(info):
                return info
        await asyncio.sleep(0.02)


async def _stopped(pid: int, *, within: float = 5.0) -> bool:
    """Whether process ``pid`` shows as stopped within ``within`` seconds (taken as so without ``/proc``)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        state = _process_state(pid)
        if state is None or state == "T":
            return True
        await asyncio.sleep(0.01)
    return False


def _process_state(pid: int) -> str | None:
    """The state letter ``/proc`` gives process ``pid`` (``T``: stopped); ``None`` where there is no ``/proc``.

    A read of procfs, answered by the kernel at once: nothing to wait on.
    """
    try:
        with open(f"/proc/{pid}/stat") as stat:  # "pid (name) state ...": the name may hold spaces, not ")"
            return stat.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def db_restart(store: Any, restart: Callable[[], None]) -> Fault:
    """The ``db`` fault: ``restart()`` the PostgreSQL server (blocking: in a thread).

    Healed when ``store`` (the owner's) reads again: the hosts' stores reconnect the same way.
    """

    async def fault() -> None:
        await asyncio.to_thread(restart)
        while True:
            with contextlib.suppress(Exception):  # the store reconnects with backoff: ask again
                await asyncio.wait_for(store.list_sessions(limit=1), 30)
                return
            await asyncio.sleep(0.05)

    return fault
