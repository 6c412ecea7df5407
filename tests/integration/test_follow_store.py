"""Subscriptions that follow the store's log (PostgreSQL's NOTIFY) instead of long-polling the host.

``Runtime(follow="store")`` is what ``troupe serve`` uses: a process that hosts none of its
sessions sees every commit through the store. The mutations must be the very ones the host
sends: a view fed by the store and one fed by the host end equal, nested sub-agents included.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from actors.runtime import Runtime
from orchestrator.core.fold import fold_events
from tests.fixtures.agents import delegating

from .test_runtime import assert_nested_two_levels

TIMEOUT = 60


@pytest.mark.slow
async def test_a_store_fed_view_equals_the_host_fed_one_and_polls_no_host(pg_url: str) -> None:
    namespace = f"f-{uuid.uuid4().hex[:8]}"
    rt = Runtime(store=pg_url, namespace=namespace, hosts_per_node=2, follow="store")
    await rt.start()
    try:
        agent = delegating()
        session = rt.session("followed", agent=agent)
        by_store = await session.live()
        turn = await session.prompt("compare")
        result = await asyncio.wait_for(turn.finished, TIMEOUT)
        assert result.success
        await by_store.wait_for(lambda view: view.index >= result.index, TIMEOUT)
        # Nothing was long-polled from a host for it: the store's follower fed the view.
        assert all(not poller.subscribers for poller in rt._pollers.values())
        log = await rt.store.read(session.id)
        folded = fold_events(log, None, agent.contract)
        assert by_store.view.state.messages == folded.messages  # the log, refolded, is the live state
        assert_nested_two_levels(by_store.view.state.messages)
        # A view fed by the host (the default path) agrees with it, turn after turn.
        rt.follow = "hosts"
        by_host = await session.live()
        try:
            assert by_host.view.state.messages == by_store.view.state.messages
            second = await asyncio.wait_for((await session.prompt("again")).finished, TIMEOUT)
            await by_store.wait_for(lambda view: view.index >= second.index, TIMEOUT)
            await by_host.wait_for(lambda view: view.index >= second.index, TIMEOUT)
            assert by_store.view.state.messages == by_host.view.state.messages
            assert by_store.view.state.messages == (await session.state()).state.messages
        finally:
            await by_host.close()
        await by_store.close()
    finally:
        await rt.close()
