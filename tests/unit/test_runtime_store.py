"""The Ray runtime's checks of its store that need no Ray: a SQLite file given to a cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.runtime import absolute_store, shared_file_warning
from orchestrator.core.errors import UsageError


def test_a_sqlite_store_on_several_nodes_is_warned_about_with_the_fix() -> None:
    warning = shared_file_warning("sqlite:////data/troupe.db", 3)
    assert warning is not None
    assert warning.startswith("3 nodes share a SQLite store") and "postgresql://" in warning


def test_one_node_or_a_shared_store_is_fine() -> None:
    assert shared_file_warning("sqlite:////data/troupe.db", 1) is None
    assert shared_file_warning("postgresql://troupe@db/troupe", 5) is None


def test_every_host_opens_the_same_files_whatever_its_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert absolute_store("sqlite:///t.db") == f"sqlite:///{tmp_path / 't.db'}"
    assert absolute_store("sqlite:////data/t.db") == "sqlite:////data/t.db"
    assert absolute_store("sharded://sqlite:///a.db|sqlite:////data/b.db|postgresql://db/x") == (
        f"sharded://sqlite:///{tmp_path / 'a.db'}|sqlite:////data/b.db|postgresql://db/x"
    )
    with pytest.raises(UsageError, match="cannot be shared by Ray actors"):
        absolute_store("sharded://memory://|memory://")


@pytest.mark.parametrize("seconds", [0, -1.0, True, "30"])
def test_an_interest_that_is_not_a_positive_number_of_seconds_is_refused_when_the_runtime_is_made(
    seconds: object,
) -> None:
    from actors.runtime import Runtime

    with pytest.raises(UsageError, match="interest_seconds must be a positive number of seconds"):
        Runtime(store="sqlite:////tmp/troupe-never-opened.db", interest_seconds=seconds)  # type: ignore[arg-type]


@pytest.mark.parametrize("count", [-1, 1.5, True, "1"])
def test_a_spare_worker_count_that_is_not_a_whole_number_is_refused_when_the_runtime_is_made(count: object) -> None:
    from actors.runtime import Runtime

    with pytest.raises(UsageError, match=r"spare_workers must be a whole number per node \(0: none\)"):
        Runtime(store="sqlite:////tmp/troupe-never-opened.db", spare_workers=count)  # type: ignore[arg-type]


def test_the_hosts_keep_mutations_for_a_poller_as_long_as_the_runtime_says() -> None:
    from actors.host import SessionHost
    from actors.host_options import HostOptions
    from actors.local import InProcessCluster

    options = HostOptions(store="memory://", namespace="n", interest_seconds=1.5, extra={"local": True})
    assert SessionHost("h", options, InProcessCluster).hub.interest_seconds == 1.5
