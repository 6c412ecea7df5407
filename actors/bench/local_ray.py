"""A benchmark's own local Ray: started (telemetry off, a scratch directory) unless one is running."""

from __future__ import annotations

import tempfile

import ray

__all__ = ["start_local_ray"]


def start_local_ray(namespace: str) -> bool:
    """Start a local Ray for a benchmark unless this process is connected to one; whether it started one.

    The caller that started it shuts it down (``ray.shutdown()``) when it is done.
    """
    if ray.is_initialized():
        return False
    ray.init(
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=tempfile.mkdtemp(prefix="troupe-ray-"),
        namespace=namespace,
    )
    return True
