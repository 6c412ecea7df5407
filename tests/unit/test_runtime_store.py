"""The Ray runtime's checks of its store that need no Ray: a SQLite file given to a cluster."""

from __future__ import annotations

from actors.runtime import shared_file_warning


def test_a_sqlite_store_on_several_nodes_is_warned_about_with_the_fix() -> None:
    warning = shared_file_warning("sqlite:////data/troupe.db", 3)
    assert warning is not None
    assert warning.startswith("3 nodes share a SQLite store") and "postgresql://" in warning


def test_one_node_or_a_shared_store_is_fine() -> None:
    assert shared_file_warning("sqlite:////data/troupe.db", 1) is None
    assert shared_file_warning("postgresql://troupe@db/troupe", 5) is None
