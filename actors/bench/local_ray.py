"""A benchmark's own local Ray: started (telemetry off, a scratch directory) unless one is running.

``bench_runtime`` is the whole life of a benchmark's runtime: a scratch directory, Ray (unless
this process is already connected to one), the runtime started in it, and, however the run ends,
the runtime closed, the Ray it started shut down and the scratch directory removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import ray

from actors.options import own_ray_options
from actors.runtime import Runtime

__all__ = ["bench_runtime", "start_local_ray"]


def start_local_ray(namespace: str) -> bool:
    """Start a local Ray for a benchmark unless this process is connected to one; whether it started one.

    Started as a ``Runtime`` starts its own (``own_ray_options``), so a benchmark measures that.

    The caller that started it shuts it down (``ray.shutdown()``) when it is done.
    """
    if ray.is_initialized():
        return False
    options = own_ray_options(None, {"_temp_dir": tempfile.mkdtemp(prefix="troupe-ray-")})
    ray.init(namespace=namespace, **options)
    return True


@contextlib.asynccontextmanager
async def bench_runtime(
    name: str, workdir: str | None, store: str | None, **options: Any
) -> AsyncIterator[tuple[Runtime, Path]]:
    """A started ``Runtime`` for benchmark ``name`` and its scratch directory (see the module docstring).

    ``store``: an empty store's URL (default: ``<scratch>/<name>.db``, SQLite); ``workdir``: the
    scratch directory, kept afterwards (default: a temporary one, removed). ``options`` go to
    ``Runtime``.
    """
    scratch = Path(workdir or tempfile.mkdtemp(prefix=f"troupe-bench-{name}-"))
    os.makedirs(scratch, exist_ok=True)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    started = False
    try:
        started = start_local_ray(f"troupe-{name}")
        rt = Runtime(store=store or f"sqlite:///{scratch}/{name}.db", **options)
        await rt.start()
        try:
            yield rt, scratch
        finally:
            await rt.close()
    finally:
        if started:
            ray.shutdown()
        if workdir is None:
            shutil.rmtree(scratch, ignore_errors=True)
