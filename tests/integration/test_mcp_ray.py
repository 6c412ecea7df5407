"""MCP tools on Ray hosts: a call to a tool that is not read-only, cut by a host crash, is never sent again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import ray

from actors.runtime import Runtime
from orchestrator.core import event_types as ai
from orchestrator.core.events import Event
from orchestrator.core.fold import INTERRUPTED
from orchestrator.core.parts import ToolPart
from orchestrator.run.agent import Agent
from orchestrator.testing import ScriptedModel, eventually
from tests.fixtures.mcp import notes_server
from tools.mcp import mcp_http

from .helpers import until_stored

TIMEOUT = 120


@pytest.mark.slow
async def test_a_report_mcp_call_cut_by_a_host_crash_is_never_sent_again(runtime: Runtime, tmp_path: Path) -> None:
    async with notes_server(tmp_path) as server:
        model = ScriptedModel([[{"tool": "charge", "input": {"amount": 7}}], [{"text": "Told you."}]], per_turn=True)
        agent = Agent("a", "x", model, tools=[mcp_http("shop", server.url)])
        session = runtime.session("mcp-crash", agent=agent)
        turn = await session.prompt("pay")
        await eventually(
            lambda: server.lines("charge start"), TIMEOUT, interval=0.02, what="the charge to reach the server"
        )

        def started(log: list[Event]) -> bool:
            return any(e.type == ai.TOOL_STARTED and e.payload.get("recovery") == "report" for e in log)

        await until_stored(runtime.store_url, session.id, started, "the charge's start, with its policy")
        ray.kill(runtime.router.host(await runtime.router.place(session.id)), no_restart=False)
        result = await asyncio.wait_for(turn.finished, TIMEOUT)
        assert (result.success, result.text) == (True, "Told you.")
        state = (await session.state()).state
        (charge,) = [p for m in state.messages for p in m.parts if isinstance(p, ToolPart) and p.name == "charge"]
        assert (charge.state, charge.error) == ("error", INTERRUPTED)
        assert server.lines("charge start") == ["charge start 7"]  # counted on the server: sent exactly once
