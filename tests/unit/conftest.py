"""Unit tests never start Ray: any attempt fails the test (Ray Serve's unit tests do the same)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator

import pytest

from actors.local import LocalRuntime


@pytest.fixture(autouse=True)
def _no_ray(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    ray = sys.modules.get("ray")
    if ray is not None:

        def refuse(*args: object, **kwargs: object) -> None:
            raise AssertionError("unit tests must not start Ray; move this test to tests/integration/")

        monkeypatch.setattr(ray, "init", refuse)
    yield


@pytest.fixture
async def rt() -> AsyncIterator[LocalRuntime]:
    """A started in-process runtime on a memory store, closed after the test."""
    runtime = LocalRuntime()
    await runtime.start()
    yield runtime
    await runtime.close()
