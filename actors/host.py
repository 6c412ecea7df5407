"""``SessionHost``: a long-lived actor that hosts many sessions as virtual actors.

Each session is a ``SessionRunner`` (its fold, its mailbox, its run loop), activated on its first
command and deactivated after ``idle_timeout`` of quiet (its state stays in the store). Commands
for one session run strictly one at a time (the runner's lock); sessions run concurrently.

A host is restartable: a crash re-runs ``__init__``, and ``recover`` re-activates the sessions
it had (listed in the store, ``actors.directory``), each of which recovers its own unfinished
work. In ``dedicated`` placement a host holds exactly one session at a time. Sub-agent sessions
are run for their parents by ``actors.subagents``.

A plain class that imports no Ray: the in-process runtime runs it as is, and what it needs of a
cluster (other hosts, the supervisor, its node, how agents arrive) comes in as its ``Cluster``
(``actors.ray_cluster`` on Ray); ``actors.options`` makes it a Ray actor.

Every method is safe to call more than once (Ray may retry, or a caller may repeat after a
failure): commands are idempotent by id, deliveries by sequence number.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import resource
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from actors.boot import BootTimes
from actors.cluster import Cluster
from actors.directory import HostDirectory
from actors.errors import SessionMoved
from actors.host_options import HostOptions
from actors.hub import MutationHub
from actors.idle_checks import EARLY, IdleChecks
from actors.logs import default_logging
from actors.memory import TrimSchedule, memory_report
from actors.registry import AgentRegistry
from actors.schedules import MCP_RESTART
from actors.subagents import SubAgents
from actors.turn_watches import TurnWatches
from orchestrator.core.aistate import AIState
from orchestrator.core.commands import Command
from orchestrator.core.errors import UsageError
from orchestrator.core.events import Event
from orchestrator.core.mutations import diff
from orchestrator.run.background import run_kept
from orchestrator.run.children import ChildBatch, ChildRequest, ChildResult
from orchestrator.run.gc_tuning import tune_gc
from orchestrator.run.log import Applied
from orchestrator.run.pacing import StreamPacer
from orchestrator.run.runner import SessionRunner
from orchestrator.run.turn_commands import steer_turn, stop_turn
from orchestrator.store import open_store
from orchestrator.store.base import EventStore
from tools.mcp import registry as mcp_connections

__all__ = ["BATCHED_CALLS", "TURN_WAIT_LIMIT", "ClusterFactory", "HostOptions", "SessionHost"]

log = structlog.get_logger()

BATCHED_CALLS = frozenset(
    {"command", "commands", "steer", "stop", "turn_of", "push", "snapshot", "snapshot_follow", "state_at"}
)
"""The session calls ``SessionHost.calls`` runs: each answers within a group commit or a read (none
waits on a turn), so none holds up the rest of its batch."""
TURN_WAIT_LIMIT = 24 * 3600.0
"""Seconds a host waits on one turn's end for a client (``Turn.finished``)."""


ClusterFactory = Callable[[str, HostOptions], Cluster]
"""Builds a host's cluster from its name and options (in the host's process: Ray re-runs it on a restart)."""


@dataclass(slots=True)
class _Hosted:
    runner: SessionRunner
    agent_key: str
    last_state: AIState
    idle_due: float | None = None
    """When the one idle check scheduled for the session is due (``actors.idle_checks``; activity
    only moves ``active_at``)."""
    active_at: float = 0.0
    """When the session last did something (the loop's clock)."""
    idle_after: float = 0.0
    """Seconds of quiet after ``active_at`` before it deactivates."""
    busy: int = 0


