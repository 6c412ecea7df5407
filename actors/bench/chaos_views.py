"""The live views of ``troupe bench chaos``: one per session for the whole run, checked against the log.

A client's ``LiveView`` (``session.live()``) is fed by long polls (``actors.poller``) from the
host's ``MutationHub``. Whatever the faults do to the host (a SIGKILL, a ``stall`` long enough to
look like a client gone away, a node removed), the view must end where the log ends, with nothing
missed and nothing applied twice. So each session's view is opened before its first turn and kept
open through every fault; at the end it is waited for (bounded) until it reaches the log's last
index, and what it shows is compared with the log folded through the index it reached:

- the conversation (``view.view.state``): status and error, every message (id, role, revision,
  metadata) and every part (text, tool name, input, state, output, error), nested runs included;
- beyond the conversation (``view.confirmed``): the active turn, the last turn and its outcome,
  and the queued inputs.

Any difference is a ``ViewMismatch`` (``describe_difference`` says where, in a few words).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from actors.client import LiveView
from actors.mutation import Mutation
from actors.runtime import Runtime
from orchestrator.core.aistate import AIState
from orchestrator.core.fold import fold_events
from orchestrator.core.parts import AgentMessage, MessagePart, NestedRun, ReasoningPart, TextPart, ToolPart
from orchestrator.core.state import SessionState
from orchestrator.run.agent import Agent

__all__ = ["VIEW_WAIT", "SessionViews", "ViewMismatch", "describe_difference", "describe_turns"]

VIEW_WAIT: Final = 60.0
"""Seconds a view may take, once its session finished, to reach the log's last index."""

_SHOWN: Final = 40
"""Characters of a text quoted in a difference (its start and its length say the rest)."""


@dataclass(frozen=True)
class ViewMismatch:
    """A session whose live view differs from its log (a failure of the run)."""

    session_id: str
    """The session."""
    difference: str
    """Where the view differs, in a few words (``describe_difference``)."""


def describe_difference(
    seen: SessionState | NestedRun, stored: SessionState | NestedRun, *, where: str = "session"
) -> str | None:
    """The first way the conversation ``seen`` differs from ``stored``, in a few words; ``None``: equal.

    ``seen`` is a view's, ``stored`` the log's: the words say what the view has "where the log has" what.
    """
    if seen == stored:
        return None
    if seen.status != stored.status:
        return f"{where}: status {seen.status!r} where the log has {stored.status!r}"
    if seen.error != stored.error:
        return f"{where}: error {seen.error!r} where the log has {stored.error!r}"
    shown, logged = list(seen.messages), list(stored.messages)
    for position, (mine, theirs) in enumerate(zip(shown, logged, strict=False)):
        found = _message_difference(mine, theirs, f"{where} message {position} ({theirs.id})")
        if found is not None:
            return found
    if len(shown) != len(logged):
        extra = ", ".join(m.id for m in shown[len(logged) :]) or "none"
        missing = ", ".join(m.id for m in logged[len(shown) :]) or "none"
        return f"{where}: {len(shown)} messages where the log has {len(logged)} (extra: {extra}; missing: {missing})"
    return f"{where}: differs from the log"  # a field the checks above do not name


def describe_turns(seen: AIState, stored: AIState) -> str | None:
    """The first way the turns and the queue of ``seen`` differ from ``stored`` (``None``: the same).

    Only what a ``LiveView`` keeps current from its mutations beside the conversation is compared
    (``LiveView.confirmed``): the active turn, the last turn and its outcome, the queued inputs.
    """
    active = seen.active.id if seen.active is not None else None
    logged = stored.active.id if stored.active is not None else None
    if active != logged:
        return f"active turn {active!r} where the log has {logged!r}"
    if seen.last_turn != stored.last_turn:
        return f"last turn {seen.last_turn!r} where the log has {stored.last_turn!r}"
    queued, waiting = [i.id for i in seen.inbox.items], [i.id for i in stored.inbox.items]
    if queued != waiting:
        return f"queued inputs {queued} where the log has {waiting}"
    return None


def _message_difference(seen: AgentMessage, stored: AgentMessage, where: str) -> str | None:
    if seen == stored:
        return None
    if seen.id != stored.id or seen.role != stored.role:
        return f"{where}: {seen.role} message {seen.id} where the log has {stored.role} message {stored.id}"
    for mine, theirs in zip(seen.parts, stored.parts, strict=False):
        found = _part_difference(mine, theirs, f"{where} part {theirs.id}")
        if found is not None:
            return found
    if len(seen.parts) != len(stored.parts):
        ids = [p.id for p in seen.parts], [p.id for p in stored.parts]
        return f"{where}: parts {ids[0]} where the log has {ids[1]}"
    if seen.revision != stored.revision:
        return f"{where}: revision {seen.revision} where the log has {stored.revision}"
    return f"{where}: metadata {seen.metadata!r} where the log has {stored.metadata!r}"


