"""Tool calls: how a call is checked, asked approval for, run, and ended in the log.

Every call passes one gate before its function runs (``_gate``): arguments that do not validate
end it with a ``tool-error`` the model sees, and a call that needs approval asks for it. A call
to a static tool passes it while the runner assembles the write that starts it; a call to a tool
from a dynamic source, whose list must be read first, passes it in its task. A delegate call
runs a sub-agent (a child session) through ``Children``; its batches come back through the
session's ``deliver``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from orchestrator.core import event_types as ai
from orchestrator.core._json import JsonObject, JsonValue
from orchestrator.core.aistate import AIState, ToolRecord
from orchestrator.core.errors import ToolError
from orchestrator.core.events import Event
from orchestrator.core.fold import INTERRUPTED
from orchestrator.core.ids import approval_id, child_session_id
from orchestrator.core.parts import ToolPart
from orchestrator.core.payloads import Decided, ToolFailed, TurnStop
from orchestrator.core.recovery import REATTACH
from orchestrator.core.stream import ToolResult
from orchestrator.core.wire import part_to_wire
from orchestrator.models.base import CancelSignal
from orchestrator.run.agent import Agent
from orchestrator.run.children import ChildBatch, Children, ChildRequest
from orchestrator.run.log import Applied, SessionLog
from orchestrator.run.toolport import ToolLike
from orchestrator.run.wake import wake

__all__ = ["ToolCalls", "ToolHost", "ToolWork", "call_policy", "recovery_policy"]


class ToolHost(Protocol):
    """What a tool call needs from its session (``SessionRunner`` is one)."""

    log: SessionLog
    agent: Agent
    children: Children | None

    @property
    def session_id(self) -> str:
        """The session's id."""
        ...

    async def _append(self, events: Sequence[Event]) -> list[Applied]:
        """Queue ``events`` for the session's next write; return once it is durable."""
        ...

    def _kick(self) -> None:
        """Ask the session to plan again (a call ended)."""
        ...

    async def deliver(self, batch: ChildBatch) -> None:
        """Take a sub-agent's batch for its delegate call."""
        ...


@dataclass(slots=True)
class ToolWork:
    """A running tool call: its task, the signal that stops it, and its child session if any."""

    call_id: str
    name: str
    task: asyncio.Task[None]
    signal: CancelSignal
    child: str | None = None
    settling: bool = False
    """Its task has queued the call's outcome and only waits for it to be durable."""


