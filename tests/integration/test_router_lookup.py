"""A session call that looks its host up while the host is being re-created waits for it, never fails.

Found by ``troupe bench chaos``'s node fault: a driver looked a host of the removed node up by name
between its death and its re-creation on the head, and ``ray.get_actor``'s ``ValueError`` ended
two sessions' turns.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import ray

from actors.retry import SESSION_CALL
from actors.router import HostNotFound, Router
from orchestrator.testing import eventually


class _Host:
    async def ready(self) -> dict[str, str]:
        return {"name": "late"}

    async def echo(self, session_id: str) -> str:
        return f"{session_id}: ok"


LateHost: Any = ray.remote(num_cpus=0)(_Host)


async def test_a_call_to_a_host_not_registered_yet_waits_for_it() -> None:
    namespace = f"router-{uuid.uuid4().hex[:6]}"
    router = Router(namespace, ["late-host"], "pooled")
    attempts = 0

    async def call(name: str) -> str:
        nonlocal attempts
        attempts += 1
        return str(await router.host(name).echo.remote("s-1"))

    calling = asyncio.ensure_future(router.on_host("s-1", call, SESSION_CALL))
    await eventually(lambda: attempts >= 1, 30, what="a first attempt, against no actor")
    assert not calling.done()  # HostNotFound is waited out, not raised
    host = LateHost.options(name="late-host", namespace=namespace).remote()
    try:
        assert await asyncio.wait_for(calling, 60) == "s-1: ok"
    finally:
        ray.kill(host)


def test_host_not_found_is_a_value_error_for_the_callers_that_expect_one() -> None:
    assert issubclass(HostNotFound, ValueError)
