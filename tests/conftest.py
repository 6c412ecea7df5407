"""Shared test setup: Ray stays quiet and local; every tier sees the same environment.

Hypothesis runs without its per-example deadline (200 ms by default): that is a wall-clock
assertion, and on a loaded machine a fast example can take longer than it and fail the test.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import settings

from tests.groups import group_of

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

settings.register_profile("troupe", deadline=None)
settings.load_profile("troupe")

# The throwaway PostgreSQL server (``pg_server``, ``pg_url``) for every tier that needs one.
pytest_plugins = ["tests.pg"]


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's (in the dev extra)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Two workers (``-n 2``, the README's test command): each shared tier stays in one of them.

    The integration tests run one after another in one worker, on the one Ray they share, while
    the other takes the unit, contract and browser tests one by one, then the tests that start a
    Ray of their own in a subprocess (``tests/groups.py``). xdist's own ``loadgroup`` groups by
    marks, but it renames node ids, which pytest 9.2 no longer allows.
    """
    from xdist.scheduler import LoadScopeScheduling

    class SharedTiers(LoadScopeScheduling):  # type: ignore[misc]  # xdist has no types
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return SharedTiers(config, log)