class ToolCalls:
    """The tool calls of one session that run in this process (``running``, by call id)."""

    def __init__(self, host: ToolHost) -> None:
        self.host = host
        self.running: dict[str, ToolWork] = {}
        """The calls whose task runs now, by call id."""

    def reconcile(self, state: AIState) -> list[str]:
        """Cancel the calls ``state`` no longer runs (a stop ended them); the children to stop.

        A call whose own task wrote its outcome is left to end by itself: its function has
        returned, and a delegate's child has finished its turn, so there is nothing to cut.
        """
        children: list[str] = []
        for call_id, work in list(self.running.items()):
            record = state.tools.get(call_id)
            if record is None or record.status not in ("running", "pending", "approved"):
                if not work.task.done() and not work.settling and work.task is not asyncio.current_task():
                    work.signal.cancel("stopped")
                    work.task.cancel()
                    if work.child is not None and record is not None and record.final:
                        children.append(work.child)
                del self.running[call_id]
        return children

    async def stopped(self, tools: Sequence[ToolWork], reason: str, state: AIState) -> list[Event]:
        """The events that end ``tools``, cancelled for a pause now (``paused``) or a retry.

        A paused call that can run again (a delegate, whose child is paused with it, or a tool
        whose ``recovery_policy`` is ``rerun``) is reset; the others fail, ``interrupted`` if
        their policy is to report it, ``cancelled`` otherwise.
        """
        children = self.host.children
        events: list[Event] = []
        for work in tools:
            record = state.tools.get(work.call_id)
            if record is None or record.status != "running":
                continue
            policy = call_policy(self.host.agent, record)
            if work.child is not None and children is not None:
                if reason == "paused":
                    await children.pause(work.child, "now")
                else:
                    await children.stop(work.child)
            if reason == "paused" and (work.child is not None or policy == "rerun"):
                events.append(Event("", ai.TOOL_RESET, {"callId": work.call_id, "reason": reason}))
            elif policy == "report":
                events.append(_interrupted(work.call_id))
            else:
                events.append(
                    Event("", ai.TOOL_FAILED, {"callId": work.call_id, "error": "Cancelled.", "code": "cancelled"})
                )
        return events

    def cut_by_stop(self, event: Event, state: AIState) -> list[Event]:
        """The events that end the ``report`` calls a stop about to apply cuts short.

        The stop's decision (``event``) ends the turn, and the fold cancels its open calls with
        "Cancelled by the user."; Retry then drops a cancelled call, so the model might run it
        again. A running ``report`` call gets its interrupted result first instead (seed,
        Delivery: Stop is named with crash for report tools), which Retry keeps.
        """
        data = event.data
        if not isinstance(data, Decided) or data.outcome != "applied" or state.active is None:
            return []
        if not isinstance(state.pending.get(data.command_id), TurnStop):
            return []
        turn = state.active.id
        return [
            _interrupted(record.id)
            for record in state.tools.values()
            if record.turn_id == turn
            and record.status == "running"
            and call_policy(self.host.agent, record) == "report"
        ]

    def prepare(self, record: ToolRecord, state: AIState) -> tuple[list[Event], Callable[[], None] | None]:
        """The events that start (or settle) a tool call, and how to start its task.

        Checks happen here, before anything runs: an unknown tool or invalid arguments end the
        call with a ``tool-error`` the model sees (the function is never called); a call that
        needs approval asks for it. Tools from dynamic sources are checked in their task.
        """
        host = self.host
        arguments = _arguments(state, record.id)
        sub = host.agent.sub_agent(record.name)
        started = Event("", ai.TOOL_STARTED, {"callId": record.id, "name": record.name, "attempt": record.attempts + 1})
        if sub is not None:
            task = arguments.get("task") if isinstance(arguments, dict) else None
            if host.children is None:
                return [_failed(record.id, f"{record.name} cannot run: this session has no sub-agent runtime")], None
            if not isinstance(task, str) or not task.strip():
                message = f"Invalid arguments for {record.name}: 'task' must be a non-empty string."
                return [_failed(record.id, message, "invalid_arguments")], None
            child_id = child_session_id(host.session_id, record.id)
            events = [started]
            fresh = record.child is None
            if fresh:
                child: JsonObject = {"callId": record.id, "sessionId": child_id, "agent": sub.name}
                events.append(Event("", ai.CHILD_STARTED, child))
            delegate = lambda _: self._run_delegate(record, sub, task, fresh)  # noqa: E731
            return events, lambda: self._launch(record, delegate, child_id)
        tools = host.agent.static_tools()
        if tools is None:  # a dynamic source: list it in the task
            return [], lambda: self._launch(record, lambda signal: self._run_tool(record, signal))
        tool = next((t for t in tools if t.name == record.name), None)
        if tool is None:
            return [_failed(record.id, self._unknown(record.name, tools))], None
        settled = _gate(record, tool, arguments)
        if settled is not None:
            return [settled], None
        attempt = record.attempts + 1
        run = lambda signal: self._invoke(record, tool, arguments, attempt, signal)  # noqa: E731
        return [started], lambda: self._launch(record, run)

    def _unknown(self, name: str, tools: Sequence[ToolLike]) -> str:
        agent = self.host.agent
        names = ", ".join(sorted([t.name for t in tools] + [s.name for s in agent.delegate_specs()])) or "none"
        return f"Unknown tool {name!r}. Available tools: {names}."

    def _launch(
        self, record: ToolRecord, make: Callable[[CancelSignal], Awaitable[None]], child: str | None = None
    ) -> None:
        signal = CancelSignal()
        task = asyncio.create_task(self._guarded(record, make(signal)))
        self.running[record.id] = work = ToolWork(record.id, record.name, task, signal, child)
        task.add_done_callback(wake(self.host, lambda: self.running.get(record.id) is work))

    async def _guarded(self, record: ToolRecord, work: Awaitable[None]) -> None:
        try:
            await work
        except ToolError as error:
            started = self.host.log.state.tools.get(record.id) or record
            if error.code in ("timeout", "mcp_lost") and call_policy(self.host.agent, started) == "report":
                # The function may still be running (a thread cannot be cut): say so, like a crash.
                await self._fail_tool(record.id, f"{error.message}. {INTERRUPTED}", "interrupted")
            else:
                await self._fail_tool(record.id, error.message, error.code)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a bug in the runtime must not leave the call pending forever
            await self._fail_tool(record.id, f"{record.name} could not run: {error}")

    async def _invoke(
        self, record: ToolRecord, tool: ToolLike, arguments: JsonValue, attempt: int, signal: CancelSignal
    ) -> None:
        host = self.host
        output = await tool.invoke(
            arguments,
            session_id=host.session_id,
            call_id=record.id,
            turn_id=record.turn_id,
            attempt=attempt,
            signal=signal,
            app=host.log.state.app,
            emit=lambda value: self._emit(record.id, value),
        )
        await self._settle(record.id, [Event("", ai.TOOL_FINISHED, {"callId": record.id, "output": output})])

    async def _run_tool(self, record: ToolRecord, signal: CancelSignal) -> None:
        """A call to a tool from a dynamic source: list, check, maybe ask approval, then run."""
        host = self.host
        try:
            tools = await host.agent.list_tools(host.log.state.app)
            tool = next((t for t in tools if t.name == record.name), None)
            arguments = _arguments(host.log.state, record.id)
            if tool is None:
                await self._fail_tool(record.id, self._unknown(record.name, tools))
                return
            settled = _gate(record, tool, arguments)
            if settled is not None:
                await host._append([settled])
                return
            attempt = record.attempts + 1
            # The policy goes into the log: after a crash the restarted host knows it without the source.
            policy = tool.recovery if tool.recovery in ("rerun", "report") else "rerun"
            begun: JsonObject = {"callId": record.id, "name": record.name, "attempt": attempt, "recovery": policy}
            await host._append([Event("", ai.TOOL_STARTED, begun)])
            await self._invoke(record, tool, arguments, attempt, signal)
        finally:
            # The tool list is read again after every call: the call may have changed it.
            with contextlib.suppress(Exception):
                await host.agent.list_tools(host.log.state.app)

    async def _fail_tool(self, call_id: str, message: str, code: str | None = None) -> None:
        # A delegate that failed here (its child could not be reached, say) may have left its
        # child running: a stop meanwhile must still reach the child.
        await self._settle(call_id, [_failed(call_id, message, code)], child_ended=False)

    async def _settle(self, call_id: str, events: Sequence[Event], *, child_ended: bool = True) -> None:
        """Write the call's outcome from its own task (``child_ended``: a delegate's child is done).

        ``reconcile`` then leaves the task to end by itself: a stop that comes meanwhile has
        nothing to cut, and a delegate's finished child gets no stop.
        """
        work = self.running.get(call_id)
        if work is not None and (child_ended or work.child is None):
            work.settling = True
        await self.host._append(events)

    async def _emit(self, call_id: str, output: JsonValue) -> None:
        part = part_to_wire(ToolResult(call_id, output, preliminary=True))
        await self.host._append([Event("", ai.STREAM, {"callId": call_id, "parts": [part]})])

    async def _run_delegate(self, record: ToolRecord, sub: Agent, task: str, fresh: bool) -> None:
        """Run the call's child session; ``fresh``: this write started it (its log is empty)."""
        host = self.host
        assert host.children is not None
        session_id = host.session_id
        child_id = child_session_id(session_id, record.id)
        request = ChildRequest(session_id, record.id, child_id, sub, task, fresh)
        result = await host.children.run(request, host.deliver)
        if result.final is not None:
            # The child's run as it ended, so the nested copy is complete when the call is done
            # (its last live batch may travel on another channel and arrive later).
            await host.deliver(result.final)
        if result.error is None:
            await self._settle(record.id, [Event("", ai.TOOL_FINISHED, {"callId": record.id, "output": result.text})])
        else:  # the child's turn ended: it failed
            await self._settle(record.id, [_failed(record.id, result.error, result.code)])


