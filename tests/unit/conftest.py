"""Unit tests never start Ray: any attempt fails the test (Ray Serve's unit tests do the same)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _no_ray(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    ray = sys.modules.get("ray")
    if ray is not None:

        def refuse(*args: object, **kwargs: object) -> None:
            raise AssertionError("unit tests must not start Ray; move this test to tests/integration/")

        monkeypatch.setattr(ray, "init", refuse)
    yield
