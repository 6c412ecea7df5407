"""The errors of the Ray shell, under Troupe's one root (``orchestrator.core.errors``).

```
TroupeError
├── SessionMoved        a dedicated host was asked about a session it does not own: ask where it is
├── HostUnavailable     a host did not answer (it died, is restarting or being moved): wait, call again
└── DedicatedFull       dedicated placement: no actor came free within the wait limit (names the fix)
```

All pickle (they cross Ray): positional constructor arguments, ``self.message``. Neither needs
Ray to be raised or caught, so the client and the in-process runtime name them without loading it.
"""

from __future__ import annotations

from orchestrator.core.errors import TroupeError

__all__ = ["DedicatedFull", "HostUnavailable", "SessionMoved"]


class SessionMoved(TroupeError):
    """A dedicated host was asked about a session it does not own (any more): ask where it is."""

    code = "SESSION_MOVED"


class HostUnavailable(TroupeError):
    """A host did not answer: it died, is restarting or is being moved (the Ray transport says so)."""

    code = "HOST_UNAVAILABLE"


class DedicatedFull(TroupeError):
    """Dedicated placement: every actor the pool may hold stayed busy for longer than the wait limit.

    The message names the limit that was reached and the ways out: a larger ``max_dedicated``, a
    longer ``dedicated_wait``, or ``placement="pooled"`` (many sessions per actor).
    """

    code = "DEDICATED_FULL"
