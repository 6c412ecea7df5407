"""The Ray Data door: one durable session per row, bounded in flight, idempotent by row key.

Every row's agent charges a card (a ``report`` tool that appends the session id to a ledger file)
and then answers; the ledger counts side effects across crashes and reruns.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, cast

import pytest
import ray
from ray import cloudpickle

from actors.data import run_sessions
from actors.runtime import Runtime
from orchestrator.core import event_types as ai
from orchestrator.core.errors import ModelError
from orchestrator.core.events import Event
from orchestrator.core.ids import row_input_id
from orchestrator.core.stream import AgentStreamPart, StepFinish, TextDelta, ToolCall
from orchestrator.models.base import CancelSignal, ModelRequest
from orchestrator.run.agent import Agent
from orchestrator.store import open_store
from orchestrator.testing import eventually
from tools import ToolContext, tool

from .helpers import Gate, count_lines, gated_model, until_stored

cast(Any, cloudpickle).register_pickle_by_value(sys.modules[__name__])  # the workers need not import tests/

TIMEOUT = 120
KW: dict[str, Any] = {"concurrency": 1, "num_cpus": 0.25}  # one small actor: this machine has 2 cores


class RowModel:
    """Step 0 calls ``charge``; step 1 answers ``charged <prompt>``. A prompt with "fail" fails the turn."""

    name = "rows"

    async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        prompt = next(m for m in request.messages if m.role == "user").text
        if "fail" in prompt:
            raise ModelError("the card reader is offline", "network")
        if request.step_index == 0:
            yield ToolCall(f"call-{request.session_id}", "charge", {})
            yield StepFinish(None, "tool-calls")
        else:
            yield TextDelta(f"charged {prompt}")
            yield StepFinish({"inputTokens": 3, "outputTokens": 2}, "stop")


def charging_agent(ledger: Path, *, crash: str | None = None, store: str = "", gate: Any = None) -> Agent:
    """The rows' agent; its report tool appends the session id to ``ledger``.

    ``crash``: a marker file; the first charge of the whole test (once its start is stored) kills
    its host process. ``gate``: every other charge waits there until the test opens it.
    """

    @tool(recovery="report")
    async def charge(context: ToolContext) -> str:
        """Charge the card."""
        with open(ledger, "a") as f:  # noqa: ASYNC230 - on disk before anything can crash
            f.write(f"{context.session_id}\n")
        if crash is not None and count_lines(Path(crash)) == 0:
            with open(crash, "a") as f:  # noqa: ASYNC230
                f.write(f"{os.getpid()}\n")

            def started(log: list[Event]) -> bool:
                return any(e.type == ai.TOOL_STARTED for e in log)

            await until_stored(store, context.session_id, started, "the start of charge")
            os._exit(1)
        if gate is not None:
            await gate.arrive.remote()
        return "charged"

    return Agent("charger", "Charge, then answer.", RowModel(), tools=[charge])


def ledger_counts(ledger: Path) -> collections.Counter[str]:
    return collections.Counter(ledger.read_text().split()) if ledger.exists() else collections.Counter()


async def session_logs(store_url: str, session_ids: list[str]) -> dict[str, list[Event]]:
    """The sessions' logs, read with a store connection of our own."""
    store = open_store(store_url)
    try:
        return {sid: await store.read(sid) for sid in session_ids}
    finally:
        await store.close()


async def interrupted_sessions(store_url: str, session_ids: list[str]) -> set[str]:
    """The sessions whose log holds a tool call that was cut short (``interrupted``)."""

    def code(event: Event) -> Any:
        data = event.data
        return data.get("code") if isinstance(data, Mapping) else getattr(data, "code", None)

    logs = await session_logs(store_url, session_ids)
    return {sid for sid, log in logs.items() if any(e.type == ai.TOOL_FAILED and code(e) == "interrupted" for e in log)}


def rows(n: int, prefix: str = "r") -> list[dict[str, Any]]:
    return [{"id": f"{prefix}{i}", "question": f"q{i}"} for i in range(n)]


@pytest.fixture
async def data_runtime(store_url: str) -> AsyncIterator[Runtime]:
    rt = Runtime(store=store_url, namespace=f"t-{uuid.uuid4().hex[:8]}", hosts_per_node=2)
    await rt.start()
    try:
        yield rt
    finally:
        await rt.close()


def take(ds: Any) -> list[dict[str, Any]]:
    taken: list[dict[str, Any]] = ds.take_all()
    return sorted(taken, key=lambda r: (r["key"], r["session_id"]))


