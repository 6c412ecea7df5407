"""What each Python worker of a Ray the runtime starts imports before it takes work (``PRELOAD_MODULES``).

It imports the host and supervisor classes and everything they import, has pydantic look its
plugins up, then collects once and freezes what is alive (``gc.freeze``): modules, classes,
functions, alive for the life of the process anyway, and from then on never traversed by the
collector. A worker that becomes a host calls ``tune_gc`` at ``__init__``, whose full collection
walked all of them: 41.6 ms in a fresh process on a 2-vCPU VM, 0.2 ms after this. That was on
the path of every restarted host's recovery and every dedicated actor's start. The collector's
thresholds stay Python's own here: a worker that runs the application's tasks instead of a host
collects as it would without Troupe.

The first model a process makes, pydantic looks its plugins up in every installed package's entry
points (10-16 ms here). A host's first agent paid it on its first session's path (unpickled, its
tools' input models are made again): 13-21 ms to load, against 2.5-3.4 after one throwaway model.
"""

from __future__ import annotations

import gc

from pydantic import create_model

import actors.supervisor  # noqa: F401  (imported for what it imports: the host, the supervisor)

create_model("_PluginsLookedUp")
gc.collect()
gc.freeze()
