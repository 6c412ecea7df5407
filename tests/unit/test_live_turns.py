"""A live view keeps ``confirmed`` current from the ``turn`` and ``info`` mutations.

``mutations.diff`` sends a ``turn`` and then an ``info`` (which repeats the turn) at one index for
every turn that changed; the view tracks the ``info`` alone (``_repeated_by_info``). These tests
feed the mutations of a real session's log to a view that does and one that tracks both.
"""

from __future__ import annotations

import itertools
from typing import Any, cast

import pytest

from actors import live
from actors.bench.shop import PROMPTS, shop_agent
from actors.live import LiveView
from actors.local import LocalRuntime
from actors.mutation import Mutation
from orchestrator.core.events import Event
from orchestrator.core.fold import evolve, initial_state
from orchestrator.core.mutations import diff, turn_of

TIMEOUT = 30


async def _shop_log() -> list[Event]:
    """The events of one shop session (three turns, tool calls, a sub-agent)."""
    async with LocalRuntime() as rt:
        session = rt.session("s-1", agent=shop_agent())
        for prompt in PROMPTS:
            turn = await session.prompt(prompt)
            assert (await turn.finished).success
        events: list[Event] = await rt.store.read("s-1")
        return events


def _batches(events: list[Event]) -> list[list[Mutation]]:
    """Each event's mutations, as a host's listener makes them."""
    contract = shop_agent().contract
    state = initial_state(contract)
    out = []
    for event in events:
        after, _ = evolve(state, event, contract)
        out.append([Mutation(m) for m in diff(state, after, event.index)])
        state = after
    return out


def _view() -> LiveView[Any, Any]:
    """A view fed by hand (``_apply``): no session behind it."""
    return LiveView(cast(Any, None))


async def test_tracking_the_info_alone_keeps_confirmed_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    batches = _batches(await _shop_log())
    repeated = sum(1 for b in batches for m, f in itertools.pairwise(b) if live._repeated_by_info(m, f))
    assert repeated >= 9  # the log's turn changes: each a turn then an info, at one index
    skipping = _view()
    for batch in batches:
        skipping._apply(batch)
    monkeypatch.setattr(live, "_repeated_by_info", lambda _m, _f: False)
    both = _view()
    for batch in batches:
        both._apply(batch)
    for field in ("active", "last_turn", "turns", "inbox", "usage"):
        assert getattr(skipping.confirmed, field) == getattr(both.confirmed, field), field


async def test_the_view_agrees_with_the_server_after_every_event() -> None:
    events = await _shop_log()
    contract = shop_agent().contract
    view = _view()
    state = initial_state(contract)
    for event in events:
        after, _ = evolve(state, event, contract)
        view._apply([Mutation(m) for m in diff(state, after, event.index)])
        state = after
        confirmed = view.confirmed  # the turn as the wire has it: no step model, for one
        assert (turn_of(confirmed), confirmed.last_turn, confirmed.turns) == (
            turn_of(state),
            state.last_turn,
            state.turns,
        )
        assert confirmed.inbox == state.inbox
        assert confirmed.session == state.session
