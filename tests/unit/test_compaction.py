"""Compaction as conversations.md says: the summary request, its failures, callbacks, resolver, catalog.

Every test runs a real session in process (the runner over the in-memory store) with a
``FunctionModel``, which records each request, so a test can look at what the summary request sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from actors.local import LocalRuntime
from orchestrator import Compaction, CompactionContext, ModelLimits, register_model, unregister_model
from orchestrator.core import event_types as ai
from orchestrator.core.aistate import AIState
from orchestrator.core.commands import SendInput, StopTurn
from orchestrator.core.errors import ModelError, UsageError
from orchestrator.core.events import Event
from orchestrator.core.parts import CompactionPart
from orchestrator.models.base import GUIDANCE_ID, ModelRequest
from orchestrator.models.catalog import default_threshold, lookup_model
from orchestrator.run.agent import Agent, ResolverContext
from orchestrator.run.compaction import SUMMARY_INSTRUCTIONS
from orchestrator.run.inprocess import LocalSessions
from orchestrator.run.runner import SessionRunner
from orchestrator.store import open_store
from orchestrator.store.base import EventStore
from orchestrator.surfaces.config import parse_config
from orchestrator.testing import FunctionModel, Gate, ScriptedModel
from tools import tool

TIMEOUT = 10
LONG = "x" * 400  # about 100 tokens of answer: a few turns cross a small threshold


@pytest.fixture
def store() -> EventStore:
    return open_store("memory://")


@pytest.fixture
async def sessions(store: EventStore) -> AsyncIterator[LocalSessions]:
    local = LocalSessions(store)
    yield local
    await local.close()


async def turn(runner: SessionRunner, input_id: str, text: str) -> str:
    await runner.submit(SendInput(input_id, text))
    return (await runner.wait_input(input_id, timeout=TIMEOUT)).outcome


def summaries(model: FunctionModel) -> list[ModelRequest]:
    return [r for r in model.requests if r.purpose == "compact"]


def generations(model: FunctionModel) -> list[ModelRequest]:
    return [r for r in model.requests if r.purpose == "generate"]


def compaction_parts(state: AIState) -> list[CompactionPart]:
    return [p for m in state.messages for p in m.parts if isinstance(p, CompactionPart)]


async def types(store: EventStore, session_id: str = "s-1") -> list[str]:
    return [e.type for e in await store.read(session_id)]


def answer_long(request: ModelRequest) -> list[Mapping[str, Any]]:
    if request.purpose == "compact":
        return [{"text": "the summary"}]
    return [{"text": LONG}]


# -- item 8: the summary request keeps the generation's instructions, tools and settings ----------


async def test_the_summary_request_sends_the_generations_instructions_tools_and_settings(
    sessions: LocalSessions,
) -> None:
    ran: list[str] = []

    @tool
    async def lookup(sku: str) -> str:
        """Look a product up.

        Args:
            sku: The product.
        """
        ran.append(sku)
        return "found"

    model = FunctionModel(answer_long)
    agent = Agent(
        "a",
        "You help the user shop.",
        model,
        tools=[lookup],
        settings={"temperature": 0.2},
        compaction=Compaction(threshold_tokens=120, instructions="Preserve exact IDs."),
    )
    runner = await sessions.open("s-1", agent)
    for i in range(3):
        assert await turn(runner, f"u-{i}", f"message {i}") == "completed"
    summary = summaries(model)[0]
    at = next(i for i, r in enumerate(model.requests) if r is summary)
    before = [r for r in model.requests[:at] if r.purpose == "generate"][-1]  # the generation it follows
    assert summary.instructions == before.instructions == "You help the user shop."
    assert [t.name for t in summary.tools] == [t.name for t in before.tools] == ["lookup"]
    assert summary.settings == before.settings == {"temperature": 0.2}
    # The generation's prompt is a prefix of the summary request's (the prompt cache still matches).
    covered = summary.messages[:-1]
    assert [m.id for m in before.messages] == [m.id for m in covered[: len(before.messages)]]
    guidance = summary.messages[-1]
    assert guidance.id == GUIDANCE_ID and guidance.role == "user"
    assert guidance.text == SUMMARY_INSTRUCTIONS + "\nPreserve exact IDs."
    assert ran == []  # offered, never run
    assert all(m.id != GUIDANCE_ID for m in runner.state.messages)  # never a turn in the conversation


# -- item 9: a failed summary fails the generation and leaves the previous context intact ---------


async def test_an_empty_summary_fails_the_generation(sessions: LocalSessions) -> None:
    def answer(request: ModelRequest) -> list[Mapping[str, Any]]:
        return [{"text": "   "}] if request.purpose == "compact" else [{"text": LONG}]

    model = FunctionModel(answer)
    runner = await sessions.open("s-1", Agent("a", "x", model, compaction=Compaction(threshold_tokens=100)))
    assert await turn(runner, "u-0", "m0") == "completed"
    assert await turn(runner, "u-1", "m1") == "failed"
    state = runner.state
    assert state.compaction is not None and state.compaction.status == "failed"
    assert state.error is not None and "empty summary" in state.error.message
    assert compaction_parts(state)[-1].status == "failed"
    assert len(generations(model)) == 1  # the failed turn never generated
    assert state.indicator is None


async def test_a_summary_tool_call_fails_the_generation_and_runs_no_tool(sessions: LocalSessions) -> None:
    ran: list[str] = []

    @tool
    async def lookup(sku: str) -> str:
        """Look a product up.

        Args:
            sku: The product.
        """
        ran.append(sku)
        return "found"

    def answer(request: ModelRequest) -> list[Mapping[str, Any]]:
        if request.purpose == "compact":
            return [{"tool": "lookup", "input": {"sku": "A-1"}}]
        return [{"text": LONG}]

    runner = await sessions.open(
        "s-1", Agent("a", "x", FunctionModel(answer), tools=[lookup], compaction=Compaction(threshold_tokens=100))
    )
    assert await turn(runner, "u-0", "m0") == "completed"
    assert await turn(runner, "u-1", "m1") == "failed"
    assert runner.state.error is not None and "tool call instead of a summary" in runner.state.error.message
    assert ran == []


async def test_a_failed_summary_keeps_the_previous_summary_and_its_error_code(sessions: LocalSessions) -> None:
    refuse = False

    def answer(request: ModelRequest) -> list[Mapping[str, Any]]:
        if request.purpose == "compact":
            if refuse:
                raise ModelError("prompt is too long", "bad_request")
            return [{"text": f"summary {len(summaries(model))}"}]
        return [{"text": LONG}]

    model = FunctionModel(answer)
    runner = await sessions.open("s-1", Agent("a", "x", model, compaction=Compaction(threshold_tokens=100)))
    for i in range(2):
        assert await turn(runner, f"u-{i}", f"m{i}") == "completed"
    first = runner.state.compaction
    assert first is not None and first.status == "completed" and first.summary == "summary 1"
    refuse = True
    assert await turn(runner, "u-2", "m2") == "failed"
    state = runner.state
    assert state.error is not None and state.error.code == "bad_request"
    assert state.compaction == first  # the failure never replaces the recorded summary
    refuse = False
    assert await turn(runner, "u-3", "m3") == "completed"
    # The next summary request started from the context the failure left: summary 1 and what follows.
    retried = summaries(model)[-1]
    assert retried.messages[0].id == "troupe:summary" and retried.messages[0].text.endswith("summary 1")
    assert runner.state.compaction is not None and runner.state.compaction.summary == "summary 3"


# -- custom callbacks -----------------------------------------------------------------------------


async def test_should_compact_and_compact_callbacks_see_the_typed_and_model_ready_messages(
    sessions: LocalSessions,
) -> None:
    seen: list[CompactionContext] = []

    def should_compact(context: CompactionContext) -> bool:
        seen.append(context)
        return len(context.messages) >= 2  # from the second turn on, whatever the size

    async def compact(context: CompactionContext) -> str:
        return "custom: " + " / ".join(m.text for m in context.to_cover)

    model = FunctionModel(lambda r: [{"text": f"answer {r.turn_index}"}])
    compaction = Compaction(should_compact=should_compact, compact=compact)
    runner = await sessions.open("s-1", Agent("a", "x", model, compaction=compaction))
    for i in range(3):
        assert await turn(runner, f"u-{i}", f"m{i}") == "completed"
    assert summaries(model) == []  # compact() wrote the summaries: no summary request
    state = runner.state
    summary = state.compaction.summary if state.compaction is not None else None
    assert summary is not None and summary.endswith(" / m1 / answer 1") and "custom: m0 / answer 0" in summary
    # The third turn's context: the typed conversation is complete; the model-ready messages
    # start with the second turn's summary.
    third = seen[-1]
    assert [m.id for m in third.messages][:3] == ["u-0", state.messages[1].id, "u-1"]
    assert third.model_messages[0].id == "troupe:summary" and "custom: m0 / answer 0" in third.model_messages[0].text
    assert third.threshold_tokens is None and third.model == "function"
    assert generations(model)[-1].messages[0].text.endswith(" / m1 / answer 1")


async def test_a_compact_callback_that_returns_nothing_fails_the_generation(sessions: LocalSessions) -> None:
    compaction = Compaction(should_compact=lambda c: True, compact=lambda c: "")
    runner = await sessions.open("s-1", Agent("a", "x", FunctionModel(answer_long), compaction=compaction))
    assert await turn(runner, "u-0", "m0") == "completed"  # nothing to cover in the first turn
    assert await turn(runner, "u-1", "m1") == "failed"


def test_compaction_settings_are_checked() -> None:
    with pytest.raises(UsageError, match="positive integer"):
        Compaction(threshold_tokens=0)
    with pytest.raises(UsageError, match="'fail' or 'continue'"):
        Compaction(on_failure="ignore")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="function of a CompactionContext"):
        Compaction(compact="summarize")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="compaction must be a Compaction"):
        Agent("a", "x", FunctionModel(answer_long), compaction=5)  # type: ignore[arg-type]


async def test_settings_that_force_the_answer_shape_skip_automatic_compaction_and_refuse_a_threshold(
    sessions: LocalSessions, store: EventStore
) -> None:
    forced = {"tool_choice": "required"}
    with pytest.raises(UsageError, match=r"settings.tool_choice forces every answer's shape"):
        Agent("a", "x", FunctionModel(answer_long), settings=forced, compaction=Compaction(threshold_tokens=100))
    with pytest.raises(UsageError, match=r"settings.response_format"):
        Agent(
            "a",
            "x",
            FunctionModel(answer_long),
            settings={"response_format": {"type": "json_object"}},
            compaction=Compaction(should_compact=lambda c: True),
        )
    model = FunctionModel(answer_long, context_window=100)
    runner = await sessions.open("s-1", Agent("a", "x", model, settings=forced))  # automatic: skipped
    for i in range(3):
        assert await turn(runner, f"u-{i}", f"m{i}") == "completed"
    assert summaries(model) == [] and runner.state.model_metadata == {}
    # A summary written in code is allowed: it sends no request the settings could force.
    custom = Compaction(threshold_tokens=100, compact=lambda c: "mine")
    other = await sessions.open("s-2", Agent("a", "x", FunctionModel(answer_long), settings=forced, compaction=custom))
    for i in range(2):
        assert await turn(other, f"v-{i}", f"m{i}") == "completed"  # input ids are unique per store
    assert other.state.compaction is not None and other.state.compaction.summary == "mine"


# -- a resolver per generation ------------------------------------------------------------------


async def test_a_compaction_resolver_chooses_per_generation(sessions: LocalSessions) -> None:
    asked: list[ResolverContext] = []

    def choose(context: ResolverContext) -> Compaction | bool:
        asked.append(context)
        return Compaction(threshold_tokens=100) if context.state.turns >= 3 else False

    model = FunctionModel(answer_long)
    runner = await sessions.open("s-1", Agent("a", "x", model, compaction=choose))
    for i in range(2):
        assert await turn(runner, f"u-{i}", f"m{i}") == "completed"
    assert summaries(model) == []  # far over 100 tokens, but the resolver said no
    assert await turn(runner, "u-2", "m2") == "completed"
    assert len(summaries(model)) == 1
    assert [c.state.turns for c in asked] == [1, 2, 3]  # asked before every generation


async def test_a_compaction_resolver_that_raises_fails_the_turn(sessions: LocalSessions) -> None:
    def broken(context: ResolverContext) -> Compaction:
        raise RuntimeError("no settings for this session")

    runner = await sessions.open("s-1", Agent("a", "x", FunctionModel(answer_long), compaction=broken))
    assert await turn(runner, "u-0", "m0") == "failed"
    assert runner.state.error is not None and runner.state.error.message == "no settings for this session"


# -- the default threshold from the model catalog, and the metadata events -------------------------


def test_the_default_threshold_is_three_quarters_of_the_window_lowered_for_a_larger_output() -> None:
    assert default_threshold(128_000, None) == 96_000
    assert default_threshold(128_000, 16_000) == 96_000  # the quarter left over holds the answer
    assert default_threshold(128_000, 64_000) == 64_000
    register_model("acme-large", context_window=1000, max_output_tokens=100)
    try:
        assert lookup_model(Named("acme-large")) == ModelLimits(1000, 100)
    finally:
        unregister_model("acme-large")
    assert lookup_model(Named("acme-large")) is None
    assert lookup_model(Named("gpt-4o")) == ModelLimits(128_000, 16_384)
    assert lookup_model(Named("openai/gpt-4o")) == ModelLimits(128_000, 16_384)


class Named(FunctionModel):
    """A function model looked up in the catalog by name (as ``OpenAIChatModel`` is)."""

    def __init__(self, catalog: str, fn: Any = answer_long) -> None:
        super().__init__(fn, name=f"named:{catalog}")
        self._catalog = catalog

    @property
    def catalog_name(self) -> str | None:
        return self._catalog


async def test_the_catalog_window_sets_the_threshold_once_its_lookup_lands(
    sessions: LocalSessions, store: EventStore
) -> None:
    model = FunctionModel(answer_long, context_window=400)  # threshold: 300 tokens
    runner = await sessions.open("s-1", Agent("a", "x", model))  # the default: Compaction()
    assert await turn(runner, "u-0", "m0") == "completed"
    state = await runner.wait_for(lambda s: s.model_metadata["function"].status == "resolved", TIMEOUT)
    assert state.model_metadata["function"].context_window == 400
    for i in range(1, 5):
        assert await turn(runner, f"u-{i}", f"m{i}") == "completed"
    assert runner.state.compaction is not None and runner.state.compaction.threshold_tokens == 300
    logged = await types(store)
    assert logged.count(ai.MODEL_METADATA_REQUESTED) == 1 and logged.count(ai.MODEL_METADATA_RESOLVED) == 1
    # Requested with the first generation's start; resolved after it, in a later write.
    assert logged.index(ai.MODEL_METADATA_REQUESTED) == logged.index(ai.STEP_STARTED) + 1


async def test_a_larger_max_output_tokens_lowers_the_default_threshold(sessions: LocalSessions) -> None:
    model = FunctionModel(answer_long, context_window=400)
    agent = Agent("a", "x", model, settings={"max_output_tokens": 250})
    runner = await sessions.open("s-1", agent)
    assert await turn(runner, "u-0", "m0") == "completed"
    await runner.wait_for(lambda s: s.model_metadata["function"].status == "resolved", TIMEOUT)
    for i in range(1, 3):
        assert await turn(runner, f"u-{i}", f"m{i}") == "completed"
    assert runner.state.compaction is not None and runner.state.compaction.threshold_tokens == 150


async def test_the_first_generation_with_a_model_never_compacts_before_its_lookup_lands(
    sessions: LocalSessions,
) -> None:
    plain = FunctionModel(answer_long, name="plain")  # no window: no lookup
    small = FunctionModel(answer_long, name="small", context_window=40)  # threshold 30: always over
    runner = await sessions.open("s-1", Agent("a", "x", lambda c: plain if c.state.turns == 1 else small))
    assert await turn(runner, "u-0", "m0") == "completed"
    assert await turn(runner, "u-1", "m1") == "completed"  # small's first generation: pending
    assert summaries(small) == [] and runner.state.compaction is None
    await runner.wait_for(lambda s: s.model_metadata["small"].status == "resolved", TIMEOUT)
    assert await turn(runner, "u-2", "m2") == "completed"
    assert len(summaries(small)) == 1


async def test_a_model_absent_from_the_catalog_is_unavailable_and_never_compacts(
    sessions: LocalSessions, store: EventStore
) -> None:
    model = Named("no-such-model")
    runner = await sessions.open("s-1", Agent("a", "x", model))
    for i in range(3):
        assert await turn(runner, f"u-{i}", f"m{i}") == "completed"
    state = await runner.wait_for(lambda s: "named:no-such-model" in s.model_metadata, TIMEOUT)
    assert state.model_metadata["named:no-such-model"].status == "unavailable"
    assert summaries(model) == [] and state.compaction is None
    assert (await types(store)).count(ai.MODEL_METADATA_REQUESTED) == 1


async def test_each_model_is_requested_once_per_session(sessions: LocalSessions, store: EventStore) -> None:
    register_model("acme-small", context_window=100_000)
    try:
        small, large = Named("acme-small"), Named("gpt-4o")
        runner = await sessions.open("s-1", Agent("a", "x", lambda c: small if c.state.turns % 2 else large))
        for i in range(4):
            assert await turn(runner, f"u-{i}", f"m{i}") == "completed"
        state = await runner.wait_for(
            lambda s: all(m.status != "pending" for m in s.model_metadata.values()) and len(s.model_metadata) == 2,
            TIMEOUT,
        )
    finally:
        unregister_model("acme-small")
    assert state.model_metadata["named:acme-small"].context_window == 100_000
    assert state.model_metadata["named:gpt-4o"].context_window == 128_000
    assert (await types(store)).count(ai.MODEL_METADATA_REQUESTED) == 2


async def test_false_turns_compaction_and_the_lookup_off(sessions: LocalSessions, store: EventStore) -> None:
    model = FunctionModel(answer_long, context_window=100)
    runner = await sessions.open("s-1", Agent("a", "x", model, compaction=False))
    for i in range(3):
        assert await turn(runner, f"u-{i}", f"m{i}") == "completed"
    assert summaries(model) == [] and runner.state.model_metadata == {}
    assert ai.MODEL_METADATA_REQUESTED not in await types(store)


async def test_the_scripted_and_function_models_have_no_window_unless_given_one(
    sessions: LocalSessions, store: EventStore
) -> None:
    model = FunctionModel(answer_long)
    runner = await sessions.open("s-1", Agent("a", "x", model))
    for i in range(3):
        assert await turn(runner, f"u-{i}", f"m{i}") == "completed"
    assert summaries(model) == [] and runner.state.model_metadata == {}
    assert not any(t.startswith("ai.model.") for t in await types(store))


# -- state.indicator, and a compaction cut short -----------------------------------------------------


async def test_the_indicator_is_compacting_while_a_compaction_runs(sessions: LocalSessions) -> None:
    gate = Gate()

    async def compact(context: CompactionContext) -> str:
        await gate.wait()
        return "summary"

    compaction = Compaction(should_compact=lambda c: len(c.messages) > 2, compact=compact)
    runner = await sessions.open("s-1", Agent("a", "x", FunctionModel(answer_long), compaction=compaction))
    assert await turn(runner, "u-0", "m0") == "completed"
    assert runner.state.indicator is None
    await runner.submit(SendInput("u-1", "m1"))
    await gate.reached(TIMEOUT)
    running = await runner.wait_for(lambda s: s.compaction is not None, TIMEOUT)
    assert running.indicator == "compacting" and running.compaction is not None
    assert running.compaction.status == "running"
    gate.open()
    assert (await runner.wait_input("u-1", timeout=TIMEOUT)).outcome == "completed"
    assert runner.state.indicator is None and runner.state.compaction is not None
    assert runner.state.compaction.status == "completed"


async def test_a_stop_during_a_compaction_marks_it_interrupted(sessions: LocalSessions) -> None:
    gate = Gate()

    async def compact(context: CompactionContext) -> str:
        await gate.wait()
        return "summary"

    compaction = Compaction(should_compact=lambda c: len(c.messages) > 2, compact=compact)
    runner = await sessions.open("s-1", Agent("a", "x", FunctionModel(answer_long), compaction=compaction))
    assert await turn(runner, "u-0", "m0") == "completed"
    await runner.submit(SendInput("u-1", "m1"))
    await gate.reached(TIMEOUT)
    await runner.wait_for(lambda s: s.indicator == "compacting", TIMEOUT)
    turn_id = runner.state.active.id if runner.state.active is not None else ""
    await runner.submit(StopTurn("stop-1", turn_id))
    assert (await runner.wait_input("u-1", timeout=TIMEOUT)).outcome == "stopped"
    state = runner.state
    assert state.indicator is None and state.compaction is not None and state.compaction.status == "interrupted"
    assert compaction_parts(state)[-1].status == "interrupted"
    gate.open()


# -- YAML -------------------------------------------------------------------------------------------


def yaml_should_compact(context: CompactionContext) -> bool:
    """A policy named in YAML: compact from the third message on."""
    return len(context.messages) > 2


def yaml_compact(context: CompactionContext) -> str:
    """A summary written in code, named in YAML."""
    return f"{len(context.to_cover)} messages"


async def test_yaml_names_the_callbacks_by_import_path_and_false_turns_compaction_off(
    sessions: LocalSessions, tmp_path: Path
) -> None:
    text = """
