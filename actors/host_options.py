"""``HostOptions``: how a session host runs its sessions, shipped to its actor when it is created.

Apart from ``actors.host`` so that what builds hosts (the runtimes, the cluster) and what reads
their options (tests) need not load the host's own code to name them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from actors.memory import TRIM_EVERY
from orchestrator.run.pacing import DEFAULT_BUDGET, FIRST_FLUSH, NESTED_DELAY

__all__ = ["HostOptions", "with_writer"]


@dataclass(frozen=True, slots=True)
class HostOptions:
    """How a host runs its sessions (shipped to the actor when it is created)."""

    store: str
    """The event store URL every host shares."""
    namespace: str
    """The Ray namespace."""
    placement: str = "pooled"
    """``pooled`` or ``dedicated``."""
    idle_timeout: float = 300.0
    """Seconds of quiet before a session deactivates."""
    flush_interval: float = FIRST_FLUSH
    """Seconds a step's first stream part may wait before its batch is written (0: none, queued with the part)."""
    flush_every: float = 0.02
    """Seconds between the later stream batches of a step (at least; see ``flush_budget``)."""
    flush_parts: int = 256
    """Parts that force a flush."""
    flush_budget: float = DEFAULT_BUDGET
    """Stream writes per second the host's streaming steps share (``orchestrator.run.pacing``)."""
    nested_delay: float = NESTED_DELAY
    """Seconds a sub-agent's batch may wait for others to share the parent's write."""
    poll_linger: float = 0.002
    """How long a long poll lingers after the first mutation, to gather a burst."""
    interest_seconds: float = 30.0
    """Seconds a poller not seen still counts as following (``MutationHub``): past that, a session's
    appends are no longer kept for it, and it re-reads the snapshot when it comes back."""
    sqlite_writer: str = "inline"
    """How a host writes a SQLite store: ``thread`` (a writer thread) or ``inline`` (on its loop)."""
    switch_interval: float = 0.001
    """Seconds the host's event loop may hold the interpreter lock while Ray's task thread waits for it
    (``sys.setswitchinterval``; Python's default is 0.005). Every call into the host passes through that
    thread: under load, at 5 ms a call could wait several of those slices before it reached the loop."""
    trim_every: float = TRIM_EVERY
    """Seconds between two ``malloc_trim`` calls after deactivations (negative: never; ``actors.memory``)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Options for tests (e.g. the host list in pooled mode)."""

    def store_url(self) -> str:
        """``store`` with the host's SQLite writer (``with_writer``)."""
        return with_writer(self.store, self.sqlite_writer)


def with_writer(url: str, writer: str) -> str:
    """The store URL with the host's SQLite writer (``thread`` is the store's own default)."""
    path, mark, query = url.partition("?")
    if not url.startswith("sqlite:") or writer == "thread" or any(p.startswith("writer=") for p in query.split("&")):
        return url  # a URL that names its writer keeps it
    return f"{path}?{query}&writer={writer}" if mark and query else f"{path}?writer={writer}"
