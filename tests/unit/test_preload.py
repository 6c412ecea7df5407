"""What a worker of the runtime's own Ray has done before it takes work (``actors.preload``)."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import textwrap

# A fresh interpreter, as a Ray worker is: it imports what PRELOAD_MODULES names, and nothing else.
_PRELOADED = textwrap.dedent(
    """
    import gc, importlib, json
    default = gc.get_threshold()
    from actors.options import PRELOAD_MODULES
    for name in PRELOAD_MODULES:
        importlib.import_module(name)
    from pydantic.plugin import _loader
    print(json.dumps({
        "plugins_looked_up": _loader._plugins is not None,
        "frozen": gc.get_freeze_count(),
        "thresholds_kept": gc.get_threshold() == default,
    }))
    """
)


@functools.cache  # one fresh interpreter for both tests (it imports all of Troupe: seconds)
def _preloaded() -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", _PRELOADED], capture_output=True, text=True, timeout=120, check=True)
    found: dict[str, object] = json.loads(done.stdout)
    return found


def test_a_preloaded_worker_has_looked_pydantics_plugins_up() -> None:
    # pydantic caches its plugins in ``_loader._plugins`` the first time a model is made (actors.preload makes one).
    assert _preloaded()["plugins_looked_up"] is True


def test_a_preloaded_worker_has_frozen_its_imports_and_kept_pythons_thresholds() -> None:
    found = _preloaded()
    frozen = found["frozen"]
    assert isinstance(frozen, int) and frozen > 10_000, found  # every module's objects, out of the collector's way
    assert found["thresholds_kept"] is True  # a worker running the application's tasks collects as it would
