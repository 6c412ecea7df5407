"""MCP servers as tool sources, against real servers: ``mcp-server-time`` over stdio, the project's
test server over streamable HTTP (``tests.fixtures.mcp_server``), on the in-process runtime."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from actors.local import LocalRuntime
from actors.schedules import MCP_RESTART
from orchestrator.core.errors import ToolError, UsageError
from orchestrator.core.parts import ToolPart
from orchestrator.run.agent import Agent
from orchestrator.testing import ScriptedModel, eventually
from tests.fixtures.mcp import notes_server
from tools.mcp import ToolOverride, mcp_http, mcp_stdio
from tools.mcp.registry import close_connections, restart_delay
from tools.mcp.tools import MCPTool, connection_for, model_names

TIMEOUT = 120
ROOT = Path(__file__).resolve().parents[2]
TIME = mcp_stdio("time", sys.executable, ["-m", "mcp_server_time"], prefix="time_")


def calls(state: Any, name: str) -> list[ToolPart]:
    return [p for m in state.messages for p in m.parts if isinstance(p, ToolPart) and p.name == name]


async def test_the_time_server_answers_over_stdio_and_its_schema_reaches_the_model(rt: LocalRuntime) -> None:
    model = ScriptedModel(
        [[{"tool": "time_get_current_time", "input": {"timezone": "Europe/Paris"}}], [{"text": "It is late."}]]
    )
    session = rt.session("s-1", agent=Agent("a", "x", model, tools=[TIME]))
    result = await asyncio.wait_for((await session.prompt("what time is it in Paris?")).finished, TIMEOUT)
    assert result.success, result
    specs = {t.name: t for t in model.requests[0].tools}
    assert set(specs) == {"time_get_current_time", "time_convert_time"}
    schema: Any = specs["time_get_current_time"].parameters
    assert schema["required"] == ["timezone"] and "IANA" in schema["properties"]["timezone"]["description"]
    (part,) = calls((await session.state()).state, "time_get_current_time")
    assert part.state == "done", part
    output: Any = part.output
    assert output["timezone"] == "Europe/Paris" and str(output["datetime"]).startswith("20")  # a real answer


async def test_arguments_are_checked_against_the_schema_before_the_call(rt: LocalRuntime) -> None:
    model = ScriptedModel(
        [[{"tool": "time_get_current_time", "input": {"zone": 3}}], [{"text": "Sorry."}]], per_turn=True
    )
    session = rt.session("s-1", agent=Agent("a", "x", model, tools=[TIME]))
    assert (await asyncio.wait_for((await session.prompt("time?")).finished, TIMEOUT)).success
    (part,) = calls((await session.state()).state, "time_get_current_time")
    assert part.state == "error" and part.error is not None
    assert "'timezone' is a required property" in part.error and "Fix them and call again" in part.error


async def test_recovery_comes_from_annotations_and_an_override_wins() -> None:
    source = mcp_stdio(
        "time",
        sys.executable,
        ["-m", "mcp_server_time"],
        deny=["convert_time"],
        tools={"get_current_time": ToolOverride(recovery="report", needs_approval=True, timeout=5)},
    )
    plain = await TIME.list_tools({})
    assert {t.name: t.recovery for t in plain} == {"time_get_current_time": "rerun", "time_convert_time": "rerun"}
    (tool,) = await source.list_tools({})
    assert isinstance(tool, MCPTool)
    assert (tool.name, tool.recovery, tool.timeout) == ("get_current_time", "report", 5)
    assert tool.approval_prompt({"timezone": "UTC"}) is not None
    assert connection_for(source) is connection_for(TIME)  # one connection per server in a host
    await close_connections()


async def test_a_server_that_does_not_start_names_itself_and_its_command() -> None:
    broken = mcp_stdio("ghost", "/nonexistent/mcp-ghost", ["--serve"])
    with pytest.raises(ToolError) as caught:
        await broken.list_tools({})
    message = caught.value.message
    assert "MCP server 'ghost'" in message and "/nonexistent/mcp-ghost --serve" in message
    assert "failed to start" in message
    await close_connections()


async def test_the_step_fails_with_that_one_error(rt: LocalRuntime) -> None:
    broken = mcp_stdio("ghost", sys.executable, ["-c", "import sys; sys.exit(3)"])
    session = rt.session("s-1", agent=Agent("a", "x", ScriptedModel([[{"text": "never"}]]), tools=[broken]))
    result = await asyncio.wait_for((await session.prompt("hi")).finished, TIMEOUT)
    assert not result.success and result.error is not None
    assert "MCP server 'ghost'" in result.error and "failed to start" in result.error


async def test_headers_read_the_environment_where_the_host_connects(monkeypatch: pytest.MonkeyPatch) -> None:
    source = mcp_http("api", "http://127.0.0.1:9/mcp", headers={"Authorization": "Bearer ${TROUPE_TEST_TOKEN}"})
    assert source.transport.headers["Authorization"] == "Bearer ${TROUPE_TEST_TOKEN}"  # type: ignore[union-attr]
    with pytest.raises(ToolError, match="TROUPE_TEST_TOKEN"):
        await source.list_tools({})
    await close_connections()
    with pytest.raises(UsageError, match="url must start with http"):
        mcp_http("api", "ftp://example/mcp")


async def test_the_list_is_live_after_a_call_and_results_are_mapped(rt: LocalRuntime, tmp_path: Path) -> None:
    async with notes_server(tmp_path) as server:
        model = ScriptedModel(
            [
                [{"tool": "notes_add_note", "input": {"text": "buy milk"}}],
                [{"tool": "notes_read_notes", "input": {}}, {"tool": "notes_picture", "input": {}}],
                [{"tool": "notes_echo", "input": {"text": "oops"}, "id": "bad"}, {"finish": "tool-calls"}],
                [{"text": "Done."}],
            ]
        )
        notes = mcp_http("notes", server.url, prefix="notes_", deny=["charge"])
        session = rt.session("s-1", agent=Agent("a", "x", model, tools=[notes]))
        assert (await asyncio.wait_for((await session.prompt("note it")).finished, TIMEOUT)).success
        first = [t.name for t in model.requests[0].tools]
        second = [t.name for t in model.requests[1].tools]
        assert "notes_read_notes" not in first and "notes_charge" not in first
        assert "notes_read_notes" in second  # the server added it during the call: the next step sees it
        state = (await session.state()).state
        (picture,) = calls(state, "notes_picture")
        assert picture.output == [
            {"type": "text", "text": "a pixel"},
            {"type": "data", "mediaType": "image/png", "data": "iVBORw0KGgo="},
        ]
        assert "add_note call buy milk" in str(calls(state, "notes_read_notes")[0].output)
        assert server.lines("add_note") == ["add_note call buy milk"]


async def test_stop_cancels_the_call_on_the_server(rt: LocalRuntime, tmp_path: Path) -> None:
    async with notes_server(tmp_path) as server:
        model = ScriptedModel([[{"tool": "charge", "input": {"amount": 5}}], [{"text": "Stopped."}]])
        session = rt.session("s-1", agent=Agent("a", "x", model, tools=[mcp_http("shop", server.url)]))
        turn = await session.prompt("pay")
        await eventually(lambda: server.lines("charge start"), TIMEOUT, interval=0.02, what="the charge to start")
        await session.stop()
        result = await asyncio.wait_for(turn.finished, TIMEOUT)
        assert result.outcome == "stopped"
        await eventually(lambda: server.lines("charge cancelled"), TIMEOUT, interval=0.02, what="the cancellation")
        (part,) = calls((await session.state()).state, "charge")
        assert part.state == "error" and "interrupted" in (part.error or "")  # a report tool: never re-sent


async def test_a_server_that_dies_fails_the_call_in_flight_and_restarts_on_next_use(
    rt: LocalRuntime, tmp_path: Path
) -> None:
    log = tmp_path / "calls.log"
    source = mcp_stdio("notes", sys.executable, ["-m", "tests.fixtures.mcp_server", "--log", str(log)], cwd=str(ROOT))
    model = ScriptedModel(
        [[{"tool": "crash", "input": {}}], [{"tool": "echo", "input": {"text": "back"}}], [{"text": "ok"}]]
    )
    session = rt.session("s-1", agent=Agent("a", "x", model, tools=[source]))
    assert (await asyncio.wait_for((await session.prompt("go")).finished, TIMEOUT)).success
    state = (await session.state()).state
    (crash,) = calls(state, "crash")
    assert crash.state == "error" and "went away during the call to crash" in (crash.error or "")
    assert "may have partly run" in (crash.error or "")  # not read-only: reported, by its policy
    (echo,) = calls(state, "echo")
    assert echo.output == {"result": "back"}  # the next use started the server again
    assert connection_for(source).generation == 2
    assert restart_delay(0) == MCP_RESTART.delay(0) > 0  # the host's schedule (actors.schedules)


async def test_list_changed_between_calls_refreshes_the_list(tmp_path: Path) -> None:
    log, trigger = tmp_path / "calls.log", tmp_path / "trigger"
    source = mcp_stdio("notes", sys.executable, ["-m", "tests.fixtures.mcp_server", "--log", str(log)], cwd=str(ROOT))
    add_later = next(t for t in await source.list_tools({}) if t.name == "add_later")
    await add_later.invoke({"trigger": str(trigger)}, session_id="s", call_id="c", turn_id="t")
    names = [t.name for t in await source.list_tools({})]
    assert "late" not in names and [t.name for t in await source.list_tools({})] == names  # kept, not re-fetched
    trigger.touch()  # the server adds the tool now, while no call runs: only its notification can tell us

    async def listed() -> bool:
        return "late" in [t.name for t in await source.list_tools({})]

    await eventually(listed, TIMEOUT, interval=0.02, what="the late tool, after list_changed")
    await close_connections()


async def test_a_call_past_its_timeout_fails_and_is_cancelled_on_the_server(rt: LocalRuntime, tmp_path: Path) -> None:
    async with notes_server(tmp_path) as server:
        shop = mcp_http("shop", server.url, tools={"charge": ToolOverride(timeout=0.5)})
        model = ScriptedModel([[{"tool": "charge", "input": {"amount": 1}}], [{"text": "It timed out."}]])
        session = rt.session("s-1", agent=Agent("a", "x", model, tools=[shop]))
        assert (await asyncio.wait_for((await session.prompt("pay")).finished, TIMEOUT)).success
        (part,) = calls((await session.state()).state, "charge")
        assert part.state == "error" and "timed out after 0.5 s" in (part.error or "")
        await eventually(lambda: server.lines("charge cancelled"), TIMEOUT, interval=0.02, what="the cancellation")


def time_servers() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if "mcp_server_time" in " ".join(p.cmdline())]


async def test_one_process_per_server_for_a_hosts_sessions_ended_when_the_host_stops() -> None:
    assert time_servers() == []
    runtime = LocalRuntime()
    await runtime.start()
    try:
        model = ScriptedModel([[{"tool": "time_get_current_time", "input": {"timezone": "UTC"}}], [{"text": "ok"}]])
        for session_id in ("s-1", "s-2"):  # two sessions, one server process
            session = runtime.session(session_id, agent=Agent("a", "x", model, tools=[TIME]))
            assert (await asyncio.wait_for((await session.prompt("time?")).finished, TIMEOUT)).success
        assert len(time_servers()) == 1
    finally:
        await runtime.close()
    await eventually(lambda: time_servers() == [], TIMEOUT, what="the time server to exit with its host")


async def test_the_servers_progress_shows_on_the_running_call(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    source = mcp_stdio("notes", sys.executable, ["-m", "tests.fixtures.mcp_server", "--log", str(log)], cwd=str(ROOT))
    steps = next(t for t in await source.list_tools({}) if t.name == "steps")
    shown: list[Any] = []

    async def emit(output: Any) -> None:
        shown.append(output)

    assert await steps.invoke({"n": 2}, session_id="s", call_id="c", turn_id="t", emit=emit) == {"result": "all steps"}
    assert shown == [
        {"progress": 1, "total": 2, "message": "step 1"},
        {"progress": 2, "total": 2, "message": "step 2"},
    ]
    await close_connections()


def test_server_tool_names_become_names_a_model_can_call() -> None:
    long = "x" * 80
    names = model_names("fs_", ["read", "files.read", "files/read", "9lives", long])
    assert names["read"] == "fs_read"
    assert names["9lives"] == "fs_9lives"
    # "files.read" and "files/read" would both be fs_files_read: each gets its own hash instead.
    assert names["files.read"] != names["files/read"]
    assert all(n.startswith("fs_files_read_") for n in (names["files.read"], names["files/read"]))
    assert len(names[long]) == 64 and names[long].startswith("fs_xxx")
    assert model_names("", ["9lives", "a.b"]) == {"9lives": "_9lives", "a.b": "a_b"}
    assert model_names("fs_", ["files.read", "files/read"]) == {k: names[k] for k in ("files.read", "files/read")}
    assert all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]{0,63}", n) for n in names.values())
