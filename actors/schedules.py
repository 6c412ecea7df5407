"""The named retry and restart schedules (no Ray here: ``actors.host`` runs without it, too).

``actors.retry`` retries calls to actors on them; a host restarts its MCP servers on
``MCP_RESTART`` (``tools.mcp.registry``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CHILD_CALL", "HOST_READY", "MCP_RESTART", "SESSION_CALL", "Schedule"]


@dataclass(frozen=True, slots=True)
class Schedule:
    """How many attempts, and the wait after a failed one: ``min(step * (offset + n // every), cap)``."""

    name: str
    """What is retried (for the error when the attempts run out)."""
    attempts: int
    """Attempts before giving up."""
    step: float
    """Seconds the wait grows by."""
    cap: float = 0.5
    """The longest wait, seconds."""
    every: int = 1
    """Attempts between two steps of the wait."""
    offset: int = 0
    """Steps the first wait already has."""

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (from 0)."""
        return min(self.step * (self.offset + attempt // self.every), self.cap)


SESSION_CALL = Schedule("a client's call to a session's host", attempts=200, step=0.02)
"""A client's call (``RayTransport.call``): up to 200 attempts, 20 ms more each time, at most 0.5 s."""
CHILD_CALL = Schedule("a parent's call to its sub-agent's host", attempts=100, step=0.05)
"""A parent's host calling its sub-agent's (``RayChildren``): 100 attempts, 50 ms more each time."""
HOST_READY = Schedule("waiting for a host to answer", attempts=400, step=0.05, every=20, offset=1)
"""Waiting for a restarting host (``Router.wait_ready``): 400 attempts, 50 ms more every 20, from 50 ms."""
MCP_RESTART = Schedule("restarting an MCP server", attempts=1_000_000, step=0.5, cap=10.0, offset=1)
"""An MCP server that died or would not start (``tools.mcp.registry``): started again on next use,
0.5 s after the first failure, 0.5 s more after each failure in a row, at most 10 s apart."""
