"""A tool defined in a script's ``__main__`` reaches another process intact (as it does on Ray)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    '''
    import sys
    from ray import cloudpickle
    from tools import tool

    @tool(recovery="report")
    async def add_to_cart(slug: str, qty: int = 1) -> str:
        """Add a product to the cart."""
        return f"Added {qty} x {slug}."

    sys.stdout.buffer.write(cloudpickle.dumps([add_to_cart]))
    '''
)

LOAD = textwrap.dedent(
    """
    import asyncio, pickle, sys
    from tools.tool import Tool

    async def main():
        [loaded] = pickle.loads(sys.stdin.buffer.read())
        assert isinstance(loaded, Tool), type(loaded)
        print(loaded.name, loaded.recovery, sorted(loaded.parameters["properties"]))
        print(await loaded.fn("mug", 2))

    asyncio.run(main())
    """
)


def test_a_tool_defined_in_main_unpickles_in_another_process(tmp_path: Path) -> None:
    root = str(Path(__file__).resolve().parents[2])
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    dumped = subprocess.run([sys.executable, str(script)], capture_output=True, cwd=root, timeout=60, check=True).stdout
    loaded = subprocess.run(
        [sys.executable, "-c", LOAD], input=dumped, capture_output=True, cwd=root, timeout=60, check=False
    )
    assert loaded.returncode == 0, loaded.stderr.decode()
    assert loaded.stdout.decode().split("\n")[:2] == ["add_to_cart report ['qty', 'slug']", "Added 2 x mug."]