async def test_one_session_per_row_then_a_rerun_runs_nothing(data_runtime: Runtime, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    agent = charging_agent(ledger)
    items = [*rows(5), {"id": "bad", "question": "please fail"}, {"id": "", "question": "no key"}]
    ds = ray.data.from_items(items)
    results = run_sessions(ds, runtime=data_runtime, agent=agent, prompt="question", key="id", prefix="p-", **KW)
    first = await asyncio.to_thread(take, results)
    assert [r["key"] for r in first] == ["", "bad", "r0", "r1", "r2", "r3", "r4"]
    done = {r["key"]: r for r in first}
    for i in range(5):
        row = done[f"r{i}"]
        assert row["session_id"] == f"p-r{i}" and row["text"] == f"charged q{i}"
        assert row["success"] is True and row["outcome"] == "completed" and row["error"] is None
        assert row["usage"] == {"input_tokens": 3, "output_tokens": 2} and row["index"] > 0
    assert done["bad"]["success"] is False and done["bad"]["outcome"] == "failed"
    assert "card reader is offline" in done["bad"]["error"]
    assert done[""]["success"] is False and done[""]["outcome"] == "error" and "key is empty" in done[""]["error"]
    assert ledger_counts(ledger) == {f"p-r{i}": 1 for i in range(5)}

    # The same pipeline again: every answered row comes from the store; nothing is appended or run.
    store = open_store(data_runtime.store_url)
    try:
        indexes = {r["session_id"]: await store.last_index(r["session_id"]) for r in first if r["session_id"]}
        again = await asyncio.to_thread(take, results)
        assert again == first
        assert {s: await store.last_index(s) for s in indexes} == indexes
    finally:
        await store.close()
    assert ledger_counts(ledger) == {f"p-r{i}": 1 for i in range(5)}


async def test_the_final_messages_as_json_and_failing_the_job_when_asked(data_runtime: Runtime, tmp_path: Path) -> None:
    agent = charging_agent(tmp_path / "ledger")
    ds = ray.data.from_items(rows(2))
    results = run_sessions(ds, runtime=data_runtime, agent=agent, prompt="question", key="id", messages=True, **KW)
    taken = await asyncio.to_thread(take, results)
    messages = json.loads(taken[0]["messages"])
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[0]["parts"][0]["text"] == "q0"

    failing = ray.data.from_items([{"id": "x", "question": "fail"}])
    strict = run_sessions(
        failing, runtime=data_runtime, agent=agent, prompt="question", key="id", on_error="raise", **KW
    )
    with pytest.raises(Exception, match="card reader is offline"):
        await asyncio.to_thread(take, strict)


@ray.remote(num_cpus=0)
class InFlight:
    """Counts sessions in their model step at once, across hosts."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0

    def enter(self) -> None:
        self.now += 1
        self.peak = max(self.peak, self.now)

    def leave(self) -> None:
        self.now -= 1

    def get_peak(self) -> int:
        return self.peak


class CountingModel:
    """Answers after a short wait, counting how many sessions are answering at once."""

    name = "counting"

    def __init__(self, tracker: Any) -> None:
        self.tracker = tracker

    async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        await self.tracker.enter.remote()
        await asyncio.sleep(0.05)  # the model "thinks": sessions overlap while they wait
        await self.tracker.leave.remote()
        yield TextDelta("ok")
        yield StepFinish(None, "stop")


async def test_sessions_in_flight_are_bounded(data_runtime: Runtime) -> None:
    tracker = InFlight.remote()  # type: ignore[attr-defined]
    agent = Agent("counted", "Answer.", CountingModel(tracker))
    ds = ray.data.from_items(rows(24))
    results = run_sessions(
        ds, runtime=data_runtime, agent=agent, prompt="question", key="id", in_flight=3, batch_size=4, **KW
    )
    taken = await asyncio.to_thread(take, results)
    assert len(taken) == 24 and all(r["success"] for r in taken)
    peak = await tracker.get_peak.remote()
    assert 1 < peak <= 3  # concurrency (1 actor) x in_flight (3)
    ray.kill(tracker)


@pytest.mark.slow
async def test_a_host_and_a_data_worker_killed_mid_pipeline(data_runtime: Runtime, tmp_path: Path) -> None:
    """A host dies in a charge; then the Ray Data worker dies while charges wait. Every row ends
    with one result and every card is charged exactly once (the interrupted charge is reported to
    the model, never run again; the retried batches replay their prompts)."""
    ledger, crash, pids = tmp_path / "ledger", tmp_path / "crash", tmp_path / "pids"
    gate = Gate.remote()
    agent = charging_agent(ledger, crash=str(crash), store=data_runtime.store_url, gate=gate)

    def prompt(row: Mapping[str, Any]) -> str:
        with open(pids, "a") as f:  # the Ray Data worker running this row, and the row
            f.write(f"{os.getpid()} {row['id']}\n")
        return str(row["question"])

    def prompted() -> list[tuple[int, str]]:
        return [(int(pid), sid) for pid, sid in (line.split() for line in pids.read_text().splitlines())]

    n = 12
    ds = ray.data.from_items(rows(n))
    results = run_sessions(
        ds, runtime=data_runtime, agent=agent, prompt=prompt, key="id", in_flight=6, batch_size=3, **KW
    )
    running = asyncio.ensure_future(asyncio.to_thread(take, results))
    # The host crash happened, and later charges are waiting at the gate: the pipeline is mid-way.
    await eventually(lambda: count_lines(crash) == 1, TIMEOUT, interval=0.05, what="the host to crash in a charge")

    async def waiting() -> bool:
        # Every row prompted so far has either ended its turn (its charge cut short by the
        # crash) or is charging now, held at the gate; and one is. (Counting arrivals is not
        # enough: a charge that arrived on the crashed host no longer waits, and the rows of a
        # batch whose other charges were all cut short hold the pipeline with one at the gate.)
        logs = await session_logs(data_runtime.store_url, [sid for _, sid in prompted()])
        ended = {sid for sid, log in logs.items() if any(e.type == ai.TURN_FINISHED for e in log)}
        held = {sid for sid, log in logs.items() if sid not in ended and sid in ledger_counts(ledger)}
        return bool(held) and ended | held == set(logs) and await gate.count.remote() >= len(held)

    await eventually(waiting, TIMEOUT, interval=0.2, what="charges waiting at the gate")
    worker = prompted()[0][0]
    os.kill(worker, signal.SIGKILL)  # the Ray Data actor, with its batches in flight
    await eventually(
        lambda: any(pid != worker for pid, _ in prompted()),
        TIMEOUT,
        interval=0.05,
        what="the worker to be replaced",
    )
    await gate.open.remote()
    taken = await asyncio.wait_for(running, TIMEOUT)

    assert sorted(r["session_id"] for r in taken) == sorted(f"r{i}" for i in range(n))
    assert all(r["success"] for r in taken), [r for r in taken if not r["success"]]
    # Every card is charged at most once. A charge cut short is reported to the model, never run
    # again, and may not have reached its body at all: a call on the crashed host whose start was
    # stored in the same commit as the crashing one's. Every other card is charged exactly once.
    cut_short = await interrupted_sessions(data_runtime.store_url, [f"r{i}" for i in range(n)])
    counts = ledger_counts(ledger)
    assert cut_short, "the crashed charge is reported to the model as interrupted"
    assert all(count == 1 for count in counts.values()), counts
    assert {f"r{i}" for i in range(n)} - set(counts) <= cut_short, (counts, cut_short)

    async def recovered() -> bool:  # the host did die, and the supervisor recovered it
        return bool((await data_runtime.supervisor.info.remote())["recoveries"])

    await eventually(recovered, TIMEOUT, interval=0.05, what="the supervisor's recovery of the host")
    ray.kill(gate)


async def test_a_row_whose_session_already_runs_joins_that_turn(data_runtime: Runtime, tmp_path: Path) -> None:
    """The row's input was sent before (a run cut off mid-turn): the pipeline waits for that turn."""
    gate = Gate.remote()
    agent = Agent("gated", "Wait.", gated_model(gate, "done"))
    started = await data_runtime.session("j-1", agent=agent).prompt("q", id=row_input_id("j-1"))
    await gate.wait_reached.remote()  # the turn runs, held in its first step
    asked = tmp_path / "asked"

    def prompt(row: Mapping[str, Any]) -> str:
        asked.write_text("yes")
        return str(row["question"])

    ds = ray.data.from_items([{"id": "j-1", "question": "q"}])
    results = run_sessions(ds, runtime=data_runtime, agent=agent, prompt=prompt, key="id", **KW)
    running = asyncio.ensure_future(asyncio.to_thread(take, results))
    await eventually(asked.exists, TIMEOUT, interval=0.05, what="the pipeline to reach the row")
    await gate.open.remote()
    (row,) = await asyncio.wait_for(running, TIMEOUT)
    assert (row["success"], row["text"]) == (True, "waiting done") and row["index"] == (await started.finished).index
    assert await gate.count.remote() == 1  # one model step: the pipeline started no second turn
    assert (await data_runtime.session("j-1", agent=agent).state()).state.turns == 1
    ray.kill(gate)
