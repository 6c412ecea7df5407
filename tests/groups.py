"""Which tests run one after another in one worker (the README's ``pytest -n 2``), by path.

``tests/conftest.py``'s scheduler keeps each group in one worker, and the integration tier starts
its shared Ray only for the tests that use it (``tests/integration/conftest.py``).
"""

from __future__ import annotations

from typing import Final

__all__ = ["GROUPS", "OWN_RAY", "group_of"]

OWN_RAY: Final = "own-ray"
"""Tests that start a Ray of their own in a subprocess (the CLI as a user runs it, the README's
examples, a two-node cluster): they start none in the test process, and run beside the shared
tier, in the worker the unit tests free."""

GROUPS: Final = (
    ("tests/integration/test_cli_ray.py", OWN_RAY),
    ("tests/integration/test_readme_commands.py", OWN_RAY),
    ("tests/integration/test_readme.py", OWN_RAY),
    ("tests/integration/test_cluster.py", OWN_RAY),
    ("tests/integration/", "ray"),  # one local Ray for the tier (integration/conftest.py)
    ("tests/browser/", "browser"),  # one Chromium
)
"""The first prefix that matches a test's node id names its group; a test no prefix matches is a group of its own."""


def group_of(nodeid: str) -> str:
    """The group of the test ``nodeid`` (its own id when it is in none)."""
    return next((group for prefix, group in GROUPS if nodeid.startswith(prefix)), nodeid)
