"""Fork a session, with its sub-agents, from any point of its log (time travel).

``fork_session(store, source, target, at)`` makes ``target`` a new session whose log is
``source``'s events ``1..at`` (``EventStore.fork``: each copy has an id of its own, and the fold
reads through it, so ``target`` folds to exactly ``source``'s state at ``at``). From then on the
two run on their own.

- **Sub-agents come along.** Every delegate call started in ``source``'s first ``at`` events has
  a child session ``<source>/<call id>``; its log is forked too, into ``<target>/<call id>``,
  and so on down the tree. The child's fork point is what had happened in it before the parent
  moved past ``at``: the later of the child index the parent had seen (its last ``ai.nested``
  batch of that call carries it) and the child's last event recorded before the parent's event
  ``at + 1`` (by their ``at`` times; all of the child when ``at`` is the parent's last index).
  So a child's tool call that had started by then counts as started, even if the parent had not
  heard of it yet: a ``report`` tool is never run twice across a fork at any depth. A child
  that had not started a turn by then is not copied: the fork starts it afresh from its task.
- **A fork in the middle of a turn** is that turn interrupted, exactly as a crash at ``at``
  would leave it: when the fork is first used, recovery applies the tools' policies
  (``orchestrator.core.recovery``). A ``report`` call that had started by ``at`` is never run
  again in the fork: it gets "interrupted; it may have partly run". A call that had not started
  by ``at`` runs in the fork (the fork rewinds to before it).
- **Ids before the fork point belong to the source.** Inputs and commands keep their ids in the
  fork's state (a message's id, a receipt's command id), but the store holds them under the
  source; a command sent to the fork needs a new id.
- **Nothing is written for a bad fork**: ``at`` beyond the log or negative, or a target (or a
  target's sub-agent session) that already has events, raises ``UsageError`` first. The sub-agent
  logs are written before the root's, so the root's log appearing means the fork is complete.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.core import event_types as ai
from orchestrator.core.errors import UsageError
from orchestrator.core.ids import CHILD_SEPARATOR, child_session_id
from orchestrator.store._fork import check_fork
from orchestrator.store.base import EventStore

__all__ = ["ForkStep", "fork_session", "plan_fork"]


@dataclass(frozen=True, slots=True)
class ForkStep:
    """One log of a fork: ``target`` starts with ``source``'s events ``1..through``."""

    source: str
    target: str
    through: int


async def plan_fork(store: EventStore, source: str, target: str, at: int) -> list[ForkStep]:
    """The logs a fork of ``source`` at ``at`` writes, the root first (checks everything, writes nothing)."""
    src, dst, through = check_fork(source, target, at)
    if CHILD_SEPARATOR in dst:
        raise UsageError(
            f"cannot fork into {dst!r}: use an id without {CHILD_SEPARATOR!r} ('/' joins sub-agent sessions)"
        )
    last = await store.last_index(src)
    if through > last:
        raise UsageError(
            f"cannot fork {src!r} at index {through}: its log ends at {last}; pass an index from 0 to {last}"
        )
    steps = [ForkStep(src, dst, through)]
    await _children(store, steps[0], steps)
    for step in steps:
        if await store.last_index(step.target) > 0:
            raise UsageError(f"cannot fork into {step.target!r}: that session already has events; choose a new id")
    return steps


async def _children(store: EventStore, step: ForkStep, steps: list[ForkStep]) -> None:
    seen: dict[str, int] = {}
    started: list[str] = []
    read = await store.read(step.source, after=0, limit=step.through + 1) if step.through else []
    prefix, after = read[: step.through], read[step.through :]
    until = after[0].at if after else float("inf")  # the parent's next event, if it has one
    for event in prefix:
        if event.type == ai.CHILD_STARTED:
            started.append(str(event.payload.get("callId")))
        elif event.type == ai.NESTED:
            call_id, seq = str(event.payload.get("callId")), event.payload.get("seq")
            if isinstance(seq, int) and not isinstance(seq, bool):
                seen[call_id] = max(seen.get(call_id, 0), seq)
    for call_id in started:
        child = child_session_id(step.source, call_id)
        log = await store.read(child)
        happened = max((e.index for e in log if e.at < until), default=0)
        through = min(max(seen.get(call_id, 0), happened), len(log))
        events = log[:through]
        if not any(e.type == ai.TURN_STARTED for e in events):
            continue  # not started by then: the fork's recovery starts it from its task
        sub = ForkStep(child, child_session_id(step.target, call_id), through)
        steps.append(sub)
        await _children(store, sub, steps)


async def fork_session(store: EventStore, source: str, target: str, at: int) -> list[ForkStep]:
    """Fork ``source`` at index ``at`` into the new session ``target``, sub-agents included.

    Returns:
        The logs written, the root first.

    Raises:
        UsageError: a bad ``at`` or an existing target (see the module docstring); nothing is written.
    """
    steps = await plan_fork(store, source, target, at)
    for step in reversed(steps):  # children first: the root's log is the fork's commit point
        await store.fork(step.source, step.target, step.through)
    return steps