def recovery_policy(agent: Agent, name: str) -> str:
    """What recovery does with a call to ``name`` a crash or a pause interrupted.

    A delegate's child session is reattached; a tool says for itself (``rerun``, ``report``);
    a tool from a dynamic source, not known until it is listed, is run again, unless its start
    recorded its policy (``ToolRecord.recovery``, which callers read first).
    """
    if agent.sub_agent(name) is not None:
        return REATTACH
    for ref in agent.tools:
        if isinstance(ref, ToolLike) and ref.name == name:
            return ref.recovery
    return "rerun"


def call_policy(agent: Agent, record: ToolRecord) -> str:
    """The policy of one call: what its start recorded, else ``recovery_policy`` of its tool."""
    return record.recovery or recovery_policy(agent, record.name)


def _gate(record: ToolRecord, tool: ToolLike, arguments: JsonValue) -> Event | None:
    """The event that settles a call before its function runs, or ``None`` if it may run now.

    The one gate both paths (static and dynamic tools) pass: arguments that do not validate end
    the call with their message (the function is never called); a call still ``pending`` whose
    tool asks approval for these arguments requests it (the call runs once it is approved).
    """
    try:
        tool.validate(arguments)
    except ToolError as error:
        return _failed(record.id, error.message, error.code)
    if record.status == "pending":
        prompt = tool.approval_prompt(arguments)
        if prompt is not None:
            ask: JsonObject = {"interactionId": approval_id(record.id), "callId": record.id, "prompt": prompt}
            return Event("", ai.INTERACTION_REQUESTED, ask)
    return None


def _arguments(state: AIState, call_id: str) -> JsonValue:
    """A call's input, from the newest message that holds it."""
    for message in reversed(state.messages):
        for part in message.parts:
            if type(part) is ToolPart and part.id == call_id:
                return part.input
    return None


def _interrupted(call_id: str) -> Event:
    """A ``report`` call cut short: the model learns it may have partly run (it is not run again)."""
    return Event("", ai.TOOL_FAILED, data=ToolFailed(call_id, INTERRUPTED, "interrupted"))


def _failed(call_id: str, message: str, code: str | None = None) -> Event:
    payload: JsonObject = {"callId": call_id, "error": message}
    if code is not None:
        payload["code"] = code
    return Event("", ai.TOOL_FAILED, payload)
