"""The router's lookups of the supervisor never block the event loop that asks for it, and a host it
is given comes with its handle (no lookup by name)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import ray

from actors.router import Router


class _Method:
    def __init__(self, calls: list[tuple[str, tuple[Any, ...]]], name: str) -> None:
        self.calls = calls
        self.name = name

    def remote(self, *args: Any) -> Any:
        self.calls.append((self.name, args))
        return _done((f"host-{args[0]}", _Host(f"host-{args[0]}"))) if self.name == "assign" else None


class _Host:
    """A dedicated host's handle, as the supervisor's ``assign`` returns it beside the name."""

    def __init__(self, name: str) -> None:
        self.name = name


async def _done(value: tuple[str, _Host]) -> tuple[str, _Host]:
    return value


class _Supervisor:
    """What ``ray.get_actor`` hands back: a handle whose methods record their calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> _Method:
        return _Method(self.calls, name)


async def test_the_supervisor_is_looked_up_once_and_off_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    supervisor = _Supervisor()
    lookups: list[str] = []

    def get_actor(name: str, namespace: str) -> _Supervisor:
        lookups.append(threading.current_thread().name)
        return supervisor

    monkeypatch.setattr(ray, "get_actor", get_actor)
    router = Router("ns", ["host-a"], "dedicated")
    await router.report("host-a", {"s-1": "agent@1"}, (1.0, 1))
    assert await router.place("s-1") == "host-s-1"
    assert len(lookups) == 1 and lookups[0] != threading.current_thread().name  # once, on a worker thread
    assert [name for name, _ in supervisor.calls] == ["report", "assign"]
    host = router.host("host-s-1")
    assert isinstance(host, _Host) and host.name == "host-s-1"
    assert len(lookups) == 1  # the host came with its handle: no blocking lookup by name on the loop
