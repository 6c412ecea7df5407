"""A two-node cluster on one PostgreSQL store, run in processes of its own (a process holds one Ray).

``python -m tests.integration.cluster_scenario WORKDIR STORE_URL`` is the owner: it starts a head
and a worker node (``ray.cluster_utils.Cluster``: separate raylet processes) and drives the rest as
separate driver processes, the way a real deployment has them:

1. Driver A (``driver-a``) joins the cluster, starts ``SESSIONS`` sessions spread over the hosts
   of both nodes, waits until every one is mid-turn (at a gate), reports where they run, and
   exits without closing anything: the detached hosts carry on without it.
2. A ``troupe serve`` joins the same namespace and store, and streams (SSE) one session that
   lives on the worker; its runtime follows the store (PostgreSQL's NOTIFY), not the host.
3. The worker node is removed mid-turn; the gate opens. The lost node's host is re-created on the
   head and resumes its sessions from PostgreSQL.
4. Driver B (``driver-b``) joins the same namespace and store: it reaches the same sessions,
   sees every first turn finished, runs a second turn on each, and checks that every session's
   log refolded equals its live state.

The owner prints one JSON line with what happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import httpx
import ray
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.runtime import Runtime
from orchestrator.core.fold import fold_events
from orchestrator.core.stream import AgentStreamPart, StepFinish, TextDelta
from orchestrator.models.base import CancelSignal, ModelRequest
from orchestrator.run.agent import Agent
from orchestrator.testing import eventually

SESSIONS = 16
NAMESPACE = "troupe"  # the default: `troupe serve` joins it
GATE = "cluster-gate"
TIMEOUT = 120


class _Gate:
    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.arrived = asyncio.Condition()
        self.arrivals = 0

    async def arrive(self) -> None:
        async with self.arrived:
            self.arrivals += 1
            self.arrived.notify_all()
        await self.opened.wait()

    async def wait_for(self, count: int) -> None:
        async with self.arrived:
            await self.arrived.wait_for(lambda: self.arrivals >= count)

    async def open(self) -> None:
        self.opened.set()


Gate: Any = ray.remote(num_cpus=0)(_Gate)


class WaitingModel:
    """Streams a line, waits at the gate (the first turn only), then finishes."""

    name = "waiting"

    async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        yield TextDelta("working... ")
        if request.turn_index == 0:
            await cast(Any, ray).get_actor(GATE, namespace=NAMESPACE).arrive.remote()
        yield TextDelta("done")
        yield StepFinish(None, "stop")


def agent() -> Agent:
    return Agent("a", "x", WaitingModel())


def session_ids() -> list[str]:
    return [f"s-{i}" for i in range(SESSIONS)]


# -- the drivers ---------------------------------------------------------------------------------------------


async def driver_a(address: str, store: str) -> dict[str, Any]:
    """Start every session's first turn, report where each runs, and leave without closing."""
    rt = Runtime(store=store, address=address, namespace=NAMESPACE, hosts_per_node=1)
    await rt.start()
    shop = agent()
    for sid in session_ids():
        await rt.session(sid, agent=shop).prompt("go")
    gate: Any = cast(Any, ray).get_actor(GATE, namespace=NAMESPACE)
    await asyncio.wait_for(gate.wait_for.remote(SESSIONS), TIMEOUT)
    where: dict[str, str] = {}
    for name in rt.host_names:
        node = (await rt.router.host(name).ready.remote())["node"]
        for sid in await rt.router.host(name).sessions.remote():
            where[sid] = node
    return {"where": where, "hosts": rt.host_names}  # no rt.close(): the driver just exits


async def driver_b(address: str, store: str) -> dict[str, Any]:
    """Join, find every first turn finished, run a second one, and refold every log."""
    rt = Runtime(store=store, address=address, namespace=NAMESPACE, hosts_per_node=1)
    await rt.start()
    try:
        shop = agent()
        sessions = [rt.session(sid, agent=shop) for sid in session_ids()]
        deadline = time.monotonic() + TIMEOUT
        firsts = []
        for session in sessions:  # the first turns ran on without driver A
            while True:
                info = await session.info()
                if info["lastTurn"] is not None and not info["executing"]:
                    firsts.append(info["lastTurn"]["outcome"])
                    break
                assert time.monotonic() < deadline, f"{session.id}: the first turn did not end"
                await asyncio.sleep(0.1)
        seconds = await asyncio.gather(*[(await s.prompt("again")).finished for s in sessions])
        refolded = 0
        for session in sessions:
            live = (await session.state()).state
            folded = fold_events(await rt.store.read(session.id))
            refolded += folded.messages == live.messages and folded.status == live.status
        nodes_after = sorted({(await rt.router.host(n).ready.remote())["node"] for n in rt.host_names})
        return {
            "first_outcomes": sorted(set(firsts)),
            "second_succeeded": sum(r.success for r in seconds),
            "texts": sorted({m.text for s in sessions for m in (await s.state()).state.messages if m.role != "user"}),
            "refolded_equal": refolded,
            "nodes_after": nodes_after,
        }
    finally:
        await rt.close()


def run_driver(which: str, address: str, store: str) -> dict[str, Any]:
    ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)
    try:
        return asyncio.run(driver_a(address, store) if which == "driver-a" else driver_b(address, store))
    finally:
        ray.shutdown()


