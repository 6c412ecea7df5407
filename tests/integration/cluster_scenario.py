"""A two-node cluster scenario, run in its own process (a test process can hold only one Ray).

Sessions spread over both nodes; the worker node is removed mid-turn; its hosts restart on the
head node and every session resumes there. Prints one JSON line with what happened.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import ray
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.runtime import Runtime
from orchestrator.core.stream import AgentStreamPart, StepFinish, TextDelta
from orchestrator.models.base import CancelSignal, ModelRequest
from orchestrator.run.agent import Agent

SESSIONS = 16


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
    """Streams a line, waits at the gate (the first time), then finishes."""

    name = "waiting"

    def __init__(self, gate: Any) -> None:
        self.gate = gate

    async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        yield TextDelta("working... ")
        await self.gate.arrive.remote()
        yield TextDelta("done")
        yield StepFinish(None, "stop")


async def scenario(workdir: str) -> dict[str, Any]:
    # A short temp dir: Ray's socket paths must stay under 107 bytes.
    temp = tempfile.mkdtemp(prefix="troupe-c-")
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "temp_dir": temp, "include_dashboard": False}
    )
    worker = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="cluster-test", log_to_driver=False)
    head_id = ray.get_runtime_context().get_node_id()
    gate = Gate.options(scheduling_strategy=NodeAffinitySchedulingStrategy(head_id, soft=False)).remote()
    rt = Runtime(store=f"sqlite:///{workdir}/cluster.db", namespace=f"c-{uuid.uuid4().hex[:6]}", hosts_per_node=1)
    await rt.start()
    try:
        agent = Agent("a", "x", WaitingModel(gate))
        sessions = [rt.session(f"s-{i}", agent=agent) for i in range(SESSIONS)]
        turns = [await s.prompt("go") for s in sessions]
        await asyncio.wait_for(gate.wait_for.remote(SESSIONS), 60)
        nodes_before: dict[str, int] = {}
        for name in rt.host_names:
            info = await rt.router.host(name).ready.remote()
            active = len(await rt.router.host(name).sessions.remote())
            nodes_before[info["node"]] = nodes_before.get(info["node"], 0) + active
        cluster.remove_node(worker)
        await gate.open.remote()
        results = await asyncio.wait_for(asyncio.gather(*(t.finished for t in turns)), 120)
        nodes_after = sorted({(await rt.router.host(n).ready.remote())["node"] for n in rt.host_names})
        return {
            "sessions_by_node_before": nodes_before,
            "nodes_after": nodes_after,
            "head": head_id,
            "worker": worker.node_id,
            "succeeded": sum(r.success for r in results),
            "texts": sorted({r.text for r in results}),
        }
    finally:
        await rt.close()
        ray.shutdown()
        cast(Any, cluster).shutdown()
        shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(asyncio.run(scenario(sys.argv[1]))))
