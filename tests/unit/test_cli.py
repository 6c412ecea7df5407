"""The ``troupe`` command line, with no Ray: LocalRuntime sessions, a SQLite store in a tmp dir."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog
from rich.console import Console
from rich.text import Text
from typer.testing import CliRunner

from actors.local import LocalRuntime
from orchestrator.core._pvec import PVec
from orchestrator.core.events import Event
from orchestrator.core.mutations import ClientView
from orchestrator.core.parts import AgentMessage, NestedRun, ReasoningPart, TextPart, ToolPart
from orchestrator.core.state import SessionError
from orchestrator.core.stream import AgentStreamPart, StepFinish, TextDelta
from orchestrator.models.base import CancelSignal, ModelRequest
from orchestrator.run.agent import Agent
from orchestrator.store import open_store
from orchestrator.surfaces.cli.bench import load_actors_bench, parse_sizes
from orchestrator.surfaces.cli.chat import Interrupts, chat_loop
from orchestrator.surfaces.cli.common import CommandFailed, configure_logging, ray_temp_dir
from orchestrator.surfaces.cli.main import app
from orchestrator.surfaces.cli.render import event_summary, render_conversation, render_tool
from orchestrator.surfaces.cli.run import DEFAULT_PROMPTS
from orchestrator.surfaces.cli.serve import serve_config, server_runner
from orchestrator.surfaces.cli.sessions import follow_events
from orchestrator.surfaces.config import RuntimeConfig, load_agent
from orchestrator.surfaces.config.runtime import merge_keys
from orchestrator.testing import ScriptedModel
from tools import tool

REPO = Path(__file__).resolve().parents[2]
SHOP = REPO / "configs" / "shop.yaml"
BENCH = REPO / "configs" / "bench-shop.yaml"
runner = CliRunner()


@pytest.fixture(autouse=True)
def _keep_structlog() -> Iterator[None]:
    """The CLI configures structlog for the process: put the configuration back after each test."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


def invoke(*args: str) -> Any:
    return runner.invoke(app, list(args))


def record(**options: Any) -> Console:
    """A console that keeps what it prints (read back with ``export_text``) and writes nowhere."""
    return Console(record=True, width=100, file=io.StringIO(), **options)


# -- fixtures: a populated store ------------------------------------------------------------------


@pytest.fixture
async def shop_store(tmp_path: Path) -> str:
    """A SQLite store holding one finished shop session ``s-shop`` (and its sub-agent's)."""
    url = f"sqlite:///{tmp_path / 'x.db'}"
    agent = load_agent(BENCH)
    async with LocalRuntime(store=url) as runtime:
        turn = await runtime.session("s-shop", agent=agent).prompt("two mugs")
        result = await turn.finished
        assert result.success
    return url


def stored_log(url: str, session_id: str) -> list[Event]:
    """The session's log as stored: how many ``ai.stream`` batches a step wrote depends on flush
    timing, so a test takes counts and positions from here, never as constants."""

    async def read() -> list[Event]:
        store = open_store(url)
        try:
            return await store.read(session_id)
        finally:
            await store.close()

    return asyncio.run(read())


# -- help, version, errors -------------------------------------------------------------------------

