"""A throwaway PostgreSQL server for the tests that need one (a pytest plugin: see tests/conftest.py).

``pg_server`` starts one server per test session: ``initdb`` into a temporary directory, then
``pg_ctl start`` on a free port of 127.0.0.1 only, with its Unix socket in that directory and
``fsync=off`` (a test database never needs to survive a power cut). We run as root in CI and
PostgreSQL refuses root, so both run as the ``postgres`` user when we are root. ``pg_url`` gives
each test a fresh database on it. The server is stopped by its data directory at the end
(``pg_ctl stop -m immediate``), and the directory is removed.

``PgServer.private`` starts a second, separate server, for the tests that restart one. The server
itself is the library's (``orchestrator.surfaces.bench.pg_server``: the benchmarks start one too).

Without the binaries the tests that ask for a server skip with a one-line reason; under
``CI=true`` they fail instead, so CI (which installs PostgreSQL in ``.ci/run``) never skips them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from orchestrator.surfaces.bench.pg_server import PgServer as _Server
from orchestrator.surfaces.bench.pg_server import _free_port, missing_binaries

__all__ = ["PgServer", "_free_port", "pg_server", "pg_url"]


class PgServer(_Server):
    """The library's throwaway server (``orchestrator.surfaces.bench.pg_server``), for tests."""

    @classmethod
    def private(cls) -> PgServer:
        """A server of one's own (skips, or fails under CI, where PostgreSQL is missing)."""
        _require_binaries()
        return cls()


def _require_binaries() -> None:
    missing = missing_binaries()
    if not missing:
        return
    reason = f"PostgreSQL is not installed ({' and '.join(missing)} not on PATH): apt-get install postgresql"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI must run the PostgreSQL tests", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """The test session's PostgreSQL server, started on first use and stopped at the end."""
    server = PgServer.private()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """A fresh database for one test (its URL), dropped afterwards (a copy of the template is ~7 MB)."""
    url = pg_server.create_database()
    yield url
    pg_server.drop_database(url)
