"""The JSON of a session's state as the HTTP API returns it (``GET .../state``, SSE snapshots)."""

from __future__ import annotations

from typing import Any

from pydantic_core import to_jsonable_python

from orchestrator.core.aistate import AIState
from orchestrator.core.approvals import nested_approvals
from orchestrator.core.mutations import info_of, interaction_to_wire, turn_of, usage_of
from orchestrator.core.wire import state_to_wire

__all__ = ["state_json"]


def state_json(state: AIState) -> dict[str, Any]:
    """The conversation (``state_to_wire``: messages, status, error) and what surrounds it.

    ``inbox`` (pending inputs, paused), ``active`` (the turn, with its step), ``lastTurn``,
    ``interactions`` (approvals; a sub-agent's carries its ``path``), ``app`` (the contract's
    state) and ``usage``, in camelCase.
    """
    out = state_to_wire(state.session)
    info = info_of(state)
    out["inbox"] = {"items": info["queued"], "paused": state.inbox.paused}
    out["active"] = turn_of(state)
    out["lastTurn"] = info["lastTurn"]
    out["interactions"] = [
        interaction_to_wire(i) for i in state.interactions.values()
    ] + [  # a sub-agent's, answered through this session by its qualified id
        {"id": a.id, "callId": a.call_id, "name": a.name, "prompt": a.prompt, "status": "pending", "path": list(a.path)}
        for a in nested_approvals(state.messages)
    ]
    out["app"] = to_jsonable_python(dict(state.app), fallback=str)
    out["usage"] = usage_of(state)
    return out