COMMANDS = [
    [],
    ["run"],
    ["chat"],
    ["serve"],
    ["sessions"],
    ["sessions", "list"],
    ["sessions", "show"],
    ["sessions", "tail"],
    ["sessions", "replay"],
    ["sessions", "fork"],
    ["bench"],
    ["bench", "reducer"],
    ["bench", "fold"],
    ["bench", "long"],
    ["bench", "store"],
    ["bench", "shop"],
    ["bench", "actors"],
    ["bench", "data"],
    ["bench", "soak"],
    ["bench", "idle"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "troupe")
def test_help(command: list[str]) -> None:
    result = invoke(*command, "--help")
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_help_imports_nothing_heavy() -> None:
    code = (
        "import sys, orchestrator.surfaces.cli.main; "
        "heavy = sorted(m for m in ('ray', 'actors', 'fastapi', 'uvicorn') if m in sys.modules); "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.output.startswith("troupe ")


def test_missing_config_is_one_line(tmp_path: Path) -> None:
    result = invoke("run", "--local", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "config file not found" in lines[0] and "nope.yaml" in lines[0]


def test_bad_config_names_file_and_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("agents:\n  shop:\n    model: {scripted: {steps: [[{text: hi}]]}}\n    colour: red\n")
    result = invoke("run", "--local", str(bad))
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "bad.yaml" in lines[0] and "colour" in lines[0]


def test_bad_store_url_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke("run", "--local", str(SHOP), "--store", "bogus://x", "-p", "hi")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "bogus://x" in lines[0]


# -- run ------------------------------------------------------------------------------------------


def test_run_local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke("run", "--local", str(SHOP), "--session-id", "s-1")  # the demo's three default turns
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert all(prompt in out for prompt in DEFAULT_PROMPTS)
    assert "welcome to the Troupe shop" in out and "Total: $9.98" in out
    assert '⚙ add_to_cart {"slug": "stoneware-mug", "qty": 2} → Added.  ✓ done' in out
    assert "researcher" in out and '⚙ lookup_price {"slug": "stoneware-mug"} → 4.99  ✓ done' in out
    assert "| Café Supply Co. | $5.75 | $3.95    | $9.70 |" in out  # the researcher's table, nested
    assert "turn results" in out and "completed" in out
    assert (tmp_path / "troupe.db").is_file()  # the embedded default store, in the working folder
    listed = invoke("sessions", "list")
    assert "s-1" in listed.stdout and "s-1/" in listed.stdout


def test_run_local_many_sessions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke("run", "--local", str(BENCH), "--sessions", "3", "--session-id", "load")
    assert result.exit_code == 0, result.output
    assert "summary" in result.stdout
    assert "9/9" in result.stdout  # 3 sessions x the shop's 3 prompts
    for header in ("sessions", "wall time", "sessions/s", "failures"):
        assert header in result.stdout
    listed = invoke("sessions", "list", "--prefix", "load-")
    assert all(f"load-{i}" in listed.stdout for i in (1, 2, 3))


def test_run_fails_with_exit_code_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "broken.yaml"
    config.write_text("agents:\n  sad:\n    model: {scripted: {steps: [[{error: The model is down}]]}}\n")
    result = invoke("run", "--local", str(config), "-p", "hi")
    assert result.exit_code == 1, result.output
    assert "failed" in result.stdout and "The model is down" in result.stdout


def test_the_demo_is_not_the_benchmark_workload() -> None:
    from actors.bench.shop import PROMPTS

    assert DEFAULT_PROMPTS != PROMPTS  # troupe run shows the demo; troupe bench shop keeps its own turns


# -- sessions ---------------------------------------------------------------------------------------


def test_sessions_list(shop_store: str) -> None:
    from orchestrator.core.events import Event
    from orchestrator.store import open_store

    async def internal() -> None:  # a log of Troupe's own (what the HTTP API keeps per API key)
        store = open_store(shop_store)
        await store.append("troupe:keys:abc", [Event("troupe:owner:s-x", "troupe.owner", {})])
        await store.close()

    asyncio.run(internal())
    result = invoke("sessions", "list", "--store", shop_store)
    assert result.exit_code == 0, result.output
    assert "s-shop " in result.stdout and "s-shop/call-" in result.stdout and "troupe:" not in result.stdout
    assert f" {len(stored_log(shop_store, 's-shop'))} " in result.stdout  # the session's events
    empty = invoke("sessions", "list", "--store", shop_store, "--prefix", "zzz")
    assert "no sessions" in empty.stdout


def test_sessions_show(shop_store: str) -> None:
    result = invoke("sessions", "show", "s-shop", "--store", shop_store)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "session s-shop" in out and f"{len(stored_log(shop_store, 's-shop'))} events" in out
    assert "two mugs" in out and "✓ done" in out
    task = out.index("compare mug prices", out.index("delegate_to_researcher"))
    assert out.index("lookup_price") > task  # the nested run is drawn under its delegate call


def test_sessions_replay_through(shop_store: str) -> None:
    through = next(e.index for e in stored_log(shop_store, "s-shop") if e.type == "ai.tool.finished")
    result = invoke("sessions", "replay", "s-shop", "--through", str(through), "--store", shop_store)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "ai.input" in out and "user: two mugs" in out and "ai.tool.finished" in out
    assert f"through event {through}" in out
    assert "add_to_cart" in out and "C000" not in out  # folded only up to the first tool's result
    assert "ai.turn.finished" not in out


def test_sessions_tail_no_follow(shop_store: str) -> None:
    result = invoke("sessions", "tail", "s-shop", "--store", shop_store, "-n", "2", "--no-follow")
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2
    assert "ai.turn.finished" in lines[-1] and "completed" in lines[-1]


def test_sessions_fork(shop_store: str) -> None:
    async def last_index() -> int:
        store = open_store(shop_store)
        try:
            return await store.last_index("s-shop")
        finally:
            await store.close()

    async def first_tool_result() -> int:  # where it lands depends on how the stream was batched: read it
        store = open_store(shop_store)
        try:
            return next(e.index for e in await store.read("s-shop") if e.type == "ai.tool.finished")
        finally:
            await store.close()

    last = asyncio.run(last_index())
    result = invoke("sessions", "fork", "s-shop", "--at", str(last), "--id", "f-1", "--store", shop_store)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"forked s-shop at {last} into f-1, with 1 sub-agent session"
    shown, source = (
        invoke("sessions", "show", "f-1", "--store", shop_store),
        invoke("sessions", "show", "s-shop", "--store", shop_store),
    )
    assert shown.stdout.replace("f-1", "s-shop") == source.stdout  # the same conversation, sub-agent included
    listed = invoke("sessions", "list", "--store", shop_store, "--prefix", "f-1")
    assert "f-1 " in listed.stdout and "f-1/call-" in listed.stdout
    at = asyncio.run(first_tool_result())
    mid = invoke("sessions", "fork", "s-shop", "--at", str(at), "--store", shop_store)
    assert mid.exit_code == 0 and mid.stdout.startswith(f"forked s-shop at {at} into s-")
    replayed = invoke("sessions", "replay", mid.stdout.split()[-1], "--store", shop_store)
    assert "ai.tool.finished" in replayed.stdout and "ai.turn.finished" not in replayed.stdout


@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (["--at", "999", "--id", "f-2"], "its log ends at"),
        (["--at", "-1", "--id", "f-2"], "pass an index from 0"),
        (["--at", "3", "--id", "s-shop"], "into itself"),
        (["--at", "3", "--id", "a/b"], "without '/'"),
    ],
)
def test_sessions_fork_refuses_a_bad_fork_and_writes_nothing(shop_store: str, args: list[str], phrase: str) -> None:
    before = invoke("sessions", "list", "--store", shop_store).stdout
    result = invoke("sessions", "fork", "s-shop", *args, "--store", shop_store)
    assert result.exit_code == 2, result.output
    assert phrase in result.stderr
    assert invoke("sessions", "list", "--store", shop_store).stdout == before
    missing = invoke("sessions", "fork", "nope", "--at", "0", "--store", shop_store)
    assert missing.exit_code == 1 and "no session 'nope'" in missing.stderr


def test_sessions_errors(shop_store: str, tmp_path: Path) -> None:
    missing = invoke("sessions", "show", "nope", "--store", shop_store)
    assert missing.exit_code == 1
    assert "no session 'nope'" in missing.stderr and len(missing.stderr.strip().splitlines()) == 1
    no_file = invoke("sessions", "list", "--store", f"sqlite:///{tmp_path / 'absent.db'}")
    assert no_file.exit_code == 1 and "no store at" in no_file.stderr
    assert not (tmp_path / "absent.db").exists()  # reading never creates a store


async def test_follow_events_sees_appends(shop_store: str) -> None:
    store = open_store(shop_store)
    try:
        last = await store.last_index("s-shop")
        events = follow_events(store, "s-shop", after=last - 1, interval=0.01)
        first = await asyncio.wait_for(anext(events), 5)
        assert first.index == last
        await store.append("s-shop", [Event("e-note", "test.note", {"text": "hello"})])
        appended = await asyncio.wait_for(anext(events), 5)
        assert (appended.index, appended.type) == (last + 1, "test.note")
        await events.aclose()
    finally:
        await store.close()


def test_log_format_json(shop_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    result = invoke("--log-format", "json", "--log-level", "info", "sessions", "list", "--store", shop_store)
    assert result.exit_code == 0, result.output
    configure_logging("json", "info")
    structlog.get_logger().info("cli_test", answer=42)
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert line["event"] == "cli_test" and line["answer"] == 42 and line["level"] == "info"


# -- chat -----------------------------------------------------------------------------------------


async def test_chat_loop_scripted_input() -> None:
    agent = load_agent(BENCH)
    console = record()
    async with LocalRuntime() as runtime:
        session = runtime.session("chat-1", agent=agent)
        code = await chat_loop(session, ["hello", "/queue", "/quit", "never sent"], console, assistant="shop")
        messages = await session.messages()
    assert code == 0
    out = console.export_text()
    assert "hello" in out and "A000A001" in out and "✓ done" in out
    assert "nothing queued" in out
    assert [m.role for m in messages] == ["user", "assistant"]  # nothing after /quit was sent


async def test_chat_loop_reset_starts_a_new_conversation() -> None:
    console = record()
    async with LocalRuntime() as runtime:
        session = runtime.session("chat-reset", agent=load_agent(BENCH))
        assert await chat_loop(session, ["hello", "/reset", "hello again", "/quit"], console, assistant="shop") == 0
        messages = await session.messages()
        events = await runtime.store.read("chat-reset")
    assert "new conversation" in console.export_text()
    assert [m.text for m in messages if m.role == "user"] == ["hello again"]
    assert [e.type for e in events].count("ai.session.reset") == 1


async def test_chat_loop_ends_with_its_input() -> None:
    console = record()
    async with LocalRuntime() as runtime:
        session = runtime.session("chat-eof", agent=BUYER)
        assert await chat_loop(session, ["a mug please", "/deny too pricey"], console) == 0
        await chat_loop(session, ["/queue"], console)  # again: the history is drawn first, nothing re-runs
        messages = await session.messages()
    out = console.export_text()
    assert "needs approval" in out and "denied buy" in out
    assert "✗ error: The user denied this call. Reason: too pricey" in out
    assert "turn t1" not in out  # the turn completed: no outcome line
    assert out.index("so far") < out.rindex("Bought it.") < out.index("nothing queued")
    assert [m.role for m in messages] == ["user", "assistant"]


@tool(needs_approval=True)
def buy(item: str) -> str:
    """Buy an item (asks first)."""
    return f"bought {item}"


BUYER = Agent(
    "buyer",
    "Buy things.",
    ScriptedModel([[{"tool": "buy", "input": {"item": "mug"}}], [{"text": "Bought it."}]], per_turn=True),
    tools=[buy],
)


async def test_chat_loop_approval() -> None:
    console = record()
    async with LocalRuntime() as runtime:
        session = runtime.session("chat-buy", agent=BUYER)
        code = await chat_loop(session, ["a mug please", "/approve", "/help", "/quit"], console, assistant="buyer")
        snapshot = await session.state()
    assert code == 0
    out = console.export_text()
    assert "? awaiting approval" in out and "needs approval" in out and "/approve" in out
    assert "approved buy" in out and '⚙ buy {"item": "mug"} → bought mug  ✓ done' in out
    assert "Bought it." in out and "/steer TEXT" in out
    assert [i.status for i in snapshot.state.interactions.values()] == ["approved"]


CLERK = Agent(
    "clerk",
    "Buy things.",
    ScriptedModel([[{"tool": "buy", "input": {"item": "mug"}}], [{"text": "Bought."}]], per_turn=True),
    tools=[buy],
    description="Buys things.",
)
BOSS = Agent(
    "boss",
    "Delegate.",
    ScriptedModel(
        [[{"tool": "delegate_to_clerk", "input": {"task": "buy a mug"}}], [{"text": "Done."}]], per_turn=True
    ),
    agents=[CLERK],
)


async def test_chat_loop_answers_a_sub_agent_approval() -> None:
    console = record()
    async with LocalRuntime() as runtime:
        session = runtime.session("chat-boss", agent=BOSS)
        await chat_loop(session, ["go", "/approve", "/stop", "/quit"], console, assistant="boss")
        info = await session.info()
    out = console.export_text()
    assert "clerk" in out and "? awaiting approval" in out  # drawn nested under the delegate call
    assert "buy in sub-agent session chat-boss/" in out and "/approve" in out
    assert "approved buy" in out and "Done." in out
    assert "no turn is running" in out
    assert info["lastTurn"]["outcome"] == "completed"


class GateModel:
    """Streams a little, then waits for a gate that never opens: the turn runs until it is stopped."""

    reached: asyncio.Event | None = None

    @property
    def name(self) -> str:
        return "gate"

    async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        yield TextDelta("Working on it")
        assert GateModel.reached is not None
        GateModel.reached.set()
        await signal.wait()
        yield StepFinish({}, "stop")


SLOW = Agent("slow", "Take your time.", GateModel())


async def test_chat_loop_ctrl_c_stops_the_turn() -> None:
    GateModel.reached = asyncio.Event()
    console = record()
    interrupts = Interrupts(window=0.0)  # presses never count as double

    async def lines() -> AsyncIterator[str]:
        yield "go"
        yield "/quit"

    def streamed(view: ClientView) -> bool:
        return any("Working on it" in m.text for m in view.state.messages)

    async with LocalRuntime() as runtime:
        session = runtime.session("chat-stop", agent=SLOW)
        watcher = await session.live()

        async def press() -> None:  # Ctrl-C once the text has reached a subscriber
            await watcher.wait_for(streamed, timeout=10)
            interrupts.hit()

        pressing = asyncio.ensure_future(press())
        code = await chat_loop(session, lines(), console, interrupts=interrupts)
        await pressing
        await watcher.close()
        info = await session.info()
    assert code == 0
    out = console.export_text()
    assert "Working on it" in out and "stopping the turn" in out and "stopped" in out
    assert info["lastTurn"]["outcome"] == "stopped"


async def test_chat_loop_double_ctrl_c_quits() -> None:
    GateModel.reached = asyncio.Event()
    clock = iter([0.0, 0.5])
    interrupts = Interrupts(window=1.0, clock=lambda: next(clock))

    async def press_twice() -> None:
        assert GateModel.reached is not None
        await GateModel.reached.wait()
        interrupts.hit()
        interrupts.hit()

    async with LocalRuntime() as runtime:
        session = runtime.session("chat-quit", agent=SLOW)
        pressing = asyncio.ensure_future(press_twice())
        code = await chat_loop(session, ["go", "never sent"], record(), interrupts=interrupts)
        await pressing
        await session.stop()
        messages = await session.messages()
    assert code == 0
    assert [m.role for m in messages] == ["user", "assistant"]


# -- serve, bench, helpers ---------------------------------------------------------------------------


async def test_serve_config_builds_the_app() -> None:
    served: dict[str, Any] = {}

    async def server(app: Any, *, host: str, port: int) -> None:
        served.update(app=app, host=host, port=port)

    console = record()
    await serve_config(
        BUYER,
        RuntimeConfig(),
        host="127.0.0.1",
        port=8123,
        api_keys=("k-1",),
        store="memory://",
        local=True,
        console=console,
        server=server,
    )
    from fastapi import FastAPI

    assert isinstance(served["app"], FastAPI) and (served["host"], served["port"]) == ("127.0.0.1", 8123)
    out = console.export_text()
    assert "serving buyer on http://127.0.0.1:8123" in out and "1 API key" in out
    assert "the web chat at /" in out
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=served["app"]), base_url="http://test") as http:
        assert (await http.get("/")).headers["content-type"].startswith("text/html")


