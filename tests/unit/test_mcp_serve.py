"""``troupe mcp --transport http --local``: the config's agents over streamable HTTP, and the progress text."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from mcp import Client

from orchestrator.surfaces.mcp import progress_chunks
from orchestrator.testing import eventually
from tests.fixtures.mcp import free_port

ROOT = Path(__file__).resolve().parents[2]


async def test_the_agents_over_streamable_http(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "echo.yaml"
    config.write_text(
        "agents:\n"
        "  echo:\n"
        "    description: Says it back.\n"
        "    model: {scripted: {per_turn: true, steps: [[{text: 'You said it.', chunk: 3}]]}}\n"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "orchestrator.surfaces.cli.main", "mcp", str(config), "--transport", "http"),
        *("--port", str(port), "--local", "--store", "memory://"),
        cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:

        async def listening() -> bool:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                assert process.returncode is None, "troupe mcp exited"
                return False
            writer.close()
            return True

        await eventually(listening, 120, interval=0.05, what="troupe mcp to listen")
        seen: list[str] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(message or "")

        async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy", cache=None) as client:
            (tool,) = (await client.list_tools()).tools
            assert (tool.name, tool.description) == ("echo", "Says it back.")
            result = await client.call_tool("echo", {"task": "hello"}, progress_callback=on_progress)
            bad = await client.call_tool("echo", {})
        assert [b.text for b in result.content if b.type == "text"] == ["You said it."]
        assert "".join(seen) == "You said it."
        assert bad.is_error  # the schema's required task
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 30)


def test_progress_is_the_new_text_nested_runs_included() -> None:
    seen: dict[tuple[str, ...], int] = {}

    def message(id: str, role: str, text: str) -> dict[str, Any]:
        return {"id": id, "role": role, "parts": [{"type": "text", "id": "t", "text": text}]}

    nested = {
        "type": "tool",
        "id": "c1",
        "name": "delegate_to_researcher",
        "agent": {"messages": [message("r1", "assistant", "R0")]},
    }
    first: list[dict[str, Any]] = [
        {"type": "message", "message": message("u", "user", "hi")},
        {"type": "message", "message": message("a", "assistant", "A")},
        {"type": "delta", "kind": "text", "messageId": "a", "partId": "t", "delta": "BC"},
        {"type": "part", "messageId": "a", "part": nested},
        {"type": "delta", "kind": "text", "path": ["c1"], "messageId": "r1", "partId": "t", "delta": "R1"},
    ]
    assert progress_chunks(first, seen) == ["A", "BC", "R0", "R1"]
    again = {"type": "part", "messageId": "a", "part": {**nested, "state": "done"}}
    assert progress_chunks([again], seen) == []  # nothing new: nothing sent twice
