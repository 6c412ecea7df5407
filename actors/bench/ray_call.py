"""Ray's own call between two async actors, with no Troupe in it: the floor under cross-actor figures.

A first nested part across hosts is two such one-way calls (the parent's host asks the child's
host to run it; the child's host sends its first batch back) plus Troupe's own work. On a 2-vCPU
VM the call's latency depends on how long the actors were idle before it (their threads sleep,
and waking them takes time): back to back it measured 0.8-1.4 ms one way, after 10 ms of quiet
1.0-2.0 ms (six runs, one session). ``bench actors`` prints both beside its first nested parts,
so a figure can be read against what Ray alone costs on the machine that measured it.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import ray

from actors.options import probe_actor

__all__ = ["IDLE_PAUSE", "ray_call_ms"]

IDLE_PAUSE = 0.01
"""Seconds of quiet before each idle call: a first nested part's hosts are quiet for longer."""


class _Echo:
    async def ready(self) -> bool:
        return True

    async def hit(self, sent: float) -> float:
        return time.time() - sent  # one machine, one clock: the call's way in, to the method's start


class _Caller:
    def __init__(self, echo: Any) -> None:
        self.echo = echo

    async def ready(self) -> bool:
        return True

    async def one_way(self, calls: int, pause: float) -> list[float]:
        seconds = []
        for _ in range(calls):
            if pause:
                await asyncio.sleep(pause)
            seconds.append(await self.echo.hit.remote(time.time()))
        return seconds


async def ray_call_ms(calls: int = 30) -> dict[str, float]:
    """One-way call latency between two new async actors, p50 in ms: ``idle`` and ``busy`` (back to back).

    Needs a running Ray; the two actors are killed afterwards. They are made as hosts are
    (``actors.options.probe_actor``), both on this process's node: on a cluster, one clock for the
    two times, and no network in the figure.
    """
    node: str = ray.get_runtime_context().get_node_id()
    echo = probe_actor(_Echo, node_id=node).remote()
    caller = probe_actor(_Caller, node_id=node).remote(echo)
    try:
        await asyncio.wait_for(asyncio.gather(echo.ready.remote(), caller.ready.remote()), 60)
        await asyncio.wait_for(caller.one_way.remote(5, 0.0), 60)  # both warm: first calls set up the channel
        idle = await asyncio.wait_for(caller.one_way.remote(calls, IDLE_PAUSE), 60)
        busy = await asyncio.wait_for(caller.one_way.remote(calls, 0.0), 60)
    finally:
        ray.kill(caller)
        ray.kill(echo)
    return {
        "idle_p50_ms": round(statistics.median(idle) * 1000, 2),
        "busy_p50_ms": round(statistics.median(busy) * 1000, 2),
        "calls": calls,
    }
