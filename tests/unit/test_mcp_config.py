"""MCP servers declared in YAML (``{mcp: {...}}`` in ``tools:``), and ``configs/mcp.yaml`` run end to end."""

from __future__ import annotations

import asyncio
import pickle
import textwrap
from pathlib import Path

import pytest

from actors.local import LocalRuntime
from orchestrator.core.errors import ConfigError
from orchestrator.core.parts import ToolPart
from orchestrator.surfaces.config import load_agent
from orchestrator.surfaces.config.loader import parse_config
from tools.mcp import MCPSource, Stdio, StreamableHttp, ToolOverride
from tools.mcp.spec import expand_env

ROOT = Path(__file__).resolve().parents[2]


def agent_tools(yaml: str, env: dict[str, str] | None = None) -> list[object]:
    text = textwrap.dedent(yaml)
    config = parse_config(text, env=env or {})
    return list(config.agent().tools)


MODEL = "model: {scripted: {steps: [[{text: hi}]]}}"


def test_a_stdio_server_with_filters_and_overrides() -> None:
    (source,) = agent_tools(
        f"""
        agents:
          a:
            {MODEL}
            tools:
              - mcp:
                  name: time
                  command: mcp-server-time
                  args: [--local-timezone, UTC]
                  env: {{LANG: C}}
                  prefix: time_
                  allow: [get_current_time]
                  timeout: 20
                  tools:
                    get_current_time: {{recovery: report, needs_approval: true, timeout: 5}}
        """
    )
    assert source == MCPSource(
        "time",
        Stdio("mcp-server-time", ("--local-timezone", "UTC"), {"LANG": "C"}),
        "time_",
        ("get_current_time",),
        (),
        {"get_current_time": ToolOverride("report", True, 5.0)},
        20.0,
    )
    assert pickle.loads(pickle.dumps(source)) == source  # it travels to the hosts inside the agent


def test_an_http_server_with_a_token_from_the_environment() -> None:
    (source,) = agent_tools(
        f"""
        agents:
          a:
            {MODEL}
            tools:
              - mcp: {{name: api, url: "http://127.0.0.1:8000/mcp", headers: {{Authorization: "Bearer ${{TOKEN}}"}}}}
        """,
        env={"TOKEN": "s3cret"},
    )
    assert isinstance(source, MCPSource)
    assert source.transport == StreamableHttp("http://127.0.0.1:8000/mcp", {"Authorization": "Bearer s3cret"})


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("{mcp: {command: x}}", "needs a name"),
        ("{mcp: {name: t, command: x, url: 'http://h/mcp'}}", "either command: (stdio) or url:"),
        ("{mcp: {name: t}}", "either command: (stdio) or url:"),
        ("{mcp: {name: t, url: 'ftp://h'}}", "url must start with http"),
        ("{mcp: {name: t, command: x, headers: {a: b}}}", "headers: is for a server reached by url:"),
        ("{mcp: {name: t, command: x, tools: {get: {recovery: twice}}}}", "recovery must be rerun or report"),
        ("{mcp: {name: t, command: x, comand: y}}", "comand"),
        ("{mcp: {name: t, command: x}, timeout: 3}", "inside mcp:, not beside it"),
    ],
)
def test_mistakes_fail_at_load_with_where_and_how(entry: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        agent_tools(f"agents:\n  a:\n    {MODEL}\n    tools:\n      - {entry}\n")
    assert message in str(caught.value)


async def test_the_mcp_demo_config_runs_with_the_time_server(rt: LocalRuntime) -> None:
    agent = load_agent(ROOT / "configs" / "mcp.yaml")
    session = rt.session("demo", agent=agent)
    result = await asyncio.wait_for((await session.prompt("What time is it in Tokyo?")).finished, 120)
    assert result.success, result
    state = (await session.state()).state
    (part,) = [p for m in state.messages for p in m.parts if isinstance(p, ToolPart)]
    assert part.name == "time_get_current_time" and part.state == "done"
    assert isinstance(part.output, dict) and part.output["timezone"] == "Asia/Tokyo"


def test_a_doubled_dollar_leaves_the_variable_to_the_host_that_connects() -> None:
    (source,) = agent_tools(
        f"""
        agents:
          a:
            {MODEL}
            tools:
              - mcp: {{name: api, url: "http://127.0.0.1:8000/mcp", headers: {{Authorization: "Bearer $${{TOKEN}}"}}}}
        """
    )
    assert isinstance(source, MCPSource)
    assert source.transport == StreamableHttp("http://127.0.0.1:8000/mcp", {"Authorization": "Bearer ${TOKEN}"})
    assert expand_env(source.transport.headers["Authorization"], "test", {"TOKEN": "t0k"}) == "Bearer t0k"
