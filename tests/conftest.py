"""Shared test setup: Ray stays quiet and local; every tier sees the same environment.

Hypothesis runs without its per-example deadline (200 ms by default): that is a wall-clock
assertion, and on a loaded machine a fast example can take longer than it and fail the test.
"""

from __future__ import annotations

import os

from hypothesis import settings

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

settings.register_profile("troupe", deadline=None)
settings.load_profile("troupe")

# The throwaway PostgreSQL server (``pg_server``, ``pg_url``) for every tier that needs one.
pytest_plugins = ["tests.pg"]
