"""``troupe bench chaos`` with the driver and node faults: a cluster of the run's own, drivers in processes.

The owner (``run_cluster``, in the bench's process) starts a head node (``ray.cluster_utils.Cluster``:
the processes of ``ray start --head``, in a short temporary directory of its own) and, for the
``node`` fault, a second node; joins it with a runtime that owns the namespace's hosts (detached:
they outlive any driver) and supervisor; and runs the sessions in a driver process
(``python -m actors.bench.chaos_cluster``) that joins the same cluster, namespace and store, as a
real deployment's driver does. The driver keeps a journal (``driver.journal``: one ``O_APPEND``
write per line, ``accepted <session> <input> <pid>`` and ``done <session> <turn> <0|1> <pid>``)
that the owner reads for progress and, at the end, for what was accepted and what finished.

- ``driver``: SIGKILL the driver process and start a new one, which reads the journal and takes
  each session up at its first turn not done, prompting with the same input id (the session
  takes it as the same input: it waits for that turn instead of starting another). Healed when
  the new driver finished a turn (or exited with nothing left to do).
- ``node``: remove the second node (``Cluster.remove_node``: its raylet and every worker on it
  die); healed when every host that lived on it answers again from the head.

The owner keeps every session's live view (``chaos_views``) open from before the first driver
starts to the end: no fault kills the process that holds them, so each must end where its log ends.

Everything stops with the owner: its runtime stops the hosts and supervisor, ``Cluster.shutdown``
stops the nodes' processes (never ``ray stop``: that stops every Ray on the machine), and the
temporary directory is removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Final, cast

import ray
from ray.cluster_utils import Cluster

from actors.bench.chaos_views import SessionViews
from actors.bench.chaos_work import ChaosFigures, ChaosPlan, chaos_agent, check_ledgers, check_sessions, drive_session
from actors.bench.faults import STALL_SECONDS, Fault, Faults, answers_again, db_restart
from actors.runtime import Runtime
from orchestrator.core.errors import TroupeError, UsageError

__all__ = ["Journal", "run_cluster"]

JOURNAL: Final = "driver.journal"


class Journal:
    """The drivers' journal, read as it grows (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self.accepted: dict[str, list[str]] = defaultdict(list)
        self.done: dict[str, dict[int, bool]] = defaultdict(dict)
        self.done_by: Counter[int] = Counter()
        """Turns finished, by the pid of the driver that saw them finish."""
        self.grew = asyncio.Event()
        """Set by the owner's reader (``_watch``) when ``done`` lines came."""

    def poll(self) -> int:
        """Read the lines written since the last poll (whole lines only); how many were ``done`` lines."""
        if not self.path.exists():
            return 0
        with self.path.open("rb") as journal:
            journal.seek(self._offset)
            data = journal.read()
        whole = data[: data.rfind(b"\n") + 1]
        self._offset += len(whole)
        done = 0
        for line in whole.decode().splitlines():
            match line.split(" "):
                case ["accepted", session, input_id, _]:
                    self.accepted[session].append(input_id)
                case ["done", session, turn, ok, pid]:
                    self.done[session][int(turn)] = ok == "1"
                    self.done_by[int(pid)] += 1
                    done += 1
                case _:
                    raise ValueError(f"{self.path}: a line no driver writes: {line!r}")
        return done

    @staticmethod
    def append(path: Path, line: str) -> None:
        """One line in one ``O_APPEND`` write: never torn, never interleaved with another driver's."""
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


# -- a driver (its own process) -------------------------------------------------------------------------------


def _runtime(plan: ChaosPlan, address: str, namespace: str, *, owns: bool) -> Runtime:
    """A runtime on the run's own cluster: the owner's (``owns``: it stops the hosts) or a driver's."""
    return Runtime(
        store=plan.store,
        address=address,
        namespace=namespace,
        hosts_per_node=plan.hosts,
        owns=owns,
        interest_seconds=plan.interest_seconds,
    )