def test_the_server_runs_on_uvloop() -> None:
    async def kind() -> str:
        return type(asyncio.get_running_loop()).__module__

    with server_runner() as runner:
        assert runner.run(kind()).startswith("uvloop")  # a dependency (but on Windows): its loop is C


def test_merge_keys() -> None:
    assert merge_keys(["a", "b"], ("b", "c"), " d, ,a ", None) == ("a", "b", "c", "d")


def test_ray_temp_dir_stays_short(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TROUPE_RAY_TEMP_DIR", raising=False)
    deep = tmp_path / ("x" * 60)
    deep.mkdir()
    path, remove = ray_temp_dir(deep)
    assert remove and len(str(path)) < 40 and path.is_dir()
    path.rmdir()
    monkeypatch.setenv("TROUPE_RAY_TEMP_DIR", str(tmp_path / "ray"))
    assert ray_temp_dir(deep) == ((tmp_path / "ray").resolve(), False)


def test_bench_reducer(tmp_path: Path) -> None:
    out = tmp_path / "reducer.json"
    result = invoke("bench", "reducer", "--deltas", "2000", "--repeats", "1", "--json", str(out))
    assert result.exit_code == 0, result.output
    assert "text-deltas/s" in result.stdout
    figures = json.loads(out.read_text())
    assert len(figures) == 4 and all(f["deltas_per_s"] > 0 for f in figures)


def test_bench_fold(tmp_path: Path) -> None:
    out = tmp_path / "fold.json"
    result = invoke("bench", "fold", "--sessions", "2", "--repeats", "1", "--json", str(out))
    assert result.exit_code == 0, result.output
    assert "events/s" in result.stdout
    figures = json.loads(out.read_text())
    # Two sessions of three turns: each log holds its inputs, steps, tools and nested batches.
    assert figures["sessions"] == 2 and figures["events"] >= 2 * 3 * 15
    assert figures["events_per_s"] > 0 and figures["us_per_event"] > 0


def test_bench_long(tmp_path: Path) -> None:
    out = tmp_path / "long.json"
    result = invoke("bench", "long", "--turns", "6", "--window", "3", "--sessions", "1", "--json", str(out))
    assert result.exit_code == 0, result.output
    assert "CPU ms/turn" in result.stdout and "growth, last window / first" in result.stdout
    figures = json.loads(out.read_text())
    assert figures["turns"] == 6 and len(figures["ms_per_turn"]) == 2 and figures["messages"] == 12
    assert len(figures["stall_ms"]) == 2
    assert figures["growth"] == round(figures["ms_per_turn"][1] / figures["ms_per_turn"][0], 3)


def test_bench_actors_hook_without_its_module() -> None:
    with pytest.raises(CommandFailed, match="lacks yet"):
        load_actors_bench("actors.bench.no_such_module")


def test_parse_sizes() -> None:
    import typer

    assert parse_sizes("1,10, 100") == (1, 10, 100)
    for bad in ("", "1,x", "0,5"):
        with pytest.raises(typer.BadParameter):
            parse_sizes(bad)


# -- rendering ----------------------------------------------------------------------------------------


def draw(renderable: Any) -> str:
    console = record()
    console.print(renderable)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines())


