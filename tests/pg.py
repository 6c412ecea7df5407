"""A throwaway PostgreSQL server for the tests that need one (a pytest plugin: see tests/conftest.py).

``pg_server`` starts one server per test session: ``initdb`` into a temporary directory, then
``pg_ctl start`` on a free port of 127.0.0.1 only, with its Unix socket in that directory and
``fsync=off`` (a test database never needs to survive a power cut). We run as root in CI and
PostgreSQL refuses root, so both run as the ``postgres`` user when we are root. ``pg_url`` gives
each test a fresh database on it. The server is stopped by its data directory at the end
(``pg_ctl stop -m immediate``), and the directory is removed.

``PgServer.private`` starts a second, separate server, for the tests that restart one.

Without the binaries the tests that ask for a server skip with a one-line reason; under
``CI=true`` they fail instead, so CI (which installs PostgreSQL in ``.ci/run``) never skips them.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

__all__ = ["PgServer", "pg_server", "pg_url"]

_USER = "postgres"
_databases = itertools.count()


class PgServer:
    """One PostgreSQL server in a temporary directory, owned by this test session."""

    def __init__(self) -> None:
        """Create the cluster and start it (blocking, about a second)."""
        self.root = Path(tempfile.mkdtemp(prefix="troupe-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            shutil.chown(self.root, _USER)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", _USER, "-E", "UTF8", "--locale=C", "--no-sync")
        self.start()

    @property
    def admin_url(self) -> str:
        """The URL of the ``postgres`` database, for creating and dropping test databases."""
        return f"postgresql://{_USER}@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        """The URL of one database on this server."""
        return f"postgresql://{_USER}@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-w", "-o", self._options(), "start")

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every connection is cut; the data stays."""
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-w", "-m", "fast", "-o", self._options(),
            "restart",
        )  # fmt: skip

    def stop(self) -> None:
        """Stop the server by its data directory and remove everything it wrote."""
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def create_database(self) -> str:
        """A new, empty database; returns its URL.

        ``FILE_COPY`` copies the template's files (with ``fsync=off``, far quicker for a small
        template than ``WAL_LOG``, which writes all of it to the WAL).
        """
        name = f"t{next(_databases)}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" STRATEGY = FILE_COPY')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop a database made by ``create_database`` (its connections are cut first)."""
        name = url.rpartition("/")[2]
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _options(self) -> str:
        return f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c fsync=off -c max_connections=200"

    def _run(self, *command: str) -> None:
        prefix = ["runuser", "-u", _USER, "--"] if self._as_postgres else []
        done = subprocess.run([*prefix, *command], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip() or done.stdout}")

    @classmethod
    def private(cls) -> PgServer:
        """A server of one's own (skips, or fails under CI, where PostgreSQL is missing)."""
        _require_binaries()
        return cls()


def _require_binaries() -> None:
    missing = [name for name in ("initdb", "pg_ctl") if shutil.which(name) is None]
    if not missing:
        return
    reason = f"PostgreSQL is not installed ({' and '.join(missing)} not on PATH): apt-get install postgresql"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI must run the PostgreSQL tests", pytrace=False)
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


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