def _part_difference(seen: MessagePart, stored: MessagePart, where: str) -> str | None:
    if seen == stored:
        return None
    if type(seen) is not type(stored) or seen.id != stored.id:
        return f"{where}: a {seen.type} part {seen.id} where the log has a {stored.type} part {stored.id}"
    if isinstance(seen, TextPart | ReasoningPart) and isinstance(stored, TextPart | ReasoningPart):
        return f"{where}: text {_quote(seen.text)} where the log has {_quote(stored.text)}"
    if isinstance(seen, ToolPart) and isinstance(stored, ToolPart):
        for name in ("name", "state", "input", "output", "error", "prompt"):
            mine, theirs = getattr(seen, name), getattr(stored, name)
            if mine != theirs:
                return f"{where}: tool {name} {_quote(mine)} where the log has {_quote(theirs)}"
        if seen.agent is not None and stored.agent is not None:
            found = describe_difference(seen.agent, stored.agent, where=f"{where} (nested run)")
            if found is not None:
                return found
        elif seen.agent is not stored.agent:
            return f"{where}: nested run {seen.agent!r} where the log has {stored.agent!r}"
    return f"{where}: {seen!r} where the log has {stored!r}"


def _quote(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}... ({len(text)} chars)"


class SessionViews:
    """A ``LiveView`` per session, opened before its first turn, checked against the log at the end."""

    def __init__(self, rt: Runtime, agent: Agent, *, wait: float = VIEW_WAIT) -> None:
        self.rt = rt
        self.agent = agent
        self.wait = wait
        """Seconds a view may take to reach its log's last index (``VIEW_WAIT``)."""
        self.views: dict[str, LiveView] = {}
        self.mismatches: list[ViewMismatch] = []
        """Views that could not open, did not reach the log's end, or differ from it."""
        self.resets = 0
        """Batches that told a view to re-read its snapshot (``reset``), over every view."""

    async def open(self, session_id: str) -> None:
        """Open the session's view (a view that cannot open is a mismatch: nothing checks it)."""
        try:
            view = await self.rt.session(session_id, agent=self.agent).live()
        except Exception as error:  # a view the faults stopped from opening is a failure too
            self.mismatches.append(ViewMismatch(session_id, f"its live view did not open ({error!r})"))
            return
        view.listeners.append(self._count_resets)
        self.views[session_id] = view

    def _count_resets(self, batch: list[Mutation]) -> None:
        if any(m.type == "reset" for m in batch):
            self.resets += 1

    async def open_all(self, ids: Iterable[str], *, concurrency: int) -> None:
        """Open the views of ``ids``, ``concurrency`` at a time (before their sessions start)."""
        gate = asyncio.Semaphore(concurrency)

        async def one(session_id: str) -> None:
            async with gate:
                await self.open(session_id)

        await asyncio.gather(*(one(s) for s in ids))

    async def check(self, ids: Iterable[str]) -> int:
        """Compare each open view of ``ids`` with its log (see the module docstring), then close it.

        Returns how many views were compared; the differences are in ``mismatches``.
        """
        gate = asyncio.Semaphore(32)  # log reads and folds, a few at a time (the waits all at once)

        async def one(session_id: str) -> bool:
            view = self.views.pop(session_id, None)
            if view is None:
                return False
            try:
                found = await self._compare(session_id, view, gate)
            finally:
                await view.close()
            if found is not None:
                self.mismatches.append(ViewMismatch(session_id, found))
            return True

        checked = await asyncio.gather(*(one(s) for s in ids))
        return sum(checked)

    async def _compare(self, session_id: str, view: LiveView, gate: asyncio.Semaphore) -> str | None:
        last = await self.rt.store.last_index(session_id)
        try:
            await view.wait_for(lambda _: view.index >= last, timeout=self.wait)
        except TimeoutError:
            running = "following" if view.running else "stopped"
            return f"the view ({running}) reached index {view.index} of {last} within {self.wait:g} s"
        seen, confirmed, at = view.view.state, view.confirmed, view.index  # one moment: no await between
        async with gate:
            log = await self.rt.store.read(session_id)
            if at > (log[-1].index if log else 0):
                return f"the view is at index {at}, past the log's last ({log[-1].index if log else 0})"
            stored = fold_events((e for e in log if e.index <= at), None, None)
        found = describe_difference(seen, stored.session)
        if found is None:
            found = describe_turns(confirmed, stored)
        return None if found is None else f"at index {at}: {found}"

    async def close(self) -> None:
        """Close the views not checked (a run that ended early)."""
        views, self.views = list(self.views.values()), {}
        for view in views:
            await view.close()
