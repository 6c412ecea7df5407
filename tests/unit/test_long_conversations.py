"""What a long conversation costs per turn must not grow with it: the pieces that used to.

``troupe bench long`` measures it (CPU per turn over thousands of turns, and the loop's longest
stall); these pin the behaviour each change kept: a turn's end looks only at the calls it made,
snapshots follow the same encoding, are spaced by a fraction of the log and are taken behind the
writes (a large state encoded and decoded off the event loop), and a model step is handed the
conversation without a copy.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections import namedtuple
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from orchestrator.core import event_types as ai
from orchestrator.core import snapshot
from orchestrator.core.aistate import AIState, CompactionState
from orchestrator.core.events import Event
from orchestrator.core.fold import fold_events
from orchestrator.core.snapshot import _encode, decode_state, encode_state
from orchestrator.run.compaction import prompt_messages
from orchestrator.run.log import SNAPSHOT_FRACTION, SessionLog
from orchestrator.run.off_loop import OFF_LOOP_BYTES, OFF_LOOP_MESSAGES
from orchestrator.store import open_store
from orchestrator.surfaces.bench.long import bench_long, format_long_bench


def _turn(n: int, calls: list[str], *, end: str | None = "completed") -> list[Event]:
    """Turn ``n``: a step that asks for ``calls``, each run to done unless ``end`` is ``None``."""
    turn, step = f"t{n}", f"t{n}.1"
    events = [
        Event(f"u-{n}", ai.INPUT, {"role": "user", "text": f"ask {n}", "generate": True}),
        Event(f"u-{n}:decided", ai.DECIDED, {"commandId": f"u-{n}", "outcome": "applied"}),
        Event(f"{turn}:started", ai.TURN_STARTED, {"turnId": turn, "inputIds": [f"u-{n}"], "messageId": f"m-{n}"}),
        Event(f"{step}:started", ai.STEP_STARTED, {"turnId": turn, "stepId": step}),
        Event(
            f"{step}:parts",
            ai.STREAM,
            {"stepId": step, "parts": [{"type": "tool-call", "id": c, "name": "cart", "input": {}} for c in calls]},
        ),
        Event(
            f"{step}:finished",
            ai.STEP_FINISHED,
            {"stepId": step, "finishReason": "tool-calls", "toolCalls": [{"id": c, "name": "cart"} for c in calls]},
        ),
    ]
    if end is None:
        return events
    for c in calls:
        events.append(Event(f"{turn}:{c}:started", ai.TOOL_STARTED, {"callId": c, "name": "cart"}))
        events.append(Event(f"{turn}:{c}:finished", ai.TOOL_FINISHED, {"callId": c, "output": "ok"}))
    events.append(Event(f"{turn}:finished", ai.TURN_FINISHED, {"turnId": turn, "outcome": end}))
    return events


def test_a_turn_lists_the_calls_it_made_and_its_end_cancels_only_those() -> None:
    history = [e for n in range(1, 41) for e in _turn(n, [f"c{n}"])]
    state = fold_events(history)
    assert len(state.tools) == 40 and all(r.status == "done" for r in state.tools.values())
    # Turn 41 asks for a new call and repeats an old id: the old id keeps its record and its turn.
    state = fold_events(_turn(41, ["c7", "c41"], end=None), state)
    assert state.active is not None and state.active.calls == ("c41",)
    assert state.tools["c7"].turn_id == "t7" and state.tools["c41"].turn_id == "t41"
    stopped = fold_events([Event("t41:finished", ai.TURN_FINISHED, {"turnId": "t41", "outcome": "stopped"})], state)
    assert stopped.tools["c41"].status == "cancelled"
    others = {k: r for k, r in state.tools.items() if k != "c41"}
    assert {k: r for k, r in stopped.tools.items() if k != "c41"} == others


def test_a_turn_that_ends_with_its_calls_final_copies_no_map() -> None:
    state = fold_events([e for n in range(1, 30) for e in _turn(n, [f"c{n}"])])
    before = fold_events(_turn(30, ["c30"])[:-1], state)
    after = fold_events(_turn(30, ["c30"])[-1:], before)
    assert after.active is None and after.last_turn == ("t30", "completed")
    assert after.tools is before.tools and after.interactions is before.interactions


def _reference(value: Any) -> Any:
    """The snapshot encoding's rules, written plainly: what ``_encode``'s fast paths must match."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: _reference(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"__t": type(value).__name__, **fields}
    if isinstance(value, tuple):
        return {"__tuple": [_reference(v) for v in value]}
    if isinstance(value, list):
        return [_reference(v) for v in value]
    if isinstance(value, Mapping):
        return {"__map": [[_reference(k), _reference(v)] for k, v in value.items()]}
    return value


