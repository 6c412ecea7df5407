"""Importing Troupe's host side does pydantic's one-time plugin lookup, off a first session's path."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_a_worker_that_preloads_the_hosts_has_looked_pydantics_plugins_up() -> None:
    # A fresh interpreter, as a Ray worker is: it imports what PRELOAD_MODULES names, and nothing
    # else. pydantic caches its plugins in ``_loader._plugins`` the first time a model is made.
    script = textwrap.dedent(
        """
        import importlib
        from actors.options import PRELOAD_MODULES
        for name in PRELOAD_MODULES:
            importlib.import_module(name)
        from pydantic.plugin import _loader
        print(_loader._plugins is not None)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "True", done.stderr