async def _drive_all(plan: ChaosPlan, address: str, namespace: str) -> int:
    """Run every session's turns not done yet; 0 when every session got through them."""
    path = Path(plan.workdir) / JOURNAL
    journal = Journal(path)
    journal.poll()
    rt = _runtime(plan, address, namespace, owns=False)
    await rt.start()
    pid = os.getpid()
    try:
        agent = chaos_agent(plan.workdir)
        gate = asyncio.Semaphore(plan.concurrency)

        async def one(session_id: str) -> bool:
            async with gate:
                return await drive_session(
                    rt,
                    agent,
                    session_id,
                    plan.turns,
                    first=len(journal.done[session_id]),
                    accepted=lambda s, i: Journal.append(path, f"accepted {s} {i} {pid}\n"),
                    done=lambda s, t, ok: Journal.append(path, f"done {s} {t} {int(ok)} {pid}\n"),
                )

        results = await asyncio.gather(*(one(s) for s in plan.session_ids()), return_exceptions=True)
        for session_id, result in zip(plan.session_ids(), results, strict=True):
            if isinstance(result, BaseException):
                print(f"{session_id}: {result!r}", file=sys.stderr)
        return 0 if all(r is True for r in results) else 1
    finally:
        await rt.close()


class _Drivers:
    """The driver processes, one at a time: started, SIGKILLed, replaced."""

    def __init__(self, plan: ChaosPlan, address: str, namespace: str, journal: Journal) -> None:
        self.plan, self.address, self.namespace, self.journal = plan, address, namespace, journal
        self.current: asyncio.subprocess.Process | None = None
        self.started = 0
        self.killed: set[int] = set()
        self.replaced = asyncio.Event()

    def log(self, number: int) -> Path:
        """Where driver ``number`` (from 1) writes its output."""
        return Path(self.plan.workdir) / f"driver-{number}.log"

    async def start(self) -> None:
        """Start a driver (the next one)."""
        self.started += 1
        with self.log(self.started).open("wb") as out:
            self.current = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "actors.bench.chaos_cluster",
                json.dumps(asdict(self.plan)),
                self.address,
                self.namespace,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
            )
        self.replaced.set()

    async def until_done(self) -> int:
        """The exit code of the driver that ends the run (a killed one's successor goes on)."""
        while True:
            proc = cast(asyncio.subprocess.Process, self.current)
            code = await proc.wait()
            if proc.pid not in self.killed:
                return code
            while self.current is proc:  # its successor is being started
                self.replaced.clear()
                await self.replaced.wait()

    async def kill_and_restart(self) -> None:
        """The ``driver`` fault (see the module docstring)."""
        old = cast(asyncio.subprocess.Process, self.current)
        self.killed.add(old.pid)
        with contextlib.suppress(ProcessLookupError):  # it had finished: the successor finds nothing to do
            os.kill(old.pid, signal.SIGKILL)
        await old.wait()
        await self.start()
        new = cast(asyncio.subprocess.Process, self.current)
        ended = asyncio.ensure_future(new.wait())
        while not self.journal.done_by[new.pid] and not ended.done():  # a turn done, or the end
            self.journal.grew.clear()
            grew = asyncio.ensure_future(self.journal.grew.wait())
            await asyncio.wait({grew, ended}, return_when=asyncio.FIRST_COMPLETED)
            grew.cancel()
        ended.cancel()

    def stop(self) -> None:
        """SIGKILL the running driver (a run over its time limit)."""
        if self.current is not None and self.current.returncode is None:
            self.current.kill()


def _node_removal(rt: Runtime, cluster: Cluster, worker: Any, faults: Callable[[], Faults]) -> Fault:
    async def fault() -> None:
        chaos = faults()
        await asyncio.gather(*chaos.healing.values())  # every host's pid known before the node goes
        node = worker.node_id
        moved = []
        for name in rt.host_names:
            info = await asyncio.wait_for(rt.router.host(name).ready.remote(), 60)
            if info["node"] == node:
                moved.append(name)
                chaos.killed_pids.add(int(info["pid"]))
        await asyncio.to_thread(cluster.remove_node, worker)
        await asyncio.gather(*(answers_again(rt, n, lambda i: i["node"] != node) for n in moved))

    return fault


async def _watch(journal: Journal, chaos: Faults) -> None:
    while True:
        done = journal.poll()
        for _ in range(done):
            chaos.turn_done()
        if done:
            journal.grew.set()
        await asyncio.sleep(0.05)


# -- the owner ------------------------------------------------------------------------------------------------