class SessionHost:
    """Hosts sessions (see the module docstring). Plain class; ``actors.options`` makes it an actor."""

    def __init__(
        self, name: str, options: HostOptions, cluster: ClusterFactory, *, store: EventStore | None = None
    ) -> None:
        self.boot = BootTimes.starting(LOADED_AT)  # when this process reached each stage of its start-up
        if not options.extra.get("local"):
            default_logging()  # a process of its own: stderr, warnings, unless configured (actors.logs)
            tune_gc()  # this process is ours: collect in larger, rarer steps (orchestrator.run.gc_tuning)
            sys.setswitchinterval(options.switch_interval)
        self.name = name
        self.options = options
        mcp_connections.configure(MCP_RESTART.delay)  # this host's MCP servers restart on its schedule
        self.cluster = cluster(name, options)
        self.store = store if store is not None else open_store(options.store_url())
        self.registry = AgentRegistry(self.store, self.cluster.codec)
        self.hub = MutationHub(linger=options.poll_linger, interest_seconds=options.interest_seconds)
        self.pacer = StreamPacer(options.flush_budget)
        # A process of its own hands the memory its deactivated sessions freed back (actors.memory).
        self.trim = TrimSchedule(every=-1 if options.extra.get("local") else options.trim_every)
        self.hosted: dict[str, _Hosted] = {}
        self._opening: dict[str, asyncio.Future[_Hosted]] = {}
        self.subagents = SubAgents(self, self.cluster.deliver)
        self.adopted: set[str] = set()
        """Dedicated placement: the session(s) the supervisor gave this host."""
        self._tasks: set[asyncio.Future[Any]] = set()
        self.turn_watches = TurnWatches(self.hosted.get, self.activate, self.hub.settle, TURN_WAIT_LIMIT)
        """Turns clients wait on through their pollers (``actors.turn_watches``)."""
        self.idle_checks = IdleChecks(self._maybe_deactivate, self._idle_due)
        """When each session is next checked for quiet (``touch``): one timer for all."""
        self._closing = False
        self.batches = 0
        """``calls`` batches received, and the calls in them (``stats``)."""
        self.batched = 0
        self.started = self.boot.ready = time.time()
        self.directory = HostDirectory(
            self.store,
            name,
            self.started,
            active=self._entries,
            report=self.cluster.report,
            kept=not options.extra.get("local"),
        )
        self.log = log.bind(host=name)
        self._boot: asyncio.Task[list[str]] | None = None
        self._boot_taken = False
        """The supervisor's ``recover`` took the boot's own recovery (see ``recover``)."""
        with contextlib.suppress(RuntimeError):  # no running loop: a plain (test) instance
            # After a crash Ray re-runs __init__: re-activate what this host had, at once.
            self._boot = asyncio.get_running_loop().create_task(self._recover())

    # -- plumbing -------------------------------------------------------------------------------

    async def ready(self) -> dict[str, Any]:
        """Who and where this host is (also: a call that waits until the actor is up)."""
        node, boot = self.cluster.node(), self.boot.as_dict()
        return {"name": self.name, "node": node, "started": self.started, "pid": os.getpid(), "boot": boot}

    async def watch(self) -> None:
        """Never returns: the supervisor awaits it to learn when this host dies."""
        await asyncio.Event().wait()

    async def stats(self) -> dict[str, Any]:
        """Active sessions, what the host holds, the batches it took, its memory, its reports sent.

        ``held``: what the host still holds; ``batches``/``batched``: the ``calls`` batches it took;
        ``reports``: the reports of its active sessions it sent the supervisor.
        """
        return {
            "name": self.name,
            **self.held(),
            "batches": self.batches,
            "batched": self.batched,
            "reports": self.directory.reports,
            "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "switch_interval": sys.getswitchinterval(),
        }

    async def memory(self, top: int = 15, trace: bool | None = None, trim: bool = False) -> dict[str, Any]:
        """This process's memory for finding a leak: RSS, objects by type, traced lines (``actors.memory``)."""
        return {
            "name": self.name,
            **self.held(),
            "trims": self.trim.trims,
            **memory_report(top=top, trace=trace, trim=trim),
        }

    def held(self) -> dict[str, int]:
        """What this host holds now; with no session active and no client, each is zero.

        ``active``: sessions in memory; ``deactivating``: deactivations in flight;
        ``turn_watches``: turns waited on for pollers; ``followed``, ``pollers``, ``waiting``,
        ``kept``: the hub's (``MutationHub.stats``).
        """
        return {
            "active": len(self.hosted),
            "deactivating": len(self._tasks),
            "turn_watches": len(self.turn_watches),
            **self.hub.stats(),
        }

    # -- activation ---------------------------------------------------------------------------------

    async def adopt(self, session_id: str) -> None:
        """Dedicated placement: the supervisor hands this host ``session_id``."""
        self.adopted.add(session_id)

    def _entries(self) -> dict[str, str]:
        return {sid: h.agent_key for sid, h in self.hosted.items()}

    async def activate(self, session_id: str, agent_key: str, *, fresh: bool = False) -> _Hosted:
        """The session, activated (and recovered from its log) on first use; one opening at a time.

        ``fresh``: its log is known to be empty (a sub-agent its delegate call has just started):
        opening it reads nothing.
        """
        hosted = self.hosted.get(session_id)
        if hosted is not None:
            return hosted
        if self.options.placement == "dedicated" and session_id not in self.adopted:
            raise SessionMoved(f"session {session_id!r} is not hosted by {self.name}; ask the supervisor where it is")
        opening = self._opening.get(session_id)
        if opening is not None:
            return await opening
        future: asyncio.Future[_Hosted] = asyncio.get_running_loop().create_future()
        self._opening[session_id] = future
        try:
            agent = await self.registry.get(agent_key)
            runner = await SessionRunner.open(
                self.store,
                session_id,
                agent,
                children=self.cluster.children(self.subagents, agent_key),
                flush_interval=self.options.flush_interval,
                flush_every=self.options.flush_every,
                flush_parts=self.options.flush_parts,
                nested_delay=self.options.nested_delay,
                pacer=self.pacer,
                start=False,
                fresh=fresh,
            )
            hosted = _Hosted(runner, agent_key, runner.state)
            runner.listeners.append(self._listener(session_id, hosted))
            self.hosted[session_id] = hosted
            # In the directory before any work is accepted: a restart of this host then knows to
            # re-activate the session (and its unfinished turn) without waiting for a client.
            await self.directory.durable(self.directory.mark(session_id))
            await runner.start()
            self.touch(session_id)
            future.set_result(hosted)
            return hosted
        except BaseException as error:
            future.set_exception(error)
            future.exception()  # retrieved: the waiters re-raise it
            raise
        finally:
            del self._opening[session_id]

    def _listener(self, session_id: str, hosted: _Hosted) -> Any:
        hub = self.hub

        async def listen(applied: Sequence[Applied], state: AIState, index: int) -> None:
            if hub.interested(session_id):
                # One diff per write, from the state before it to the state after, stamped with its
                # last index: a client ends at the same state, and what it never sees are the states
                # inside one write, which no snapshot or resume can start from either (both are taken
                # at a write's end; an SSE catch-up is such a diff too). Event by event, a write of a
                # step's last text, its finish and the next tool's start made three diffs and sent
                # the turn and the info three times.
                hub.publish(session_id, index, diff(hosted.last_state, state, index))
            else:
                hub.note_index(session_id, index)
            hosted.last_state = state
            self.touch(session_id)

        return listen

    def touch(self, session_id: str, delay: float | None = None) -> None:
        """The session did something: it deactivates after ``delay`` (default: the idle timeout) of quiet.

        Called on every write, so it only records the time; the one scheduled check moves itself.
        """
        hosted = self.hosted.get(session_id)
        if hosted is None:
            return
        wait = self.options.idle_timeout if delay is None else delay
        hosted.active_at = now = asyncio.get_running_loop().time()
        if hosted.idle_due is not None:
            if wait >= hosted.idle_after:
                hosted.idle_after = wait
                return
            self.idle_checks.dropped()  # a shorter wait than the one scheduled
        hosted.idle_after = wait
        hosted.idle_due = due = now + wait
        self.idle_checks.at(due, session_id)

    def _idle_due(self, session_id: str) -> float | None:
        hosted = self.hosted.get(session_id)
        return None if hosted is None else hosted.idle_due

    def _maybe_deactivate(self, session_id: str) -> None:
        """A session's idle check is due (``actors.idle_checks``)."""
        hosted = self.hosted.get(session_id)
        if hosted is None:
            return
        now = asyncio.get_running_loop().time()
        due = hosted.active_at + hosted.idle_after
        if due > now + EARLY:  # active since the check was scheduled
            hosted.idle_due = due
            self.idle_checks.at(due, session_id)
            return
        hosted.idle_due = None
        if not self._idle(hosted) or self.hub.interested(session_id):
            self.touch(session_id)
            return
        run_kept(self._tasks, self.deactivate(session_id))

    @staticmethod
    def _idle(hosted: _Hosted) -> bool:
        """Nothing running and nothing to do: the session can leave memory."""
        runner = hosted.runner
        return not hosted.busy and runner.idle_now()

    async def deactivate(self, session_id: str) -> bool:
        """Close a session's runner; its state stays in the store. ``False`` if it was not active."""
        hosted = self.hosted.pop(session_id, None)
        if hosted is None:
            return False
        if hosted.idle_due is not None:
            self.idle_checks.dropped()
        log_ = hosted.runner.log
        if log_.index - log_._snapshot_index >= log_.snapshot_gap() // 2:
            # Only a long tail is worth a snapshot: 128 events replay in a few milliseconds, and
            # a snapshot costs several KB of store (about a third of a short session). A long log's
            # threshold is a sixteenth of it, so reopening it folds no more than that.
            with contextlib.suppress(Exception):
                await log_.save_snapshot()
        await hosted.runner.close()
        self.hub.forget(session_id)
        self.directory.mark(session_id)
        self.trim.note()
        if self.options.placement == "dedicated":
            # The process goes back to the warm pool for the next session.
            self.adopted.discard(session_id)
            if not self._closing:
                self.cluster.release(session_id)
        return True

    async def deactivate_idle(self) -> int:
        """Deactivate every session that has nothing to do now (tests and memory checks)."""
        count = 0
        for session_id in list(self.hosted):
            hosted = self.hosted.get(session_id)  # an idle timer may have deactivated it meanwhile
            if hosted is not None and self._idle(hosted):
                count += await self.deactivate(session_id)
        return count

    async def yield_idle(self) -> int:
        """Dedicated placement, sessions waiting for an actor: deactivate the idle sessions nobody follows.

        Each one leaves memory (its state stays in the store) and releases this host to the
        supervisor, which hands it to the first session waiting. A followed session stays: its
        subscribers poll this host.
        """
        count = 0
        for session_id in list(self.hosted):
            hosted = self.hosted.get(session_id)
            if hosted is not None and self._idle(hosted) and not self.hub.interested(session_id):
                count += await self.deactivate(session_id)
        return count

    # -- the directory this host keeps in the store (for its own restart): actors.directory ----------

    async def recover(self) -> list[str]:
        """Re-activate the sessions this host had before it restarted (they recover their work).

        Idempotent: a session already active stays as it is. The first call (the supervisor's, once
        Ray has restarted the host) answers with the recovery ``__init__`` began, waiting for it if
        it is still running, instead of reading the directory and activating each session again; a
        later call, or one after the boot's recovery failed, recovers anew.
        """
        boot = self._boot
        if boot is not None and not self._boot_taken:
            self._boot_taken = True
            with contextlib.suppress(Exception):  # it failed: recover here instead
                return await asyncio.shield(boot)
        return await self._recover()

    async def _recover(self) -> list[str]:
        recovered = await self.directory.recover(self.activate)
        self.boot.recovered = self.boot.recovered or time.time()
        return recovered

    async def sessions(self) -> dict[str, str]:
        """Active sessions and their agent keys."""
        return self._entries()

    # -- the session API ------------------------------------------------------------------------------

    async def register_agent(self, key: str, data: bytes) -> None:
        """Store an agent definition (idempotent)."""
        await self.registry.register(key, data)

    async def command(self, session_id: str, agent_key: str, command: Command) -> Any:
        """Decide and apply ``command``: its receipt (``None``: nothing written); a repeat of its id replays it."""
        hosted = await self.activate(session_id, agent_key)
        decision = await hosted.runner.submit(command)
        self.touch(session_id)
        return decision.receipt

    async def commands(self, session_id: str, agent_key: str, commands: list[Command]) -> list[Any]:
        """Several commands, applied in order in one call (each idempotent by its id, as ``command``)."""
        hosted = await self.activate(session_id, agent_key)
        receipts = [(await hosted.runner.submit(c)).receipt for c in commands]
        self.touch(session_id)
        return receipts

    async def steer(self, session_id: str, agent_key: str, input_id: str, text: str, turn_id: str | None) -> Any:
        """Steer the turn the caller observed (default: the active one), or send when none is; by ``input_id``.

        Idempotent by ``input_id``: a repeat returns the first receipt even when the active turn
        has changed since (the turn filled in is not part of what the caller said).
        """
        hosted = await self.activate(session_id, agent_key)
        return await steer_turn(hosted.runner, input_id, text, turn_id)

    async def stop(
        self, session_id: str, agent_key: str, command_id: str, cancel_queued: bool, turn_id: str | None = None
    ) -> tuple[Any, int]:
        """Stop the turn ``turn_id`` (``stale-turn`` once it has ended), or with ``None`` the active one.

        Returns the receipt (``None``: no turn was active, nothing written) and the queued inputs
        it cancelled. Idempotent by ``command_id``: a repeat returns the first receipt and count,
        even when the active turn has changed since.
        """
        hosted = await self.activate(session_id, agent_key)
        return await stop_turn(hosted.runner, command_id, cancel_queued, turn_id)

    async def turn_of(self, session_id: str, agent_key: str, input_id: str) -> str | None:
        """The turn that admitted input ``input_id`` (``None`` while it waits in the inbox, or never admitted)."""
        hosted = await self.activate(session_id, agent_key)
        return await hosted.runner.turn_of(input_id)

    async def push(self, session_id: str, agent_key: str, events: list[Event], trusted: bool) -> int:
        """Append app events; returns the log index after them."""
        hosted = await self.activate(session_id, agent_key)
        await hosted.runner.push(events, trusted=trusted)
        return hosted.runner.log.index

    async def snapshot(self, session_id: str, agent_key: str) -> tuple[AIState, int]:
        """The session's state and the index it reflects."""
        hosted = await self.activate(session_id, agent_key)
        return hosted.runner.state, hosted.runner.log.index

    async def snapshot_follow(self, session_id: str, agent_key: str, poller: str) -> tuple[AIState, int, bool]:
        """``snapshot``, and ``poller`` follows the session from its index on (``False``: poll to subscribe).

        The state, its index and the registration are taken in one turn of the loop, so no
        append falls between them (``MutationHub.follow``).
        """
        hosted = await self.activate(session_id, agent_key)
        index = hosted.runner.log.index
        return hosted.runner.state, index, self.hub.follow(poller, session_id, index)

    async def state_at(self, session_id: str, agent_key: str, through: int | None) -> tuple[Any, int]:
        """The fold through ``through`` (the whole log when ``None``)."""
        hosted = await self.activate(session_id, agent_key)
        return await hosted.runner.log.state_at(through=through)

    async def calls(self, batch: list[tuple[str, str, tuple[Any, ...]]]) -> list[tuple[bool, Any]]:
        """Several session calls in one: ``(method, session id, args)`` each, run at once, in order.

        Returns ``(True, result)`` or ``(False, exception)`` per call, in the batch's order: one
        call failing (a bad command, a session that moved) fails only its own caller. A client
        sends the calls it makes in one turn of its loop to one host this way (``actors.outbox``):
        one Ray task, one argument and one reply instead of one each.
        """
        for method, _, _ in batch:
            if method not in BATCHED_CALLS:
                raise UsageError(f"SessionHost.calls: {method!r} is not a batched call; call it on its own")
        self.batches += 1
        self.batched += len(batch)
        done = await asyncio.gather(
            *(getattr(self, method)(session_id, *args) for method, session_id, args in batch), return_exceptions=True
        )
        return [(False, _portable(r)) if isinstance(r, BaseException) else (True, r) for r in done]

    async def poll(
        self,
        poller: str,
        changes: dict[str, int],
        removed: list[str],
        timeout: float,
        full: bool,
        waits: dict[str, tuple[str, str]] | None = None,
    ) -> tuple[dict[str, tuple[int, list[dict[str, Any]]]], dict[str, Any]] | None:
        """Long poll for one client's sessions on this host (see ``MutationHub.poll``).

        ``waits`` are turns the client waits on (input id -> session id, agent key): each one's
        outcome comes back in a later reply, once. Returns the sessions with news and the turn
        outcomes settled since the last poll; ``None`` when this host does not know the poller
        (it restarted): register everything again.
        """
        hosted = self.hosted
        index_of = {sid: hosted[sid].runner.log.index for sid in changes if sid in hosted}
        if waits and (full or self.hub.knows(poller)):
            for input_id, (session_id, agent_key) in waits.items():
                self.turn_watches.add(poller, input_id, session_id, agent_key)
        reply = await self.hub.poll(poller, changes, removed, timeout, index_of, full=full)
        if reply is None:
            return None
        return reply, self.hub.take_outcomes(poller)

    async def wake_poll(self, poller: str) -> None:
        """End ``poller``'s waiting poll now (its client has new subscriptions)."""
        self.hub.wake(poller)

    async def wait_input(self, session_id: str, agent_key: str, input_id: str, timeout: float) -> Any:
        """How the turn that admits ``input_id`` ended (what ``Turn.finished`` resolves to)."""
        hosted = await self.activate(session_id, agent_key)
        hosted.busy += 1
        try:
            return await hosted.runner.wait_input(input_id, timeout=timeout)
        finally:
            hosted.busy -= 1

    # -- sub-agents: actors.subagents ----------------------------------------------------------------

    async def child_run(
        self, request: ChildRequest, root_key: str, parent_host: str, parent_handle: Any = None
    ) -> ChildResult:
        """Run (or re-attach to) a child session, streaming its batches to the parent's host.

        Safe to repeat (the parent recovered): the new call re-attaches, a snapshot first, then
        batches; the child's task input goes in only once. ``parent_handle``: the parent host's own
        handle, with its first child run here (``RayCluster.introduce``), kept for the batches back.
        Looked up by name instead (``ray.get_actor``), it held this host's loop 7.3 ms (p50 of 11,
        dedicated hosts, probe on a 2-vCPU VM) between the child's first text and its first batch.
        """
        if parent_handle is not None:
            self.cluster.meet(parent_host, parent_handle)
        return await self.subagents.run(request, root_key, parent_host)

    async def child_command(self, child_id: str, agent: Any, root_key: str, command: Command) -> Any:
        """A command for a sub-agent session (an answer to its approval); returns its receipt.

        Idempotent by the command's id, like ``command``.
        """
        return await self.subagents.command(child_id, agent, root_key, command)

    async def deliver(self, session_id: str, batch: ChildBatch) -> bool:
        """A child's batch for session ``session_id`` (a parent hosted here); whether the parent took it.

        Batches carry sequence numbers: the parent drops a repeat and holds one that comes early.
        """
        return await self.subagents.deliver(session_id, batch)

    async def control(self, session_id: str, action: str, when: str = "now") -> None:
        """Stop, pause or resume a session that is active here (a parent's cascade; no-op if not)."""
        await self.subagents.control(session_id, action, when)

    async def shutdown(self) -> None:
        """Close every session (used when a runtime that owns this host exits)."""
        self._closing = self.directory.closing = True  # the supervisor is going away too: tell it nothing more
        self.trim.cancel()
        self.turn_watches.close()
        self.idle_checks.close()
        for task in [self._boot, *self._tasks]:
            if task is not None and not task.done():
                task.cancel()
        for session_id in list(self.hosted):
            await self.deactivate(session_id)
        await mcp_connections.close_connections()  # its MCP servers' processes and HTTP sessions
        await self.directory.close()
        await self.store.close()


def _portable(error: BaseException) -> BaseException:
    """``error`` when it makes the trip (the caller gets its own type and message), else a ``RuntimeError`` naming it.

    Both ways are tried: an exception whose ``__init__`` takes other arguments than it passed on
    pickles but does not unpickle, and that would fail the whole batch's reply in the client.
    """
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")
    return error


LOADED_AT = time.time()
"""When this module finished importing: every module a host runs is loaded (``actors.boot``)."""