agents:
  custom:
    model: {scripted: {steps: [[{text: Hi}]], per_turn: true}}
    compaction:
      should_compact: "tests.unit.test_compaction:yaml_should_compact"
      compact: "tests.unit.test_compaction:yaml_compact"
      on_failure: continue
  never:
    model: {scripted: [[{text: Hi}]]}
    compaction: false
  plain:
    model: {scripted: [[{text: Hi}]]}
  windowed:
    model: {scripted: {steps: [[{text: Hi}]], context_window: 8000, max_output_tokens: 1000}}
"""
    config = parse_config(text, env={})
    custom = config.agents["custom"].compaction
    assert isinstance(custom, Compaction) and custom.should_compact is yaml_should_compact
    assert custom.compact is yaml_compact and custom.on_failure == "continue"
    assert config.agents["never"].compaction is False
    assert config.agents["plain"].compaction == Compaction()
    windowed = config.agents["windowed"].model
    assert isinstance(windowed, ScriptedModel) and windowed.limits == ModelLimits(8000, 1000)
    runner = await sessions.open("s-1", config.agents["custom"])
    for i in range(2):
        assert await turn(runner, f"u-{i}", f"m{i}") == "completed"
    assert runner.state.compaction is not None and runner.state.compaction.summary == "2 messages"


async def test_a_lookup_recorded_before_this_process_is_looked_up_once_here(store: EventStore) -> None:
    # A process crashed between the request and its lookup: the log says pending, nothing resolves it.
    await store.append("s-1", [Event("meta-1", ai.MODEL_METADATA_REQUESTED, {"model": "function"})])
    local = LocalSessions(store)
    try:
        model = FunctionModel(answer_long, context_window=1000)
        runner = await local.open("s-1", Agent("a", "x", model))
        assert runner.state.model_metadata["function"].status == "pending"
        assert await turn(runner, "u-0", "m0") == "completed"
        state = await runner.wait_for(lambda s: s.model_metadata["function"].status == "resolved", TIMEOUT)
        assert state.model_metadata["function"].context_window == 1000
        assert await turn(runner, "u-1", "m1") == "completed"
        logged = await types(store)
        assert logged.count(ai.MODEL_METADATA_REQUESTED) == 1 and logged.count(ai.MODEL_METADATA_RESOLVED) == 1
    finally:
        await local.close()


async def test_a_client_sees_the_indicator_in_info_and_state_through_local_runtime() -> None:
    gate = Gate()

    async def compact(context: CompactionContext) -> str:
        await gate.wait()
        return "summary"

    compaction = Compaction(should_compact=lambda c: len(c.messages) > 2, compact=compact)
    agent = Agent("a", "x", FunctionModel(answer_long), compaction=compaction)
    async with LocalRuntime("memory://") as runtime:
        session = runtime.session("s-1", agent=agent)
        assert (await asyncio.wait_for((await session.prompt("m0")).finished, TIMEOUT)).success
        assert (await session.info())["indicator"] is None
        second = await session.prompt("m1")
        await gate.reached(TIMEOUT)
        assert (await session.info())["indicator"] == "compacting"
        assert (await session.state()).state.indicator == "compacting"
        gate.open()
        assert (await asyncio.wait_for(second.finished, TIMEOUT)).success
        assert (await session.info())["indicator"] is None
        assert (await session.state()).state.compaction is not None