async def run_cluster(
    plan: ChaosPlan,
    figures: ChaosFigures,
    *,
    kill_every: float,
    faults: int | None,
    seed: int,
    limit: float,
    restart_db: Callable[[], None] | None,
    stall_seconds: float = STALL_SECONDS,
) -> None:
    """Run the workload in a cluster of its own under the faults of ``figures.kinds``; fill in ``figures``.

    Raises:
        UsageError: this process is connected to a Ray already (a cluster run needs its own).
        TroupeError: the cluster's nodes did not start (Ray's fixed 30 s, on an overloaded machine).
    """
    if ray.is_initialized():
        raise UsageError(
            "the driver and node faults run a Ray cluster of their own: run them in a process not connected "
            "to Ray (troupe bench chaos), or ask for host,supervisor,db only"
        )
    root = Path(tempfile.mkdtemp(prefix="troupe-c-"))  # short: Ray's socket paths stay under 107 bytes
    (root / "ray").mkdir()
    saved = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = str(root)  # the head's address file: this run's own, never /tmp/ray's
    cluster: Cluster | None = None
    rt: Runtime | None = None
    views: SessionViews | None = None
    try:
        try:
            cluster = Cluster(
                initialize_head=True,
                head_node_args={"num_cpus": 1, "temp_dir": str(root / "ray"), "include_dashboard": False},
            )
            worker = cluster.add_node(num_cpus=1) if "node" in figures.kinds else None
            cluster.wait_for_nodes()
        except Exception as error:  # Ray gives a node 30 s to register, however busy the machine
            raise TroupeError(
                f"the chaos run's own Ray cluster did not start ({error}); on a machine this busy, "
                "run it again when the load is lower"
            ) from error
        address = cast(str, cluster.address)
        namespace = f"chaos-{uuid.uuid4().hex[:6]}"
        rt = _runtime(plan, address, namespace, owns=True)
        await rt.start()
        journal = Journal(Path(plan.workdir) / JOURNAL)
        drivers = _Drivers(plan, address, namespace, journal)
        special: dict[str, Fault] = {"driver": drivers.kill_and_restart}
        if worker is not None:
            special["node"] = _node_removal(rt, cluster, worker, lambda: chaos)
        if restart_db is not None:
            special["db"] = db_restart(rt.store, restart_db)
        chaos = Faults(
            rt,
            figures,
            figures.kinds,
            kill_every=kill_every,
            count=faults,
            seed=seed,
            special=special,
            stall_seconds=stall_seconds,
        )
        ids = plan.session_ids()
        views = SessionViews(rt, chaos_agent(plan.workdir))
        await views.open_all(ids, concurrency=plan.concurrency)
        begun = time.monotonic()
        await drivers.start()
        watching = asyncio.ensure_future(_watch(journal, chaos))
        injecting = asyncio.ensure_future(chaos.run())
        code: int | None = None
        try:
            code = await asyncio.wait_for(drivers.until_done(), limit)
        except TimeoutError:
            figures.failures.append(f"the run took longer than {limit:g} s (--limit)")
            drivers.stop()
        finally:
            chaos.stopping.set()
            await injecting
            watching.cancel()
        figures.wall_s = round(time.monotonic() - begun, 2)
        journal.poll()
        if code not in (0, None):
            figures.failures.append(f"the last driver exited with {code}: see {drivers.log(drivers.started)}")
        for session_id in ids:
            done = journal.done[session_id]
            if all(done.get(turn) for turn in range(plan.turns)):
                figures.finished += 1
            else:
                figures.failures.append(f"{session_id}: did not finish (turns done: {dict(done)})")
        accepted = {s: sorted(set(journal.accepted[s])) for s in ids}
        await check_sessions(rt, chaos_agent(plan.workdir), figures, ids, accepted)
        figures.views_checked = await views.check(ids)
        figures.view_mismatches.extend(views.mismatches)
        figures.view_resets = views.resets
        check_ledgers(Path(plan.workdir), figures, chaos.killed_pids)
    finally:
        if views is not None:
            await views.close()
        if rt is not None:
            await rt.close()  # stops the hosts and the supervisor, then its ray.init
        if cluster is not None:
            cast(Any, cluster).shutdown()
        if saved is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = saved
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":  # a driver: python -m actors.bench.chaos_cluster PLAN_JSON ADDRESS NAMESPACE
    sys.exit(asyncio.run(_drive_all(ChaosPlan(**json.loads(sys.argv[1])), sys.argv[2], sys.argv[3])))
