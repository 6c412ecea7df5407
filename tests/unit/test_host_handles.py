"""Hosts reach each other by handle, not by name: a lookup by name (``ray.get_actor``) is a
blocking round trip to the GCS on the caller's loop, and a new actor class is exported again.

- A child's host is sent its parent host's own handle with the first run from that host, and
  keeps it for the batches back (probe, dedicated hosts: the lookup held the child's loop 7.3 ms
  between its first text and its first batch). Only the first: a handle costs its
  serialization, and its registration on the other side, with every call that carries it.
- And it calls that handle at once: Ray connects to another actor on the first call, which was
  otherwise the child's first batch back.
- The actor class of a host is made once per process: every new ``ray.remote(cls)`` is
  exported again, and the export disassembles every method of the class (52-143 ms of the
  supervisor's loop for each dedicated host it started).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
import ray

from actors import options as actor_options
from actors.host import SessionHost
from actors.host_options import HostOptions
from actors.local import InProcessCluster
from actors.ray_cluster import RayCluster
from orchestrator.run.children import ChildRequest, ChildResult

OPTIONS = HostOptions(store="memory://", namespace="n", placement="dedicated", extra={"local": True})


def _no_lookup(name: str, namespace: str | None = None) -> Any:
    raise AssertionError(f"looked up {name!r} by name")


class _Handle:
    """A host's handle that counts the calls to its ``ready`` (and fails them, when asked)."""

    def __init__(self, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail
        self.ready = SimpleNamespace(remote=self._ready)

    def _ready(self) -> Any:
        self.calls += 1

        async def answer() -> dict[str, Any]:
            if self.fail:
                raise ConnectionError("the host died")
            return {}

        return answer()


async def test_a_host_met_by_handle_is_called_at_once_and_without_a_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray, "get_actor", _no_lookup)
    cluster = RayCluster("troupe-dedicated-child", OPTIONS)
    parent, gone = _Handle(), _Handle(fail=True)
    cluster.meet("troupe-dedicated-parent", parent)
    cluster.meet("troupe-dedicated-gone", gone)
    assert cluster.router.host("troupe-dedicated-parent") is parent
    # Ray connects on the first call: it goes now, while the child starts, not with its first batch.
    assert parent.calls == 1 and gone.calls == 1
    await asyncio.gather(*cluster._greetings)  # a failed one is dropped quietly
    assert not cluster._greetings


MET: list[tuple[str, object]] = []
"""The hosts a ``_Meeting`` cluster was introduced to."""


def test_a_host_introduces_itself_once_to_each_host(monkeypatch: pytest.MonkeyPatch) -> None:
    own = object()
    monkeypatch.setattr(ray, "get_runtime_context", lambda: SimpleNamespace(current_actor=own))
    cluster = RayCluster("troupe-dedicated-parent", OPTIONS)
    assert cluster.introduce("troupe-dedicated-a") is own
    assert cluster.introduce("troupe-dedicated-a") is None  # it kept the handle
    assert cluster.introduce("troupe-dedicated-b") is own


class _Meeting(InProcessCluster):
    """Records the hosts it is introduced to (in ``MET``)."""

    def meet(self, name: str, handle: Any) -> None:
        MET.append((name, handle))


class _SubAgents:
    def __init__(self) -> None:
        self.runs: list[tuple[str, str, list[tuple[str, object]]]] = []

    async def run(self, request: ChildRequest, root_key: str, parent_host: str) -> ChildResult:
        self.runs.append((request.child_id, parent_host, list(MET)))
        return ChildResult("done")


async def test_a_child_run_keeps_the_parent_hosts_handle_before_the_run_starts() -> None:
    MET.clear()
    host = SessionHost("child-host", OPTIONS, _Meeting)
    host.subagents = sub = _SubAgents()  # type: ignore[assignment]
    request = ChildRequest("p", "call-1", "p/call-1", None, "look")  # type: ignore[arg-type]
    parent = object()
    assert (await host.child_run(request, "shop", "parent-host", parent)).text == "done"
    assert sub.runs == [("p/call-1", "parent-host", [("parent-host", parent)])]  # met before the run
    MET.clear()
    await host.child_run(request, "shop", "parent-host")  # an older parent sends no handle: nothing to meet
    assert MET == []


def test_a_host_actor_class_is_made_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[type] = []
    real = ray.remote

    def remote(cls: type) -> Any:
        made.append(cls)
        return real(cls)

    actor_options.actor_class.cache_clear()
    monkeypatch.setattr(ray, "remote", remote)
    try:
        for name in ("troupe-dedicated-a", "troupe-dedicated-b"):
            actor_options.host_actor(SessionHost, name=name, namespace="n", node_id=None, detached=False)
    finally:
        actor_options.actor_class.cache_clear()  # the next caller makes the real one again
    assert made == [SessionHost]