TASK = {"task": "compare mug prices"}


def conversation() -> list[AgentMessage]:
    nested = NestedRun(
        PVec(
            [
                AgentMessage("r-u", "user", (TextPart("r-u:0", "compare mug prices"),)),
                AgentMessage(
                    "r-a",
                    "assistant",
                    (
                        ToolPart("p-1", "lookup_price", {"slug": "mug"}, "done", output="4.99"),
                        TextPart("r-a:1", "$4.99"),
                    ),
                ),
            ]
        ),
        status="idle",
    )
    return [
        AgentMessage("u-1", "user", (TextPart("u-1:0", "Add two mugs"),)),
        AgentMessage(
            "a-1",
            "assistant",
            (
                ReasoningPart("a-1:0", "The user wants mugs."),
                TextPart("a-1:1", "Adding them now."),
                ToolPart("c-1", "add_to_cart", {"slug": "mug", "qty": 2}, "done", output="Added."),
                ToolPart(
                    "c-2",
                    "delegate_to_researcher",
                    {"task": "compare mug prices"},
                    "done",
                    output="$4.99",
                    agent=nested,
                ),
                ToolPart("c-3", "checkout", {}, "error", error="the warehouse is on fire"),
                ToolPart("c-4", "buy", {"item": "mug"}, "awaiting-confirmation", prompt="Buy a mug for $4.99?"),
                ToolPart("c-5", "ship", {}, "cancelled", error="stopped"),
                ToolPart("c-6", "wrap", {"paper": "red"}, "running"),
            ),
        ),
    ]


