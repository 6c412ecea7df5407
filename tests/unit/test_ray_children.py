"""``RayChildren``: a child placed on the parent's own host runs there directly; one placed on
another host is sent the parent host's own handle with the run (the first to that host).

A delegate call waits as long as its sub-agent works. Through ``Router.on_host`` it held the
retry loop's frames and closures (``retry``, ``attempt``, ``call``) for all that time, about
1 KB per call in flight; a child placed here needs none of them until something goes wrong.

The child's host sends the child's batches back to the parent's host. Without the parent's
handle it looked that host up by name (``ray.get_actor``): a blocking round trip to the GCS on
its loop, between the child's first text and its first batch.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from actors.children import RayChildren
from actors.errors import SessionMoved
from orchestrator.run.agent import Agent
from orchestrator.run.children import ChildRequest, ChildResult
from orchestrator.testing import ScriptedModel

REQUEST = ChildRequest("p", "call-1", "p/call-1", Agent("researcher", "x", ScriptedModel([])), "look")


class _Router:
    """Places the child on ``where``; records what it is asked."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.asked: list[str] = []

    async def place(self, session_id: str, stale: str | None = None) -> str:
        self.asked.append(f"place {session_id}")
        return self.where

    def forget(self, session_id: str) -> None:
        self.asked.append(f"forget {session_id}")

    async def on_host(self, session_id: str, call: Any, schedule: Any) -> ChildResult:
        self.asked.append(f"on_host {session_id}")
        return ChildResult("through the full path")


class _SubAgents:
    """The host's sub-agent runner: fails with ``errors`` first, then answers."""

    def __init__(self, *errors: Exception) -> None:
        self.host = SimpleNamespace(name="host-a")
        self.errors = list(errors)
        self.runs: list[tuple[str, str, str]] = []

    async def run(self, request: ChildRequest, root_key: str, parent_host: str) -> ChildResult:
        self.runs.append((request.child_id, root_key, parent_host))
        if self.errors:
            raise self.errors.pop(0)
        return ChildResult("ran here")


OWN = object()
"""The parent host's own actor handle."""

INTRODUCED: list[str] = []
"""The hosts ``_own`` was asked to introduce this one to."""


def _own(host: str) -> object:
    INTRODUCED.append(host)
    return OWN


async def _deliver(batch: object) -> None:
    raise AssertionError("a child on this host reaches its parent through the host, not here")


async def test_a_child_placed_on_this_host_runs_here_without_the_retry_path() -> None:
    sub, router = _SubAgents(), _Router("host-a")
    children = RayChildren(sub, router, "shop#1", _own)  # type: ignore[arg-type]
    result = await children.run(REQUEST, _deliver)
    assert result.text == "ran here"
    assert sub.runs == [("p/call-1", "shop", "host-a")]
    assert router.asked == ["place p/call-1"]  # no on_host: no retry loop held while it runs


async def test_a_child_that_moved_off_this_host_is_followed_through_the_full_path() -> None:
    sub, router = _SubAgents(SessionMoved("not here")), _Router("host-a")
    children = RayChildren(sub, router, "shop#1", _own)  # type: ignore[arg-type]
    result = await children.run(REQUEST, _deliver)
    assert result.text == "through the full path"
    assert router.asked == ["place p/call-1", "forget p/call-1", "on_host p/call-1"]


async def test_a_child_placed_elsewhere_goes_through_the_full_path() -> None:
    sub, router = _SubAgents(), _Router("host-b")
    children = RayChildren(sub, router, "shop#1", _own)  # type: ignore[arg-type]
    assert (await children.run(REQUEST, _deliver)).text == "through the full path"
    assert sub.runs == [] and router.asked == ["place p/call-1", "on_host p/call-1"]


class _ChildRun:
    """The child's host's ``child_run`` method: records what each call carried."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def remote(self, *args: Any) -> Any:
        self.calls.append(args)
        return _answer()


async def _answer() -> ChildResult:
    return ChildResult("ran on host-b")


class _CallingRouter(_Router):
    """Places the child on ``where`` and makes the call there, as ``Router.on_host`` does."""

    def __init__(self, where: str) -> None:
        super().__init__(where)
        self.child_run = _ChildRun()

    def host(self, name: str) -> Any:
        self.asked.append(f"host {name}")
        return SimpleNamespace(child_run=self.child_run)

    async def on_host(self, session_id: str, call: Any, schedule: Any) -> ChildResult:
        self.asked.append(f"on_host {session_id}")
        result: ChildResult = await call(self.where)
        return result


async def test_a_child_run_on_another_host_carries_this_hosts_own_handle() -> None:
    sub, router = _SubAgents(), _CallingRouter("host-b")
    INTRODUCED.clear()
    children = RayChildren(sub, router, "shop#1", _own)  # type: ignore[arg-type]
    assert (await children.run(REQUEST, _deliver)).text == "ran on host-b"
    [(light, root_key, parent_host, parent_handle)] = router.child_run.calls
    assert (light.child_id, light.agent.name, root_key, parent_host) == ("p/call-1", "researcher", "shop", "host-a")
    assert parent_handle is OWN  # the child's host calls back with it: no lookup by name
    assert INTRODUCED == ["host-b"]
    assert sub.runs == []


FRESH = replace(REQUEST, fresh=True)
"""A delegate call's first run of its child: the child's log is empty, opening it reads nothing."""


class _RetryingRouter(_CallingRouter):
    """Makes the call on ``where`` twice, as ``Router.on_host`` does when the first attempt fails."""

    async def on_host(self, session_id: str, call: Any, schedule: Any) -> ChildResult:
        self.asked.append(f"on_host {session_id}")
        await call(self.where)
        result: ChildResult = await call(self.where)
        return result


async def test_only_a_first_attempt_says_the_child_is_fresh() -> None:
    """A retry may find the child started by the attempt before it: it reads the child's log."""
    sub, router = _SubAgents(), _RetryingRouter("host-b")
    children = RayChildren(sub, router, "shop#1", _own)  # type: ignore[arg-type]
    await children.run(FRESH, _deliver)
    assert [call[0].fresh for call in router.child_run.calls] == [True, False]


class _MovedRouter(_CallingRouter):
    """Places the child on this host (``host-a``) first; the full path finds it on ``host-b``."""

    async def place(self, session_id: str, stale: str | None = None) -> str:
        self.asked.append(f"place {session_id}")
        return "host-a"


async def test_a_child_that_moved_off_this_host_is_not_fresh_on_the_full_path() -> None:
    sub, router = _SubAgents(SessionMoved("not here")), _MovedRouter("host-b")
    children = RayChildren(sub, router, "shop#1", _own)  # type: ignore[arg-type]
    await children.run(FRESH, _deliver)
    [(light, *_)] = router.child_run.calls
    assert light.fresh is False
