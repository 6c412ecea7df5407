"""Shared test setup: Ray stays quiet and local; every tier sees the same environment."""

from __future__ import annotations

import os

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

# The throwaway PostgreSQL server (``pg_server``, ``pg_url``) for every tier that needs one.
pytest_plugins = ["tests.pg"]