def test_render_conversation_layout() -> None:
    text = draw(render_conversation(conversation(), error=SessionError("The model is over capacity", "rate_limited")))
    lines = text.splitlines()
    assert lines[0] == "user" and lines[1] == "  Add two mugs" and lines[2] == "assistant"
    assert "  The user wants mugs." in lines and "  Adding them now." in lines
    assert '  ⚙ add_to_cart {"slug": "mug", "qty": 2} → Added.  ✓ done' in lines
    assert '  ⚙ delegate_to_researcher {"task": "compare mug prices"} → $4.99  ✓ done' in lines
    # The sub-agent's run is indented under its delegate call, with its own headings.
    assert "      task" in lines and "        compare mug prices" in lines and "      researcher" in lines
    assert '        ⚙ lookup_price {"slug": "mug"} → 4.99  ✓ done' in lines
    assert "  ⚙ checkout {}  ✗ error: the warehouse is on fire" in lines
    assert '  ⚙ buy {"item": "mug"}  ? awaiting approval' in lines and "    ⚠ Buy a mug for $4.99?" in lines
    assert "  ⚙ ship {}  ⊘ cancelled: stopped" in lines
    assert '  ⚙ wrap {"paper": "red"}  ⋯ running' in lines
    assert text.endswith("✗ The model is over capacity (rate_limited)")


