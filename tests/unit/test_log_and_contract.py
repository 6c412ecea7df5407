"""SessionLog over a real (in-memory) store, contracts and app state, and optimistic display."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from orchestrator.core import event_types as ai
from orchestrator.core.commands import PauseSession, RemoveInput, SendInput, StopTurn, decide
from orchestrator.core.contract import Contract, Operation, Reducer
from orchestrator.core.errors import ParseError, PartialDuplicateBatch, UsageError
from orchestrator.core.events import Event, check_caller_event
from orchestrator.core.fold import fold_events
from orchestrator.core.optimistic import optimistic
from orchestrator.core.plan import Append, next_effect
from orchestrator.core.snapshot import decode_state, encode_state, snapshot_key
from orchestrator.core.stream import TextDelta, ToolCall
from orchestrator.run import log as log_module
from orchestrator.run.log import SessionLog
from orchestrator.store import EventStore, SqliteStore, open_store

from .driver import Driver


class PlanChanged(BaseModel):
    plan: Literal["free", "pro"]


class TicketFlagged(BaseModel):
    ticketId: str


def desk_fold(state: Mapping[str, Any], event: Event) -> Mapping[str, Any]:
    if event.type == "plan.changed":
        return {**state, "plan": event.payload["plan"]}
    if event.type == "ticket.flagged":
        return {**state, "flagged": [*state["flagged"], event.payload["ticketId"]]}
    return state


def desk(name: str = "support-desk.v1", authorize: Any = None) -> Contract:
    return Contract(
        "support-desk",
        {"plan.changed": PlanChanged, "ticket.flagged": TicketFlagged},
        Reducer(name, {"plan": "free", "flagged": []}, desk_fold),
        authorize,
    )


async def settle(log: SessionLog) -> None:
    while isinstance(effect := next_effect(log.state), Append):
        await log.append(effect.events)


async def submit(log: SessionLog, command: Any) -> None:
    decision = decide(log.state, command)
    await log.append(decision.events)
    await settle(log)


# -- SessionLog ------------------------------------------------------------------------------------


async def test_append_folds_only_what_was_written_and_reopening_gives_the_same_state() -> None:
    store = open_store("memory://")
    log = await SessionLog.open(store, "s-1")
    await submit(log, SendInput("u-1", "hi"))
    await submit(log, SendInput("u-2", "more"))
    assert log.index == len(await store.read("s-1"))
    again = await SessionLog.open(store, "s-1")
    assert again.snapshot() == log.snapshot()


async def test_server_events_get_ids_from_the_session_and_index() -> None:
    store = open_store("memory://")
    log = await SessionLog.open(store, "s-1")
    await submit(log, SendInput("u-1", "hi"))
    events = await store.read("s-1")
    assert [e.id for e in events] == ["u-1", "troupe:u-1:decided", "troupe:s-1#3"]


async def test_an_identical_resubmission_replays_without_new_work_even_after_removal() -> None:
    store = open_store("memory://")
    log = await SessionLog.open(store, "s-1")
    await submit(log, PauseSession("p-1"))
    first = decide(log.state, SendInput("u-1", "hi"))
    await log.append(first.events)
    await submit(log, RemoveInput("r-1", "u-1"))
    index = log.index
    result, applied = await log.append(first.events)
    assert result.duplicate and applied == []
    assert log.index == index
    assert log.state.inbox.items == ()


async def test_reusing_an_input_id_with_other_content_is_a_partial_duplicate() -> None:
    store = open_store("memory://")
    log = await SessionLog.open(store, "s-1")
    await submit(log, SendInput("u-1", "hi"))
    with pytest.raises(PartialDuplicateBatch):
        await log.append(decide(log.state, SendInput("u-1", "something else")).events)
    other = await SessionLog.open(store, "s-2")
    with pytest.raises(PartialDuplicateBatch):  # ids are unique across the store's sessions
        await other.append(decide(other.state, SendInput("u-1", "hi")).events)


async def test_state_at_folds_to_any_point_of_the_log() -> None:
    store = open_store("memory://")
    log = await SessionLog.open(store, "s-1")
    await submit(log, SendInput("u-1", "hi"))
    state, index = await log.state_at(through=2)
    assert index == 2
    assert state.inbox.items[0].id == "u-1" and state.active is None


def _store(backend: str, tmp_path: Path) -> EventStore:
    return open_store("memory://" if backend == "memory" else f"sqlite:///{tmp_path / 'log.db'}")


async def test_a_log_opens_in_one_read_where_the_store_can_and_asks_which_once_per_store_class(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Whether a store is a LogLoader is a runtime protocol check (~4 µs each): asked once per
    # store class, not at every session a host opens.
    monkeypatch.setattr(log_module, "_LOADERS", {})
    sqlite, memory = _store("sqlite", tmp_path), _store("memory", tmp_path)
    loads: list[str] = []
    load_log = sqlite.load_log  # type: ignore[attr-defined]

    async def counted(session_id: str, key: str) -> Any:
        loads.append(session_id)
        return await load_log(session_id, key)

    monkeypatch.setattr(sqlite, "load_log", counted)
    for store in (sqlite, memory):
        for session_id in ("s-1", "s-2"):
            log = await SessionLog.open(store, session_id)
            await submit(log, SendInput(f"u-{session_id}", "hi"))
            assert [m.text for m in (await SessionLog.open(store, session_id)).state.session.messages] == ["hi"]
    assert loads == ["s-1", "s-1", "s-2", "s-2"]  # SQLite's opens took one read each; memory has none
    assert log_module._LOADERS == {type(sqlite): True, type(memory): False}
    await sqlite.close()
    await memory.close()


@pytest.mark.parametrize("backend", ["memory", "sqlite"])  # SQLite loads a log in one read (LogLoader)
async def test_missing_corrupt_and_stale_snapshots_are_rebuilt_from_the_log(backend: str, tmp_path: Path) -> None:
    store = _store(backend, tmp_path)
    log = await SessionLog.open(store, "s-1", snapshot_every=1)
    await submit(log, SendInput("u-1", "hi"))
    await log.settle()  # the snapshot is taken behind the write
    key = snapshot_key(None)
    assert await store.load_snapshot("s-1", key) is not None
    expected = log.snapshot()
    await store.save_snapshot("s-1", key, log.index, b"\xc1garbage")
    assert (await SessionLog.open(store, "s-1")).snapshot() == expected
    await store.save_snapshot("s-1", key, log.index + 50, encode_state(log.state))
    assert (await SessionLog.open(store, "s-1")).snapshot() == expected
    await store.delete_snapshot("s-1", key)
    assert (await SessionLog.open(store, "s-1")).snapshot() == expected
    await store.close()


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_a_snapshot_is_used_when_valid(backend: str, tmp_path: Path) -> None:
    store = _store(backend, tmp_path)
    log = await SessionLog.open(store, "s-1", snapshot_every=1)
    await submit(log, SendInput("u-1", "hi"))
    await log.save_snapshot()  # of the state now (the one taken behind the writes may be older)
    snap = await store.load_snapshot("s-1", snapshot_key(None))
    assert snap is not None and decode_state(snap.data) == log.state
    await submit(log, SendInput("u-2", "more"))  # events after the snapshot, too
    reads = 0
    if isinstance(store, SqliteStore):
        original = store._read

        async def counted(query: Any) -> Any:
            nonlocal reads
            reads += 1
            return await original(query)

        store._read = counted  # type: ignore[method-assign]
    again = await SessionLog.open(store, "s-1")
    assert again.snapshot() == log.snapshot()
    if backend == "sqlite":
        assert reads == 1  # the snapshot, the log's end and the events after it: one trip to a reader
    await store.close()


# -- contracts ---------------------------------------------------------------------------------------


async def test_app_events_fold_into_the_merged_state() -> None:
    store = open_store("memory://")
    contract = desk()
    log = await SessionLog.open(store, "s-1", contract)
    assert log.state.plan == "free" and log.state["flagged"] == []
    payload = contract.validate("plan.changed", {"plan": "pro"})
    await log.append([Event("e-1", "plan.changed", payload), Event("e-2", "ticket.flagged", {"ticketId": "T-1"})])
    assert log.state.plan == "pro"
    assert log.state.flagged == ["T-1"]


def test_a_key_that_shadows_ai_state_is_rejected_when_the_contract_is_defined() -> None:
    with pytest.raises(UsageError, match="shadow AIState"):
        Contract("bad", {}, Reducer("bad.v1", {"messages": [], "inbox": 1}, lambda s, e: s))
    with pytest.raises(UsageError, match="reserved prefix"):
        Contract("bad", {"ai.plan": PlanChanged})


def test_app_event_payloads_are_validated_naming_the_field() -> None:
    with pytest.raises(ParseError) as info:
        desk().validate("plan.changed", {"plan": "gold"})
    assert info.value.field == "payload.plan"
    with pytest.raises(UsageError, match="no event type"):
        desk().validate("plan.deleted", {})


async def test_renaming_the_reducer_rebuilds_from_the_log() -> None:
    store = open_store("memory://")
    log = await SessionLog.open(store, "s-1", desk(), snapshot_every=1)
    await log.append([Event("e-1", "ticket.flagged", {"ticketId": "T-1"})])
    await log.settle()
    # Plant a wrong snapshot under the old name: the renamed reducer must not see it.
    await store.save_snapshot(
        "s-1", snapshot_key(desk()), log.index, encode_state(log.state.with_(app={"plan": "x", "flagged": []}))
    )
    renamed = await SessionLog.open(store, "s-1", desk("support-desk.v2"))
    assert renamed.state.flagged == ["T-1"]
    stale = await SessionLog.open(store, "s-1", desk())
    assert stale.state.plan == "x"  # the old name still reads its own (cached) snapshot


def test_clients_never_push_built_in_events_and_authorize_decides_the_rest() -> None:
    contract = desk(authorize=lambda op: all(e.type != "plan.changed" for e in op.events))
    plan = Event("e-1", "plan.changed", {"plan": "pro"})
    flag = Event("e-2", "ticket.flagged", {"ticketId": "T"})
    assert not contract.allows(Operation("push", "s-1", (plan,)))
    assert contract.allows(Operation("push", "s-1", (flag,)))
    assert not contract.allows(Operation("push", "s-1", (Event("e-3", ai.TURN_STOP, {}),)))
    with pytest.raises(UsageError, match="built-in"):
        check_caller_event(Event("e-3", ai.TURN_STOP, {}))
    with pytest.raises(UsageError, match="reserved prefix"):
        check_caller_event(Event("troupe:x", "ticket.flagged", {}))


async def test_reducer_state_at_any_point() -> None:
    store = open_store("memory://")
    contract = desk()
    log = await SessionLog.open(store, "s-1", contract)
    await log.append([Event("e-1", "ticket.flagged", {"ticketId": "T-1"})])
    await log.append([Event("e-2", "ticket.flagged", {"ticketId": "T-2"})])
    assert contract.reducer is not None
    state, index = await log.state_at(contract.reducer, through=1)
    assert (state["flagged"], index) == (["T-1"], 1)


# -- optimistic display --------------------------------------------------------------------------------


def test_an_idle_send_shows_at_once_with_starting() -> None:
    state = optimistic(Driver().state, [SendInput("u-1", "hi")])
    assert [m.id for m in state.messages] == ["u-1"]
    assert state.starting is True
    assert state.active is not None and state.active.phase == "starting"


def test_later_sends_and_sends_while_paused_wait_in_the_inbox() -> None:
    state = optimistic(Driver().state, [SendInput("u-1", "a"), SendInput("u-2", "b")])
    assert [i.id for i in state.inbox.items] == ["u-2"]
    paused = Driver()
    paused.submit(PauseSession("p-1"))
    state = optimistic(paused.state, [SendInput("u-1", "a")])
    assert [i.id for i in state.inbox.items] == ["u-1"] and not state.messages


def test_steering_an_active_turn_shows_after_the_current_response() -> None:
    d = Driver()
    d.submit(SendInput("u-1", "hi"))
    d.step(TextDelta("Working."), ToolCall("c-1", "t", {}))
    state = optimistic(d.state, [SendInput("s-1", "faster", steer="t1")])
    assert [m.id for m in state.messages][-1] == "s-1"
    assert state.inbox.items == ()


def test_a_pending_stop_clears_the_active_turn_at_once() -> None:
    d = Driver()
    d.submit(SendInput("u-1", "hi"))
    assert optimistic(d.state, [StopTurn("x-1", "t1")]).active is None


# -- properties ----------------------------------------------------------------------------------------

command_lists = st.lists(
    st.one_of(
        st.builds(SendInput, st.sampled_from(["u-1", "u-2", "u-3", "u-4"]), st.just("hi")),
        st.builds(SendInput, st.sampled_from(["s-1", "s-2"]), st.just("steer"), steer=st.sampled_from(["t1", "t2"])),
        st.builds(RemoveInput, st.sampled_from(["r-1", "r-2"]), st.sampled_from(["u-1", "u-2"])),
        st.builds(StopTurn, st.sampled_from(["x-1", "x-2"]), st.none() | st.sampled_from(["t1", "t2"])),
        st.builds(PauseSession, st.sampled_from(["p-1", "p-2"]), st.sampled_from(["after-turn", "now"])),
        st.just("step"),
        st.just("tool"),
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(command_lists)
def test_replaying_the_log_from_zero_equals_the_incrementally_kept_state(commands: list[Any]) -> None:
    d = Driver()
    seen: set[str] = set()
    for command in commands:
        if command == "step":
            if d.state.active is not None and d.settle() is not None and type(d.settle()).__name__ == "RunStep":
                d.step(TextDelta("x"), ToolCall(f"c-{len(d.log)}", "t", {}))
        elif command == "tool":
            if type(d.settle()).__name__ == "RunTool":
                d.tool_done()
        elif command.id not in seen:  # ids are unique across the store: never reuse one
            seen.add(command.id)
            d.submit(command)
    assert fold_events(d.log) == d.state
