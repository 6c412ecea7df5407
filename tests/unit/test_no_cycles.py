"""A session's writes leave nothing for the cyclic garbage collector: reference counting frees them.

Every write makes many short-lived states, events and folds. If one of them sits in a reference
cycle (a closure that calls itself is one), everything it reaches waits for a collection, and a
collection's cost grows with what the process holds: at 1,000 sessions the shop benchmark spent
a quarter of its CPU collecting. This runs whole turns (text, a tool, a sub-agent, a stop) with
the collector off and ``DEBUG_SAVEALL`` on, and then counts what a collection finds.
"""

from __future__ import annotations

import asyncio
import gc
from collections import Counter
from collections.abc import Iterator

import pytest

from actors.bench.shop import PROMPTS, shop_agent
from actors.client import Session
from actors.local import LocalRuntime
from orchestrator.run.agent import Agent
from orchestrator.surfaces.http.views import Views
from orchestrator.testing import ScriptedModel, eventually

TIMEOUT = 30

ENGINE_TYPES = {
    "Event",
    "Applied",
    "AIState",
    "SessionState",
    "AgentMessage",
    "TextPart",
    "ToolPart",
    "Stream",
    "ApplyPart",
    "TurnFinished",
    "Session",
    "LiveView",
    "ClientView",
}
"""What the engine makes on every write, and the client's handles: none may be left to the collector."""


@pytest.fixture
def collector_off() -> Iterator[None]:
    """The collector off, saving what a collection finds in ``gc.garbage`` (see ``_garbage``).

    Everything alive when the test starts is held until it ends: an earlier test's objects that
    become garbage meanwhile (a server it started, shutting down late) are not counted as this
    test's. Only what the test makes can be found.
    """
    gc.collect()
    alive = gc.get_objects()
    was = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        del alive
        if was:
            gc.enable()


def _garbage() -> Counter[str]:
    gc.collect()
    kinds = Counter(type(o).__qualname__ for o in gc.garbage)
    gc.garbage.clear()
    return kinds


async def test_turns_with_tools_a_sub_agent_and_a_live_view_leave_no_garbage(
    tmp_path: object, collector_off: None
) -> None:
    async with LocalRuntime(store=f"sqlite:///{tmp_path}/s.db") as rt:
        session = rt.session("s-1", agent=shop_agent())
        _garbage()  # what opening the runtime made
        view = await session.live()
        for prompt in PROMPTS:
            turn = await session.prompt(prompt)
            result = await asyncio.wait_for(turn.finished, TIMEOUT)
            assert result.success, result
            await view.wait_for(lambda v, at=result.index: v.index >= at, TIMEOUT)
        assert view.queue is not view.queue  # made on use (kept, it would be a cycle)
        await view.close()
        del view, session
        kinds = _garbage()
    assert not ENGINE_TYPES & set(kinds), f"left to the cycle collector: {dict(kinds.most_common(12))}"


async def test_a_stopped_turn_leaves_no_engine_garbage(tmp_path: object, collector_off: None) -> None:
    slow = Agent("slow", "x", ScriptedModel([[{"text": "thinking " * 200, "chunk": 9, "pace": 0.01}]]))
    async with LocalRuntime(store=f"sqlite:///{tmp_path}/s.db") as rt:
        session = rt.session("s-1", agent=slow)
        _garbage()
        turn = await session.prompt("go")
        view = await session.live()

        def streaming() -> bool:
            messages = view.view.state.messages
            return bool(messages) and messages[-1].role == "assistant" and bool(messages[-1].text)

        await eventually(streaming, TIMEOUT)
        await turn.stop()
        result = await asyncio.wait_for(turn.finished, TIMEOUT)
        assert not result.success
        await view.close()
        kinds = _garbage()
    assert not ENGINE_TYPES & set(kinds), f"left to the cycle collector: {dict(kinds.most_common(12))}"


async def _follow_then_drop(session: Session) -> None:
    """An HTTP server's view of ``session`` through a turn, dropped when idle, then one dropped at close."""
    views = Views(idle=0.05)
    followed = await views.follow(session)
    # A stream reads the view through the turn, as an SSE client would: a followed view nobody
    # streams from or waits on is dropped after ``idle``, and on a busy machine the turn took
    # longer than that (the view closed, and ``reach`` waited out its timeout).
    feed = followed.attach()
    turn = await session.prompt(PROMPTS[0])
    result = await asyncio.wait_for(turn.finished, TIMEOUT)
    assert result.success, result
    assert await followed.reach(result.index, TIMEOUT)
    followed.detach(feed)
    del followed, feed
    await eventually(lambda: not views.followed, TIMEOUT)  # the sweeper dropped the idle view
    await views.follow(session)
    await views.close()  # and the server closing drops the rest


async def test_an_http_servers_view_leaves_no_garbage_once_dropped(tmp_path: object, collector_off: None) -> None:
    """A view the server stops following (idle, or the server closing) is freed by reference counting."""
    async with LocalRuntime(store=f"sqlite:///{tmp_path}/s.db") as rt:
        session = rt.session("s-1", agent=shop_agent())
        _garbage()
        await _follow_then_drop(session)
        del session
        kinds = _garbage()
    left = (ENGINE_TYPES | {"Followed"}) & set(kinds)
    assert not left, f"left to the cycle collector: {dict(kinds.most_common(12))}"
