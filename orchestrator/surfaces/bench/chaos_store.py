"""The store of a ``troupe bench chaos`` run (``--store``), and how to restart its server (the ``db`` fault).

- ``sqlite``: ``None`` (the run keeps a SQLite file in its scratch directory); no restart.
- ``postgres``: a database on a throwaway server (``pg_server``), which the ``db`` fault restarts
  (``pg_ctl restart -m fast``: every connection is cut, the data stays); stopped at the end.
- ``postgresql://…``: a scratch database on a server of yours (``scratch``), dropped at the end.
  A server we did not start is never restarted: no ``db`` fault.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from orchestrator.surfaces.bench.scratch import scratch_stores

__all__ = ["chaos_store"]


@contextlib.contextmanager
def chaos_store(kind: str) -> Iterator[tuple[str | None, str, Callable[[], None] | None]]:
    """``(url, label, restart)`` for ``--store kind`` (see the module docstring); cleaned up on exit.

    Raises:
        UsageError: ``kind`` is none of the three forms, or a throwaway server cannot be started.
    """
    if kind == "sqlite":
        yield None, "sqlite", None
    elif kind == "postgres":
        from orchestrator.surfaces.bench.pg_server import PgServer

        server = PgServer()
        try:
            yield server.create_database(), "postgres (throwaway server, fsync=off)", server.restart
        finally:
            server.stop()
    else:
        with scratch_stores(kind) as scratch:
            url = scratch.fresh()
            try:
                yield url, scratch.label, None
            finally:
                scratch.drop(url)
