"""The event store: the ``EventStore`` port, its backends, and ``open_store(url)``.

```python
store = open_store("sqlite:///troupe.db")     # relative path; sqlite:////abs/path.db is absolute
result = await store.append("s-1", [Event(id="e-1", type="note", payload={"text": "hi"})])
events = await store.read("s-1")              # [Event(..., session_id="s-1", index=1)]
await store.close()
```

Built-in URL schemes: ``memory://`` (fresh, in-process), ``memory://NAME`` (shared within the
process by name), ``sqlite:///path.db``, and ``postgresql://user@host:port/db`` (or
``postgres://``; needs the ``postgres`` extra), and ``sharded://URL|URL|…`` (sessions spread over
those stores by their root id: ``sharded``). ``register_backend(scheme, factory)`` adds one.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

from orchestrator.core.errors import UsageError
from orchestrator.store._urls import describe_url
from orchestrator.store.base import AppendBatch, AppendResult, EventStore, LogLoader, SessionSummary, Snapshot
from orchestrator.store.memory import MemoryStore, open_memory_store
from orchestrator.store.sqlite import SqliteStore

__all__ = [
    "AppendBatch",
    "AppendResult",
    "EventStore",
    "LogLoader",
    "MemoryStore",
    "SessionSummary",
    "Snapshot",
    "SqliteStore",
    "describe_url",
    "open_store",
    "register_backend",
]

StoreFactory = Callable[[str], EventStore]
"""Builds a store from its whole URL (``"postgresql://host/db"``)."""

_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
_EXAMPLES = {
    "memory": "memory:// or memory://NAME",
    "sqlite": "sqlite:///relative/path.db or sqlite:////absolute/path.db",
    "postgresql": "postgresql://user@host:port/db (or postgres://)",
    "postgres": "postgres://user@host:port/db",
    "sharded": "sharded://URL|URL (two or more stores)",
}


def _open_sqlite(url: str) -> EventStore:
    rest, _, query = url[len("sqlite://") :].partition("?")
    options = dict(part.partition("=")[::2] for part in query.split("&") if part)
    unknown = set(options) - {"writer", "synchronous"}
    if unknown:
        raise UsageError(
            f"{url!r}: unknown option(s) {sorted(unknown)}; the SQLite options are writer=thread|inline "
            "and synchronous=normal|full"
        )
    # SQLAlchemy's forms: sqlite:///rel.db -> "rel.db", sqlite:////abs.db -> "/abs.db".
    if not rest.startswith("/"):
        raise UsageError(
            f"{url!r} names a host ({rest.split('/')[0]!r}); a SQLite URL has none: "
            "use sqlite:///relative/path.db or sqlite:////absolute/path.db"
        )
    path = rest[1:]
    if not path or path == ":memory:" or "?" in path:
        raise UsageError(
            f"{url!r} is not a SQLite file URL: use sqlite:///relative/path.db or "
            "sqlite:////absolute/path.db (for an in-process store, use memory://)"
        )
    if path.endswith("/"):
        raise UsageError(f"{url!r} names a directory: add a file name, e.g. {url}troupe.db")
    return SqliteStore(
        path, url=url, writer=options.get("writer", "thread"), synchronous=options.get("synchronous", "normal")
    )


def _open_postgres(url: str) -> EventStore:
    # Imported here, not at the top: psycopg is an optional extra (``raytroupe[postgres]``) and
    # costs ~150 ms to import, which every ``open_store`` of another scheme would pay. The
    # import stays inside the store layer, where import-linter still sees it.
    try:
        from orchestrator.store.postgres import PostgresStore
    except ImportError as missing:
        raise UsageError(
            f"a {url.partition(':')[0]}:// store needs {missing.name}, which is not installed: "
            "pip install 'raytroupe[postgres]'"
        ) from None
    return PostgresStore(url)


def _open_sharded(url: str) -> EventStore:
    from orchestrator.store.sharded import SEPARATOR, sharded

    urls = [part for part in url[len("sharded://") :].split(SEPARATOR) if part]
    if len(urls) < 2:
        raise UsageError(f"{url!r} names {len(urls)} store(s): give two or more, like sharded://URL|URL")
    if any(u.startswith("sharded://") for u in urls):
        raise UsageError(f"{url!r}: a shard cannot itself be sharded; list the stores themselves")
    return sharded([open_store(u) for u in urls], url=url)


_backends: dict[str, StoreFactory] = {
    "memory": open_memory_store,
    "sqlite": _open_sqlite,
    "postgresql": _open_postgres,
    "postgres": _open_postgres,
    "sharded": _open_sharded,
}
_lock = threading.Lock()


def register_backend(scheme: str, factory: StoreFactory, *, replace: bool = False) -> None:
    """Make ``open_store`` handle URLs of ``scheme`` (for example ``"postgresql"``).

    Args:
        scheme: the URL scheme, lowercase, without ``://``.
        factory: called with the whole URL; returns the store.
        replace: allow replacing an existing backend (the built-ins included).

    Raises:
        UsageError: the scheme is malformed, or already registered and ``replace`` is false.
    """
    if not isinstance(scheme, str) or not _SCHEME.fullmatch(scheme):
        raise UsageError(
            f"store scheme {scheme!r} is not a URL scheme: pass it lowercase without '://', like 'postgresql'"
        )
    if not callable(factory):
        raise UsageError(f"the factory for {scheme!r} must be callable (url -> EventStore)")
    with _lock:
        if scheme in _backends and not replace:
            raise UsageError(f"a store backend for {scheme!r} is already registered: pass replace=True to override it")
        _backends[scheme] = factory


def open_store(url: str) -> EventStore:
    """Open the event store a URL names.

    Opening is cheap and never blocks on I/O: the SQLite backend opens its file on its own
    thread, so a path it cannot open surfaces as a ``StoreError`` from the first call.

    Raises:
        UsageError: the URL is malformed or its scheme has no backend; the message lists the
            supported forms.
    """
    if not isinstance(url, str):
        raise UsageError(f"a store URL must be a string, got {type(url).__name__}")
    scheme, sep, _ = url.partition("://")
    with _lock:
        factory = _backends.get(scheme.lower()) if sep else None
        supported = [_EXAMPLES.get(name, f"{name}://...") for name in sorted(_backends)]
    if factory is None:
        problem = f"unknown store scheme {scheme!r}" if sep else "it has no scheme"
        raise UsageError(
            f"cannot open store URL {url!r}: {problem}. Supported: {'; '.join(supported)}. "
            "Fix the URL, or add a backend with orchestrator.store.register_backend(scheme, factory)"
        )
    return factory(url)
