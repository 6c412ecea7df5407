"""The layers, by what importing them loads: no module below ``actors/`` brings Ray in.

``lint-imports`` (in ``.ci/run``) checks the import graph as written; these check what a real
import loads, module by module, in a fresh interpreter (so a lazy or dynamic import counts too).
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RAY_FREE_PACKAGES = ("orchestrator.core", "orchestrator.models", "orchestrator.store", "orchestrator.run", "tools")


def _modules(package: str) -> list[str]:
    path = ROOT / package.replace(".", "/")
    # With the prefix, a subpackage is walked as itself: tools.mcp, not the MCP SDK's top-level mcp.
    return [package, *(m.name for m in pkgutil.walk_packages([str(path)], prefix=f"{package}."))]


def _loads(module: str) -> list[str]:
    code = (
        "import importlib, json, sys\n"
        f"importlib.import_module({module!r})\n"
        "print(json.dumps(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


@pytest.mark.parametrize("package", RAY_FREE_PACKAGES)
def test_no_module_below_actors_loads_ray(package: str) -> None:
    code = (
        "import importlib, json, sys\n"
        f"for name in {_modules(package)!r}:\n"
        "    importlib.import_module(name)\n"
        "    if 'ray' in sys.modules:\n"
        "        print(json.dumps([name])); break\n"
        "else:\n"
        "    print(json.dumps([]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [], f"importing it pulled in Ray ({package})"


def test_import_orchestrator_loads_no_ray() -> None:
    assert _loads("orchestrator") == []


def test_import_actors_local_loads_no_ray() -> None:
    assert _loads("actors.local") == []


def _doors_loaded(module: str) -> list[str]:
    """Which of Ray's heavy libraries importing ``module`` brings in."""
    code = (
        "import importlib, json, sys\n"
        f"importlib.import_module({module!r})\n"
        "print(json.dumps(sorted(m for m in ('ray.data', 'ray.serve') if m in sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


@pytest.mark.parametrize("module", ["actors", "actors.runtime", "actors.client", "orchestrator.surfaces.cli.main"])
def test_ray_data_and_serve_load_only_with_their_doors(module: str) -> None:
    assert _doors_loaded(module) == []


def test_each_door_loads_its_library() -> None:
    assert _doors_loaded("actors.data") == ["ray.data"]
    assert _doors_loaded("actors.serve") == ["ray.serve"]