# -- the owner -----------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _driver(which: str, address: str, store: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.cluster_scenario", which, address, store],
        capture_output=True,
        text=True,
        timeout=TIMEOUT * 2,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{which} failed ({done.returncode}): {done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _serve(workdir: Path, address: str, store: str, port: int) -> subprocess.Popen[str]:
    config = workdir / "serve.yaml"
    config.write_text(
        "runtime:\n"
        f"  address: {json.dumps(address)}\n"
        "  hosts_per_node: 1\n"
        "agents:\n"
        "  a:\n"
        "    instructions: x\n"
        "    model: {scripted: {steps: [[{text: unused}]]}}\n"
        "main: a\n"
    )
    troupe = str(Path(sys.executable).with_name("troupe"))
    log = open(workdir / "serve.log", "w")
    return subprocess.Popen(
        [troupe, "serve", str(config), "--store", store, "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )


async def _follow_sse(base: str, session_id: str, lines: list[tuple[float, str]], ready: asyncio.Event) -> None:
    """Stream the session's SSE, keeping (arrival time, data line) of every event."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(TIMEOUT)) as client:
        async with client.stream("GET", f"{base}/api/sessions/{session_id}/events") as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    lines.append((time.monotonic(), line[5:].strip()))
                    ready.set()


def _says_done(data: str) -> bool:
    """Whether an SSE event's mutations carry the text the model streams after the gate.

    It comes as a text ``delta``, or whole: in a ``part`` (a step re-run after the node was lost
    streams "working... done" into a new part in one write) or a ``message``.
    """
    mutations = json.loads(data).get("mutations", [])
    return any(
        "done" in str(m.get("delta", ""))
        or "done" in json.dumps(m.get("part", ""))
        or "done" in json.dumps(m.get("message", ""))
        for m in mutations
    )


async def _wait_up(base: str, serve: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + TIMEOUT
    async with httpx.AsyncClient(timeout=5) as client:
        while True:
            assert serve.poll() is None, "troupe serve exited early"
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(f"{base}/api/sessions")).status_code == 200:
                    return
            assert time.monotonic() < deadline, "troupe serve did not come up"
            await asyncio.sleep(0.2)


async def _listeners(store: str) -> int:
    """PostgreSQL connections listening for commits (only a store-following process opens one)."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(store, autocommit=True) as conn:
        cursor = await conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'troupe-listen'")
        row = await cursor.fetchone()
        return int(row[0]) if row else 0


async def scenario(workdir: Path, store: str) -> dict[str, Any]:
    temp = tempfile.mkdtemp(prefix="troupe-c-")  # short: Ray's socket paths stay under 107 bytes
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "temp_dir": temp, "include_dashboard": False}
    )
    worker = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    address = cast(str, cluster.address)
    ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)
    serve: subprocess.Popen[str] | None = None
    follower: asyncio.Task[None] | None = None
    try:
        head = ray.get_runtime_context().get_node_id()
        gate = Gate.options(
            name=GATE, lifetime="detached", scheduling_strategy=NodeAffinitySchedulingStrategy(head, soft=False)
        ).remote()
        first = await asyncio.to_thread(_driver, "driver-a", address, store)
        on_worker = sorted(s for s, node in first["where"].items() if node == worker.node_id)
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        serve = _serve(workdir, address, store, port)
        await _wait_up(base, serve)
        lines: list[tuple[float, str]] = []
        ready = asyncio.Event()
        followed = on_worker[0]
        follower = asyncio.ensure_future(_follow_sse(base, followed, lines, ready))
        await asyncio.wait_for(ready.wait(), TIMEOUT)  # the snapshot: the server follows the session
        # The server's store follower opens its LISTEN connection beside the snapshot it serves:
        # wait for it (on a busy machine it comes a moment later), then take the node away.
        listening: dict[str, int] = {"count": 0}

        async def listens() -> bool:
            listening["count"] = await _listeners(store)
            return listening["count"] >= 1

        with contextlib.suppress(TimeoutError):  # a miss is reported by the test's assertion, with the result
            await eventually(listens, TIMEOUT, what="the server to listen for the store's commits")
        listeners = listening["count"]
        cluster.remove_node(worker)
        await gate.open.remote()
        second = await asyncio.to_thread(_driver, "driver-b", address, store)

        async def saw_done() -> bool:  # the server's stream delivers the turn's end after driver B saw it
            return any(_says_done(data) for _, data in lines)

        with contextlib.suppress(TimeoutError):  # a miss is reported by the test's assertion, with the result
            await eventually(saw_done, TIMEOUT, what="the server's event stream to show the turn's end")
        done_at = next((at for at, data in lines if _says_done(data)), None)
        return {
            **second,
            "sessions_by_node_before": {
                node: sum(1 for n in first["where"].values() if n == node) for node in set(first["where"].values())
            },
            "head": head,
            "worker": worker.node_id,
            "followed": followed,
            "serve_saw_done": done_at is not None,
            "serve_events": len(lines),
            "serve_tail": [data[:400] for _, data in lines[-3:]] if done_at is None else [],  # to see a miss
            "listeners": listeners,
        }
    finally:
        if follower is not None:
            follower.cancel()
        if serve is not None:
            serve.terminate()
            try:
                serve.wait(30)
            except subprocess.TimeoutExpired:
                serve.kill()
        ray.shutdown()
        cast(Any, cluster).shutdown()
        shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1] in ("driver-a", "driver-b"):
        print(json.dumps(run_driver(sys.argv[1], sys.argv[2], sys.argv[3])))
    else:
        os.makedirs(sys.argv[1], exist_ok=True)
        print(json.dumps(asyncio.run(scenario(Path(sys.argv[1]), sys.argv[2]))))
