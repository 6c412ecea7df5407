"""A throwaway PostgreSQL server: ``initdb`` and ``pg_ctl`` in a temporary directory, on a free port.

For what needs a real server and must not touch anyone's: the PostgreSQL tests (``tests/pg.py``)
and ``troupe bench store|shop --store postgres``. The server listens on 127.0.0.1 only, keeps its
Unix socket in its own directory, and runs with ``fsync=off`` (nothing it holds must survive a
power cut; a benchmark says so beside its figures). PostgreSQL refuses to run as root, so when
we are root (CI, these machines) both commands run as the ``postgres`` user (``runuser``), in a
directory that user owns. ``stop`` stops it by its data directory and removes everything.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Final

import psycopg

from orchestrator.core.errors import UsageError

__all__ = ["PgServer", "missing_binaries"]

_USER: Final = "postgres"
_databases = itertools.count()


def missing_binaries() -> list[str]:
    """The PostgreSQL programs this needs that are not on PATH (Debian keeps them off it)."""
    return [name for name in ("initdb", "pg_ctl") if shutil.which(name) is None]


class PgServer:
    """One PostgreSQL server in a temporary directory, owned by whoever made it."""

    def __init__(self, *, fsync: bool = False) -> None:
        """Create the cluster and start it (blocking, about a second).

        Raises:
            UsageError: ``initdb``/``pg_ctl`` are not on PATH (the message says how to get them).
        """
        missing = missing_binaries()
        if missing:
            raise UsageError(
                f"a throwaway PostgreSQL needs {' and '.join(missing)} on PATH: apt-get install postgresql, "
                "then link /usr/lib/postgresql/*/bin/* into /usr/local/bin (or pass a postgresql:// URL)"
            )
        self.root = Path(tempfile.mkdtemp(prefix="troupe-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.fsync = fsync
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            shutil.chown(self.root, _USER)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", _USER, "-E", "UTF8", "--locale=C", "--no-sync")
        self.start()

    @property
    def admin_url(self) -> str:
        """The URL of the ``postgres`` database, for creating and dropping databases."""
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
        fsync = "on" if self.fsync else "off"
        return f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c fsync={fsync} -c max_connections=200"

    def _run(self, *command: str) -> None:
        prefix = ["runuser", "-u", _USER, "--"] if self._as_postgres else []
        done = subprocess.run([*prefix, *command], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip() or done.stdout}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