def test_render_styles() -> None:
    def styles(part: ToolPart) -> set[str]:
        line = render_tool(part)[0]
        assert isinstance(line, Text)
        return {str(span.style) for span in line.spans} | {str(line.style)}

    assert any("red" in s for s in styles(ToolPart("c", "x", {}, "error", error="boom")))
    assert any("yellow" in s for s in styles(ToolPart("c", "x", {}, "awaiting-confirmation")))
    assert any("green" in s for s in styles(ToolPart("c", "x", {}, "done", output="ok")))
    reasoning = render_conversation([AgentMessage("a", "assistant", (ReasoningPart("a:0", "hmm"),))])
    console = record(force_terminal=True, color_system="standard")
    console.print(reasoning)
    assert "\x1b[2;3mhmm" in console.export_text(styles=True)  # dim italic


def test_render_streaming_tool_input_and_long_output() -> None:
    streaming = ToolPart("c", "search", state="running").replace(input_text='{"query": "blue mu')
    assert draw(render_tool(streaming)[0]) == '⚙ search {"query": "blue mu  ⋯ running'
    long = ToolPart("c", "dump", {}, "done", output="x" * 500)
    line = draw(render_tool(long, max_output=20)[0])
    assert line == "⚙ dump {} → " + "x" * 19 + "…  ✓ done"


