"""Approvals anywhere in a session's tree, and how an answer finds the session that asked.

A sub-agent's approval belongs to the sub-agent's own session (its log records the question
and the answer). The parent sees it as a nested tool call in ``awaiting-confirmation``; to
answer it through the parent, the interaction id is qualified with the path of delegate calls
that leads to it: ``<delegate call>/<interaction id>``, one segment per level. The parent hands
the rest of the id to its child, which does the same, until the session that asked decides.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from orchestrator.core.aistate import AIState
from orchestrator.core.ids import approval_id
from orchestrator.core.parts import AgentMessage, NestedRun, ToolPart

__all__ = ["PendingApproval", "approval_id", "nested_approvals", "pending_approvals", "split_nested"]

_SEPARATOR = "/"


def split_nested(interaction_id: str) -> tuple[str, str] | None:
    """``(delegate call id, the child's interaction id)`` for a qualified id, else ``None``."""
    call_id, sep, rest = interaction_id.partition(_SEPARATOR)
    return (call_id, rest) if sep and call_id and rest else None


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A tool call, in this session or a sub-agent's, waiting for the user's answer."""

    id: str
    """What to pass to ``respond`` on this session (qualified for a sub-agent's approval)."""
    call_id: str
    """The waiting tool call (in the session that asked)."""
    name: str
    """The tool's name."""
    prompt: str
    """What to ask."""
    path: tuple[str, ...] = ()
    """The delegate calls that lead to the session that asked (empty: this session)."""


def pending_approvals(state: AIState) -> list[PendingApproval]:
    """Every approval waiting in the session's tree: its own first, then its sub-agents'."""
    own = [
        PendingApproval(i.id, i.call_id, i.name, i.prompt) for i in state.interactions.values() if i.status == "pending"
    ]
    return own + nested_approvals(state.messages)


def nested_approvals(messages: Sequence[AgentMessage]) -> list[PendingApproval]:
    """The sub-agents' waiting approvals, from the conversation alone (what a client's view holds)."""
    return list(_nested(messages, ()))


def _nested(messages: Sequence[AgentMessage], path: tuple[str, ...]) -> Iterator[PendingApproval]:
    for message in messages:
        for part in message.parts:
            if type(part) is not ToolPart:
                continue
            if path and part.state == "awaiting-confirmation":
                qualified = _SEPARATOR.join((*path, approval_id(part.id)))
                yield PendingApproval(qualified, part.id, part.name, part.prompt or "", path)
            if isinstance(part.agent, NestedRun) and part.state in ("running", "awaiting-confirmation"):
                yield from _nested(part.agent.messages, (*path, part.id))
