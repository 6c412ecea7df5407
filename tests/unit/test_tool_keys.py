"""``ToolContext.idempotency_key``: one key per tool call, unique across the store, stable through a rerun."""

from __future__ import annotations

from actors.local import LocalRuntime
from orchestrator.core.ids import tool_call_key
from orchestrator.run.agent import Agent
from orchestrator.testing import ScriptedModel
from tools import ToolContext, tool

SEEN: list[tuple[str, str, str]] = []
"""(session id, call id, idempotency key) of every call of ``charge``."""


@tool(recovery="report")
async def charge(amount: int, ctx: ToolContext) -> str:
    """Charge a card (a side effect an external system de-duplicates by key).

    Args:
        amount: How much.
        ctx: The call's context.
    """
    SEEN.append((ctx.session_id, ctx.call_id, ctx.idempotency_key))
    return "charged"


cashier = Agent(
    "cashier",
    "Charge.",
    ScriptedModel([[{"tool": "charge", "input": {"amount": 5}}], [{"text": "Done."}]], per_turn=True),
    tools=[charge],
)


async def test_two_sessions_first_calls_get_different_keys() -> None:
    SEEN.clear()
    async with LocalRuntime("memory://") as rt:
        for sid in ("shop-a", "shop-b"):
            result = await (await rt.session(sid, agent=cashier).prompt("charge me")).finished
            assert result.success
    (sid_a, call_a, key_a), (sid_b, call_b, key_b) = SEEN
    assert call_a == call_b  # the scripted model's call ids repeat in every session
    assert key_a != key_b
    assert (key_a, key_b) == (tool_call_key(sid_a, call_a), tool_call_key(sid_b, call_b))  # derived, so stable


def test_the_key_joins_session_and_call_unambiguously() -> None:
    assert tool_call_key("a/b", "c") != tool_call_key("a", "b/c")
    assert tool_call_key("a:b", "c") != tool_call_key("a", "b:c")
    assert tool_call_key("s", "call-1") == tool_call_key("s", "call-1")
