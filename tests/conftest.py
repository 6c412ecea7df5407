"""Shared test setup: Ray stays quiet and local; every tier sees the same environment.

Hypothesis runs without its per-example deadline (200 ms by default): that is a wall-clock
assertion, and on a loaded machine a fast example can take longer than it and fail the test.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import settings

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

settings.register_profile("troupe", deadline=None)
settings.load_profile("troupe")

# The throwaway PostgreSQL server (``pg_server``, ``pg_url``) for every tier that needs one.
pytest_plugins = ["tests.pg"]

_SHARED = (
    # The CLI on Ray as a user runs it: each test starts a Ray of its own (a third of the
    # integration tier's time), so these run beside the others, in the worker the unit tests free.
    ("tests/integration/test_cli_ray.py", "own-ray"),
    ("tests/integration/test_readme_commands.py", "own-ray"),
    ("tests/integration/", "ray"),  # one local Ray for the tier (integration/conftest.py)
    ("tests/browser/", "browser"),  # one Chromium
)
"""Tests that run one after another in one worker, by path: the first prefix that matches names the group."""


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's (in the dev extra)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Two workers (``-n 2``, the README's test command): each shared tier stays in one of them.

    The integration tests run one after another in one worker, on the one Ray they share, while
    the other takes the unit, contract and browser tests one by one, then the CLI's own-Ray tests
    (``_SHARED``), which start no Ray in the test process (they override the tier's autouse
    ``ray_session``). xdist's own ``loadgroup`` groups by marks, but it renames node ids, which
    pytest 9.2 no longer allows.
    """
    from xdist.scheduler import LoadScopeScheduling

    class SharedTiers(LoadScopeScheduling):  # type: ignore[misc]  # xdist has no types
        def _split_scope(self, nodeid: str) -> str:
            return next((group for prefix, group in _SHARED if nodeid.startswith(prefix)), nodeid)

    return SharedTiers(config, log)
