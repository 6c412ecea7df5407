"""Where a benchmark gets fresh, empty stores, and throws them away: ``--store`` of ``troupe bench``.

``--store`` names a backend the way a person would:

- ``sqlite`` (the default): SQLite files in a scratch directory; ``sqlite?synchronous=full`` (any
  of the SQLite URL's options after the ``?``) opens them with those options, so that two settings
  can run side by side (``--store sqlite --store 'sqlite?synchronous=full'``).
- ``postgres``: a throwaway PostgreSQL server (``pg_server``: ``initdb``/``pg_ctl`` in a temporary
  directory, 127.0.0.1 only, ``fsync=off``), stopped and removed at the end.
- ``postgresql://user@host:port/db``: a server of yours; each store is a new database created
  beside ``db`` (``CREATE DATABASE troupe_bench_…``: the user needs ``CREATEDB``) and dropped after.
  ``db`` itself is never written.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

from orchestrator.core.errors import UsageError
from orchestrator.store import describe_url

__all__ = ["Scratch", "scratch_stores"]


class Scratch(Protocol):
    """Fresh stores of one backend (blocking calls: run them in a thread from async code)."""

    label: str
    """What the figures say the backend was (``sqlite``, ``postgres (throwaway, fsync=off)``, a URL)."""

    def fresh(self) -> str:
        """The URL of a new, empty store."""
        ...

    def drop(self, url: str) -> None:
        """Remove a store ``fresh`` made."""
        ...


class _SqliteScratch:
    def __init__(self, directory: Path, query: str = "") -> None:
        self.label = f"sqlite?{query}" if query else "sqlite"
        self._directory = directory
        self._query = f"?{query}" if query else ""
        self._count = itertools.count()

    def fresh(self) -> str:
        return f"sqlite:///{self._directory / f'bench-{next(self._count)}.db'}{self._query}"

    def drop(self, url: str) -> None:
        path = url.removeprefix("sqlite:///").partition("?")[0]
        for name in (path, f"{path}-wal", f"{path}-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(name)


class _PgScratch:
    def __init__(self, admin_url: str, label: str) -> None:
        self.label = label
        self._admin = admin_url

    def fresh(self) -> str:
        import psycopg

        name = f"troupe_bench_{uuid.uuid4().hex[:12]}"
        try:
            with psycopg.connect(self._admin, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
        except psycopg.Error as error:
            raise UsageError(
                f"cannot create a scratch database on {describe_url(self._admin)}: {error}; the benchmark needs a "
                "user with CREATEDB (or use --store postgres for a throwaway server)"
            ) from None
        parts = urlsplit(self._admin)
        return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))

    def drop(self, url: str) -> None:
        import psycopg

        name = urlsplit(url).path.lstrip("/")
        with psycopg.connect(self._admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def scratch_stores(kind: str) -> Iterator[Scratch]:
    """Fresh stores of the backend ``kind`` names (see the module docstring); cleaned up on exit.

    Raises:
        UsageError: ``kind`` is none of the three forms, or a throwaway server cannot be started.
    """
    if kind == "sqlite" or kind.startswith("sqlite?"):
        directory = Path(tempfile.mkdtemp(prefix="troupe-bench-"))
        try:
            yield _SqliteScratch(directory, kind.partition("?")[2])
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    elif kind == "postgres":
        from orchestrator.surfaces.bench.pg_server import PgServer

        server = PgServer()
        try:
            yield _PgScratch(server.admin_url, "postgres (throwaway server, fsync=off)")
        finally:
            server.stop()
    elif kind.startswith(("postgresql://", "postgres://")):
        yield _PgScratch(kind, describe_url(kind))
    else:
        raise UsageError(
            f"--store {kind!r}: give sqlite (or sqlite?OPTIONS, e.g. sqlite?synchronous=full), "
            "postgres (a throwaway server) or a postgresql:// URL"
        )
