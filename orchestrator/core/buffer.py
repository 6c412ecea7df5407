"""Batching stream parts between the model and the log.

Parts are buffered and written as one ``ai.stream`` event per flush (every few milliseconds, or
every few hundred parts), never one write per text-delta. At flush, adjacent text deltas of the
same message are joined: appending ``"A0"`` then ``"01"`` is the same as appending ``"A001"``,
so the fold is unchanged while the log holds the text, not the chunking.
"""

from __future__ import annotations

from orchestrator.core.stream import AgentStreamPart, TextDelta, ToolInputDelta

__all__ = ["coalesce"]


def coalesce(parts: list[AgentStreamPart]) -> list[AgentStreamPart]:
    """``parts`` with runs of text deltas (and argument deltas of one call) joined."""
    if len(parts) < 2:
        return parts
    out: list[AgentStreamPart] = []
    pending: list[str] = []
    pending_kind: type | None = None
    head: AgentStreamPart | None = None

    def close() -> None:
        nonlocal pending, pending_kind, head
        if head is not None:
            if len(pending) == 1:
                out.append(head)
            elif type(head) is TextDelta:
                out.append(TextDelta("".join(pending), head.message_id))
            elif type(head) is ToolInputDelta:
                out.append(ToolInputDelta(head.id, "".join(pending), head.name, head.message_id))
        pending, pending_kind, head = [], None, None

    for part in parts:
        kind = type(part)
        if kind is TextDelta:
            if pending_kind is TextDelta and head is not None and head.message_id == part.message_id:  # type: ignore[union-attr]
                pending.append(part.delta)  # type: ignore[union-attr]
                continue
            close()
            head, pending_kind, pending = part, TextDelta, [part.delta]  # type: ignore[union-attr]
        elif kind is ToolInputDelta:
            if (
                pending_kind is ToolInputDelta
                and head is not None
                and head.id == part.id  # type: ignore[union-attr]
                and head.message_id == part.message_id  # type: ignore[union-attr]
            ):
                pending.append(part.delta)  # type: ignore[union-attr]
                continue
            close()
            head, pending_kind, pending = part, ToolInputDelta, [part.delta]  # type: ignore[union-attr]
        else:
            close()
            out.append(part)
    close()
    return out
