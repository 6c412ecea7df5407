"""What a host keeps after its sessions are gone: nothing per session (long-running hosts)."""

from __future__ import annotations

import asyncio

import pytest

from actors.bench.shop import PROMPTS, shop_agent
from actors.local import LocalRuntime
from orchestrator.run.agent import Agent
from orchestrator.testing import ScriptedModel, eventually
from tools import ToolContext, builtin

TIMEOUT = 10


async def test_sessions_that_leave_memory_on_their_own_leave_nothing_behind() -> None:
    rt = LocalRuntime(idle_timeout=0.05)
    await rt.start()
    try:
        agent = Agent("a", "x", ScriptedModel([[{"text": "Done."}]], per_turn=True))
        turns = [await rt.session(f"s-{i}", agent=agent).prompt("hi") for i in range(30)]
        assert all(r.success for r in await asyncio.wait_for(asyncio.gather(*(t.finished for t in turns)), TIMEOUT))
        host = rt.host
        assert host is not None

        def left() -> bool:  # each leaves after 50 ms of quiet, and its finished deactivation is let go
            held = host.held()
            return held["active"] == 0 and held["deactivating"] == 0

        await eventually(left, TIMEOUT, what="every session left memory")
        assert host.held()["turn_watches"] == 0
    finally:
        await rt.close()


async def test_the_demo_cart_keeps_a_bounded_number_of_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(builtin, "_RECENT_CARTS", 3)
    builtin.clear_carts()
    for i in range(5):
        ctx = ToolContext(session_id=f"s-{i}", call_id=f"c-{i}", turn_id="t1")
        assert await builtin.add_to_cart.fn("mug", 1, ctx=ctx) == "Added."
    assert [builtin.cart(f"s-{i}") for i in range(5)] == [{}, {}, {"mug": 1}, {"mug": 1}, {"mug": 1}]
    builtin.clear_carts()


async def test_a_client_that_stops_following_lets_the_host_drop_the_sessions_at_once(rt: LocalRuntime) -> None:
    agent = Agent("a", "x", ScriptedModel([[{"text": "Done."}]], per_turn=True))
    sessions = [rt.session(f"f-{i}", agent=agent) for i in range(10)]
    views = [await s.live() for s in sessions]
    for session in sessions:
        assert (await asyncio.wait_for((await session.prompt("hi")).finished, TIMEOUT)).success
    host = rt.host
    assert host is not None and host.held()["followed"] == 10
    for view in views:
        await view.close()
    # Well before the 5 s a waiting poll would take to come back by itself.
    await eventually(lambda: host.hub.stats()["followed"] == 0, 1.0, what="the host dropped every session")


def _empty_sets(obj: object) -> list[str]:
    """The attributes of ``obj`` that are empty sets (216 bytes each, for nothing)."""
    slots: tuple[str, ...] = getattr(type(obj), "__slots__", ())
    fields = vars(obj) if hasattr(obj, "__dict__") else {name: getattr(obj, name) for name in slots}
    return [name for name, value in fields.items() if isinstance(value, set) and not value]


async def test_a_followed_session_and_its_sub_agent_keep_no_empty_sets(rt: LocalRuntime) -> None:
    # Empty sets kept for the rare case (a background task, a model lookup, a second poller) were
    # about 1 KB for a session with a sub-agent: at a thousand sessions, a megabyte for nothing.
    shop = rt.session("shop-sets", agent=shop_agent())
    view = await shop.live()
    try:
        result = await asyncio.wait_for((await shop.prompt(PROMPTS[0])).finished, TIMEOUT)
        assert result.success
        host = rt.host
        assert host is not None
        runners = [h.runner for sid, h in host.hosted.items() if sid.startswith("shop-sets")]
        assert len(runners) == 2  # the session and its researcher
        for runner in runners:
            for part in (runner, runner._steps, runner._calls):
                assert not _empty_sets(part), f"{runner.session_id}: {type(part).__name__}: {_empty_sets(part)}"
        channel = host.hub._channels["shop-sets"]
        assert len(channel.pollers) == 1 and not isinstance(channel.pollers, set)
        assert not _empty_sets(view)  # the client's side too: a live view per followed session
    finally:
        await view.close()


def test_the_records_kept_per_session_and_per_running_call_have_no_instance_dict() -> None:
    # A dataclass without slots carries a dict (~100 bytes more) per instance: one per hosted
    # session, per running step and tool call, and per client view.
    from actors.host import _Hosted
    from orchestrator.core.mutations import ClientView
    from orchestrator.run.steps import StepWork
    from orchestrator.run.tool_calls import ToolWork

    for cls in (_Hosted, ClientView, StepWork, ToolWork):
        assert "__slots__" in vars(cls) and "__dict__" not in dir(cls), cls.__name__
