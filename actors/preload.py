"""What each Python worker of a Ray the runtime starts imports before it takes work (``PRELOAD_MODULES``).

It imports the host and supervisor classes and everything they import (so does the tools module,
which looks pydantic's plugins up: ``tools.tool``), then collects once and freezes what is alive
(``gc.freeze``): modules, classes, functions, alive for the life of the process anyway, and from
then on never traversed by the collector. A worker that becomes a host calls ``tune_gc`` at
``__init__``, whose full collection walked all of them: 41.6 ms in a fresh process on a 2-vCPU
VM, 0.2 ms after this. That was on the path of every restarted host's recovery and every
dedicated actor's start. The collector's thresholds stay Python's own here: a worker that runs
the application's tasks instead of a host collects as it would without Troupe.
"""

from __future__ import annotations

import gc

import actors.supervisor  # noqa: F401  (imported for what it imports: the host, the supervisor)

gc.collect()
gc.freeze()
