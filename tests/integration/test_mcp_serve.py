"""``troupe mcp CONFIG`` driven by the MCP SDK's own client over stdio, as an IDE would (on Ray).

It serves ``configs/bench-shop.yaml``: the shop agents whose every turn delegates to the researcher
(the demo in ``configs/shop.yaml`` delegates only from its second turn, and each MCP call is a new
session), so the nested researcher's streamed text must show in the progress notifications.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from .cli_process import REPO, cli_env


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tmcp-", dir="/tmp"))  # short: Ray's socket paths live under it
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
async def test_the_shop_agents_as_mcp_tools_over_stdio(workdir: Path) -> None:
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "orchestrator.surfaces.cli.main", "mcp", str(REPO / "configs" / "bench-shop.yaml")],
        env=cli_env(),
        cwd=str(workdir),
    )
    streamed: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        streamed.append(message or "")

    async with Client(server, mode="legacy", cache=None, read_timeout_seconds=240) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(listed) == {"shop", "researcher"}
        assert listed["shop"].input_schema["required"] == ["task"]
        result = await client.call_tool("shop", {"task": "two mugs please"}, progress_callback=on_progress)
    assert not result.is_error, result
    text = "".join(block.text for block in result.content if block.type == "text")
    assert text.startswith("C000") and text.endswith("C099")  # the shopper's final text
    text_streamed = "".join(streamed)
    assert (
        "A000" in text_streamed and "R000R001" in text_streamed
    )  # the shopper's, and the nested researcher's, as they stream
    assert (workdir / "troupe.db").exists()  # durable sessions, in the config's default store