class _Listish(list):  # type: ignore[type-arg]
    pass


def test_snapshot_encoding_keeps_its_rules_for_every_kind_of_value() -> None:
    state = fold_events([e for n in range(1, 6) for e in _turn(n, [f"c{n}", f"d{n}"])])
    state = fold_events(_turn(6, ["c6"], end=None), state)
    pair = namedtuple("pair", "a b")
    odd = [
        MappingProxyType({"k": (1, 2.5)}),
        pair(1, [True, None]),
        _Listish([{"x": CompactionState("c", "running")}]),
        int,
        object,
        3,
        "text",
    ]
    for value in [*(getattr(state, f.name) for f in dataclasses.fields(state) if f.name != "session"), *odd]:
        assert _encode(value) == _reference(value)
    assert decode_state(encode_state(state)) == state


async def test_a_long_log_is_snapshotted_after_a_fraction_of_its_length() -> None:
    store = open_store("memory://")
    log = await SessionLog.open(store, "s-1", snapshot_every=4)
    taken: list[int] = []
    save = store.save_snapshot

    async def noted(session_id: str, reducer: str, index: int, data: bytes) -> None:
        taken.append(index)
        await save(session_id, reducer, index, data)

    store.save_snapshot = noted  # type: ignore[method-assign]
    for n in range(300):
        await log.append([Event(f"e-{n}", "app.note", {"n": n})])
        await log.settle()  # each is taken behind its write
    expected, last = [], 0
    for index in range(1, 301):
        if index - last >= max(4, index // SNAPSHOT_FRACTION):
            expected.append(index)
            last = index
    assert taken == expected
    assert taken[:3] == [4, 8, 12] and taken[-1] - taken[-2] >= 300 // SNAPSHOT_FRACTION - 4
    await store.close()


def _conversation(turns: int) -> list[Event]:
    return [e for n in range(1, turns + 1) for e in _turn(n, [f"c{n}"])]


async def test_a_write_does_not_wait_for_its_snapshot_and_a_failed_one_fails_nothing() -> None:
    store = open_store("memory://")
    log = await SessionLog.open(store, "s-1", snapshot_every=4)
    gate = asyncio.Event()
    save = store.save_snapshot
    taken: list[int] = []

    async def slow(session_id: str, reducer: str, index: int, data: bytes) -> None:
        await gate.wait()
        if index == 4:
            raise OSError("disk full")
        taken.append(index)
        await save(session_id, reducer, index, data)

    store.save_snapshot = slow  # type: ignore[method-assign]
    events = _conversation(2)
    for event in events[:4]:
        await log.append([event])  # the fourth reaches the gap: its snapshot waits behind the gate
    for event in events[4:9]:
        await log.append([event])  # writes go on meanwhile, and start no second snapshot
    assert log.index == 9 and taken == []
    gate.set()
    await log.settle()  # the failed one is logged, not raised; the log is whole
    assert taken == [] and await store.load_snapshot("s-1", snapshot.snapshot_key(None)) is None
    await log.append([events[9]])  # 4 past the failed attempt: the next gap tries again
    await log.settle()
    assert taken == [10]
    assert (await SessionLog.open(store, "s-1")).snapshot() == log.snapshot()
    await store.close()


async def test_a_large_state_is_encoded_and_decoded_off_the_loop(monkeypatch: Any) -> None:
    threads: list[tuple[str, str]] = []
    encode, later, decode = snapshot.encode_state, snapshot.encode_later, snapshot.decode_state

    def noted_later(state: AIState) -> Callable[[], bytes]:
        threads.append(("app", threading.current_thread().name))
        rest = later(state)

        def noted_rest() -> bytes:
            threads.append(("encode", threading.current_thread().name))
            return rest()

        return noted_rest

    def noted_decode(data: bytes) -> AIState | None:
        threads.append(("decode", threading.current_thread().name))
        return decode(data)

    monkeypatch.setattr("orchestrator.run.log.encode_later", noted_later)
    monkeypatch.setattr("orchestrator.run.log.decode_state", noted_decode)
    small_store, store = open_store("memory://"), open_store("memory://")
    small = await SessionLog.open(small_store, "small", snapshot_every=1)
    await small.append(_conversation(1))
    await small.settle()
    large = await SessionLog.open(store, "large", snapshot_every=1)
    await large.append(_conversation(200))
    await large.settle()
    assert len(large.state.messages) >= OFF_LOOP_MESSAGES
    assert len(encode(large.state)) >= OFF_LOOP_BYTES
    again = await SessionLog.open(store, "large")
    assert again.snapshot() == large.snapshot()
    loop_thread = threading.current_thread().name
    # A small state: all on the loop (the thread trip costs more).
    assert threads[:2] == [("app", loop_thread), ("encode", loop_thread)]
    assert threads[2] == ("app", loop_thread)  # a large one: the app's part on the loop, the rest on the thread
    assert threads[3][0] == "encode" and threads[3][1].startswith("troupe-off-loop")
    assert threads[4][0] == "decode" and threads[4][1].startswith("troupe-off-loop")
    await store.close()
    await small_store.close()


def test_the_app_state_is_encoded_as_it_is_when_the_snapshot_is_taken() -> None:
    app: dict[str, Any] = {"cart": ["mug"]}
    state = fold_events(_conversation(3)).with_(app=app)
    rest = snapshot.encode_later(state)
    app["cart"].append("teapot")  # an app that changes its own value in place after the state's index
    decoded = decode_state(rest())
    assert decoded is not None and decoded.app == {"cart": ["mug"]}
    assert snapshot.encode_later(state)() == encode_state(state)  # one encoding, in one part or two
    now = decode_state(encode_state(state))  # taken now, the snapshot holds the app as it is now
    assert now is not None and now.app == {"cart": ["mug", "teapot"]}


def test_a_model_step_gets_the_conversation_itself_unless_a_summary_stands_for_part_of_it() -> None:
    state = fold_events([e for n in range(1, 4) for e in _turn(n, [f"c{n}"])])
    assert prompt_messages(state) is state.messages
    summarized: AIState = state.with_(compaction=CompactionState("k", "completed", "earlier talk", through=2))
    prompt = prompt_messages(summarized)
    assert [m.id for m in prompt] == ["troupe:summary", *[m.id for m in state.messages][2:]]


def test_bench_long_runs_whole_conversations_and_reports_each_window() -> None:
    figures = bench_long(sessions=2, turns=6, window=4)
    assert len(figures.ms_per_turn) == 2 and all(ms > 0 for ms in figures.ms_per_turn)
    assert len(figures.stall_ms) == 2 and all(ms >= 0 for ms in figures.stall_ms)
    assert figures.messages == 12  # two per turn: the prompt and the reply (the run asserts each succeeded)
    assert figures.snapshot_kb > 0 and figures.reopen_ms > 0  # the reopened state is checked against the closed one
    assert figures.growth == figures.ms_per_turn[1] / figures.ms_per_turn[0]
    text = format_long_bench(figures)
    assert "1-4" in text and "5-6" in text and "growth, last window / first" in text and "opened again" in text
    assert "longest loop stall ms" in text
