"""``LiveSessions``: the supervisor's directory of live sessions, as the hosts report them.

Each host reports every session it has active (sub-agents too) whenever the set changes, at most
every ``REPORT_EVERY`` seconds, and each report replaces the host's previous one. At the peak of a
run with sub-agents that is two entries per session, rewritten several times a second, so an
entry is kept small: a tuple of the host's name and the agent's key, both one shared string per
name. A report that changes nothing for a session leaves its entry as it was.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

__all__ = ["Entry", "LiveSessions"]


class Entry(NamedTuple):
    """Where a live session runs: its host, and the key of its agent."""

    host: str
    agent: str


class LiveSessions:
    """Session id -> ``Entry`` for every live session (see the module docstring)."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}
        self._by_host: dict[str, set[str]] = {}
        self._names: dict[str, str] = {}
        """One string per host name and agent key (a report brings its own copies)."""

    def replace(self, host: str, sessions: Mapping[str, str]) -> None:
        """``host`` has exactly ``sessions`` (id -> agent key) active now."""
        entries = self._entries
        name = self._names.setdefault
        host = name(host, host)
        current = set(sessions)
        for session_id in self._by_host.get(host, set()) - current:
            entry = entries.get(session_id)
            if entry is not None and entry.host is host:  # not if it moved to another host meanwhile
                del entries[session_id]
        for session_id, agent in sessions.items():
            entry = entries.get(session_id)
            if entry is None or entry.host is not host or entry.agent != agent:
                entries[session_id] = Entry(host, name(agent, agent))
        self._by_host[host] = current

    def get(self, session_id: str) -> Entry | None:
        """Where ``session_id`` runs, if it is live."""
        return self._entries.get(session_id)

    def where(self, session_id: str) -> dict[str, Any] | None:
        """``session_id``'s entry as a dict: ``host``, ``agent`` and ``parent`` (``None`` at the top)."""
        entry = self._entries.get(session_id)
        if entry is None:
            return None
        parent = session_id.rsplit("/", 1)[0] if "/" in session_id else None
        return {"host": entry.host, "agent": entry.agent, "parent": parent}

    def tree(self, session_id: str) -> list[str]:
        """``session_id`` and its live descendants (their ids start with ``<session_id>/``), sorted."""
        prefix = session_id + "/"
        return [session_id, *sorted(s for s in self._entries if s.startswith(prefix))]

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)
