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