def test_event_summaries() -> None:
    assert event_summary(Event("i", "ai.input", {"role": "user", "text": "hi", "generate": True})) == "user: hi"
    stream = Event(
        "s",
        "ai.stream",
        {
            "stepId": "t1.1",
            "parts": [
                {"type": "text-delta", "delta": "Adding "},
                {"type": "text-delta", "delta": "mugs."},
                {"type": "tool-call", "id": "c-1", "name": "add_to_cart", "input": {"qty": 2}},
            ],
        },
    )
    assert event_summary(stream) == 't1.1: text "Adding mugs." (12 chars), tool-call add_to_cart {"qty": 2}'
    finished = Event("f", "ai.turn.finished", {"turnId": "t1", "outcome": "failed", "error": "boom"})
    assert event_summary(finished) == "turn t1 failed: boom"
    assert event_summary(Event("n", "note.added", {"text": "x" * 300}), limit=30).endswith("…")


def test_run_stops_a_turn_that_needs_approval(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "buyer.yaml"
    config.write_text(
        "agents:\n"
        "  buyer:\n"
        "    tools: ['tests.unit.test_cli:buy']\n"
        "    model: {scripted: {per_turn: true, steps: [[{tool: buy, input: {item: mug}}], [{text: Bought.}]]}}\n"
    )
    result = invoke("run", "--local", str(config), "-p", "a mug", "--session-id", "b-1")
    assert result.exit_code == 1, result.output
    assert "needed approval" in result.stdout and "troupe chat --session-id b-1" in result.stdout
    assert "stopped" in result.stdout and "⊘ cancelled" in result.stdout
