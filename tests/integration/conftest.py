"""Integration tests share one local Ray per test session; each test gets its own namespace and store.

The store is a SQLite file unless a test asks for others with ``ON_EVERY_STORE`` (an indirect
parametrization of ``store_url``): the crash tests run on PostgreSQL too, where a host's restart
reconnects to a server instead of reopening a file.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import ray
from ray import cloudpickle

from actors.runtime import Runtime
from tests.fixtures import agents
from tests.groups import OWN_RAY, group_of

from . import helpers

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

# Test-defined models and tools travel to the hosts by value (the workers need not import tests/).
cast(Any, cloudpickle).register_pickle_by_value(helpers)
cast(Any, cloudpickle).register_pickle_by_value(agents)


@pytest.fixture(scope="session")
def shared_ray() -> Iterator[None]:
    """The tier's one local Ray, started at the first test that uses it."""
    temp = tempfile.mkdtemp(prefix="troupe-ray-")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp, namespace="troupe-tests")
    yield
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(autouse=True)
def ray_session(request: pytest.FixtureRequest) -> None:
    """Every test of the tier on the shared Ray, but those that start a Ray of their own (``tests/groups.py``)."""
    if group_of(request.node.nodeid) != OWN_RAY:
        request.getfixturevalue("shared_ray")


ON_EVERY_STORE = pytest.mark.parametrize("store_url", ["sqlite", "postgres"], indirect=True)
"""Run a test on a SQLite file and on a fresh PostgreSQL database (``tests/pg.py``'s server)."""


@pytest.fixture
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if getattr(request, "param", "sqlite") == "postgres":
        url: str = request.getfixturevalue("pg_url")
        return url
    return f"sqlite:///{tmp_path / 'troupe.db'}"


@pytest.fixture
async def runtime(store_url: str) -> AsyncIterator[Runtime]:
    # Sub-agents spread over the hosts: the cross-actor paths (batches, re-attach) are what is tested.
    rt = Runtime(store=store_url, namespace=f"t-{uuid.uuid4().hex[:8]}", hosts_per_node=2, children="spread")
    await rt.start()
    try:
        yield rt
    finally:
        await rt.close()
