"""Model steps: how a step starts, streams its parts into the log, ends, and compacts the context.

A step's parts are not written one by one: ``StepStream`` (``run/step_stream.py``) buffers them
and flushes them as one ``ai.stream`` event when enough have gathered (``flush_parts``) or a
timer fires. The turn's first step flushes first after ``flush_interval`` (by default at once,
with its first part) so the turn's first text goes out fast; later batches, and every batch of
a later step, wait longer, as the process's ``StreamPacer`` says. A step's last parts go out with
its end, in one batch.

``Steps`` holds the running step of one session; the runner asks it to prepare a step while it
assembles a write, and cancels it when the state no longer wants it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar, cast

import structlog

from orchestrator.core import event_types as ai
from orchestrator.core._json import JsonObject, JsonValue
from orchestrator.core.aistate import AIState
from orchestrator.core.errors import ModelError
from orchestrator.core.events import Event
from orchestrator.core.parts import AgentMessage
from orchestrator.core.payloads import Compaction as CompactionPayload
from orchestrator.core.payloads import ModelMetadataRequested, ModelMetadataResolved, StepFailed, TurnFinished
from orchestrator.core.plan import RunStep
from orchestrator.core.stream import MessageMetadata, StepFinish, TextDelta, ToolCall
from orchestrator.models.base import CancelSignal, ModelAdapter, ModelRequest, ToolSpec
from orchestrator.models.catalog import CatalogModel, default_threshold, lookup_model
from orchestrator.run.agent import Agent, Compaction, CompactionContext, MetadataContext, ResolverContext
from orchestrator.run.compaction import (
    calibrate,
    compaction_cut,
    estimate_tokens,
    guidance_message,
    output_budget,
    prompt_messages,
)
from orchestrator.run.log import SessionLog
from orchestrator.run.step_stream import StepStream, StreamHost
from orchestrator.run.wake import wake

_log = structlog.get_logger("troupe.runner")
T = TypeVar("T")

__all__ = ["CompactionPlan", "StepHost", "StepWork", "Steps", "stale"]


class StepHost(StreamHost, Protocol):
    """What a model step needs from its session (``SessionRunner`` is one): its buffer's needs too."""

    log: SessionLog
    agent: Agent

    @property
    def session_id(self) -> str:
        """The session's id."""
        ...

    def _kick(self) -> None:
        """Ask the session to plan again (a step ended)."""
        ...

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> object:
        """Run ``coro`` in the background, cancelled when the session closes."""
        ...


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """How the step about to start may compact: its config and the threshold in force."""

    config: Compaction
    """The step's compaction config (the agent's, or its resolver's answer)."""
    threshold: int | None
    """``threshold_tokens``, else the catalog's default (``None``: not known, so only a custom
    ``should_compact`` can compact)."""


@dataclass(slots=True)
class StepWork:
    """A running model step: its id, its task and the signal that stops it."""

    step_id: str
    task: asyncio.Task[None]
    signal: CancelSignal


class Steps:
    """The model steps of one session: at most one runs at a time (``current``)."""

    def __init__(self, host: StepHost) -> None:
        self.host = host
        self.current: StepWork | None = None
        """The step running now, if any."""
        self.lookups: tuple[str, ...] = ()
        """Models whose metadata this process looked up (once each, ever: a lookup that failed is
        not retried every turn; the model stays ``pending``). A tuple: nearly every session keeps
        the shared empty one, where an empty set would cost 216 bytes."""

    def start_after_write(self, step: Callable[[AIState], StepWork]) -> None:
        """Start a step prepared with a write, over the state that write made."""
        step(self.host.log.state)

    def abandon(self, steps: Sequence[StepWork]) -> None:
        """Cancel steps started with a write that failed (their start never became durable).

        Each still asks its session to plan again when its task ends: the write that failed
        planned what followed it, and nothing of that plan is in the log.
        """
        for work in steps:
            if self.current is work:
                self.current = None
            work.signal.cancel("abandoned")
            work.task.cancel()
            work.task.add_done_callback(wake(self.host, lambda: True))

    def reconcile(self, state: AIState) -> None:
        """Cancel the running step if ``state`` no longer runs it (a stop ended it); write nothing."""
        step = self.current
        if step is None:
            return
        current = state.active.step if state.active is not None else None
        if current is None or current.id != step.step_id or current.status != "running":
            if not step.task.done() and step.task is not asyncio.current_task():
                step.signal.cancel("stopped")
                step.task.cancel()
            self.current = None

    def superseded(self, step: StepWork | None, reason: str, state: AIState) -> list[Event]:
        """The event that ends ``step``, cancelled for a pause now or a retry, if it still runs."""
        active = state.active
        if step is None or active is None or active.step is None:
            return []
        if active.step.id != step.step_id or active.step.status != "running":
            return []
        return [
            Event("", ai.STEP_SUPERSEDED, {"stepId": step.step_id, "reason": reason, "restart": reason == "paused"})
        ]

    def prepare(
        self, effect: RunStep, state: AIState
    ) -> tuple[list[Event], Callable[[AIState], StepWork] | None, bool]:
        """The events that start a model step, how to start its task, and whether it may start early.

        A step that may compact reads and appends to the log first, so it starts only once its
        start is written (the third value is false); any other starts while it is written. The
        first generation with a catalog model records ``ai.model.metadata.requested`` with its
        start, and its lookup runs beside it.
        """
        host = self.host
        started: JsonObject = {
            "turnId": effect.turn_id,
            "stepId": effect.step_id,
            "turnStep": effect.turn_step,
            "sessionStep": effect.session_step,
            "attempt": effect.attempt,
        }
        context = ResolverContext(state, host.session_id, effect.turn_id, effect.turn_step)
        try:
            model = host.agent.resolve_model(context)
            instructions = host.agent.resolve_instructions(context)
            config = host.agent.resolve_compaction(context)
        except Exception as error:  # a resolver that raises fails the turn with its message
            message = str(error) or type(error).__name__
            return (
                [Event("", ai.STEP_STARTED, {**started, "model": ""}), *_step_failed(effect, message)],
                None,
                True,
            )
        events = [Event("", ai.STEP_STARTED, {**started, "model": model.name})]
        plan: CompactionPlan | None = None
        lookup = False
        if config is not None:
            threshold = config.threshold_tokens
            if threshold is None and _takes_part(model):
                known = state.model_metadata.get(model.name)
                if known is None:
                    requested = ModelMetadataRequested(model.name, cast(CatalogModel, model).catalog_name)
                    events.append(Event("", requested.type, data=requested))
                    lookup = True
                elif known.status == "pending":
                    lookup = model.name not in self.lookups  # recorded before this process: look it up once
                elif known.status == "resolved" and known.context_window is not None:
                    threshold = default_threshold(known.context_window, output_budget(host.agent.settings))
            if threshold is not None or config.should_compact is not None:
                plan = CompactionPlan(config, threshold)

        def start(planned: AIState) -> StepWork:
            if lookup and model.name not in self.lookups:
                # In the background, never awaited by the step: the lookup must not delay it.
                self.lookups = (*self.lookups, model.name)
                host._spawn(self._look_up(model.name, cast(CatalogModel, model)))
            signal = CancelSignal()
            task = asyncio.create_task(self._guarded_step(effect, model, instructions, plan, signal, planned))
            self.current = work = StepWork(effect.step_id, task, signal)
            task.add_done_callback(wake(host, lambda: self.current is work))
            return work

        return events, start, plan is None

    async def _look_up(self, name: str, model: CatalogModel) -> None:
        """Record a model's limits; never fails or delays a generation (a failure leaves it pending)."""
        try:
            limits = lookup_model(model)
            resolved = (
                ModelMetadataResolved(name, "unavailable")
                if limits is None
                else ModelMetadataResolved(name, "resolved", limits.context_window, limits.max_output_tokens)
            )
            await self.host._append([Event("", resolved.type, data=resolved)])
        except asyncio.CancelledError:
            raise
        except Exception:
            _log.exception("model_metadata_lookup_failed", session_id=self.host.session_id, model=name)

    async def _guarded_step(
        self,
        effect: RunStep,
        model: ModelAdapter,
        instructions: str | None,
        plan: CompactionPlan | None,
        signal: CancelSignal,
        planned: AIState,
    ) -> None:
        host = self.host
        try:
            await self._run_step(effect, model, instructions, plan, signal, planned)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a bug outside the model's stream must not leave the turn running forever
            _log.exception("step_crashed", session_id=host.session_id, step_id=effect.step_id)
            message = f"the model step could not run: {type(error).__name__}: {error}"
            # A step starts while its start is written (``_commit_locked``): a crash at once can
            # come before that write is durable. Wait for it (an empty write waits for those
            # queued or in flight before it), or the turn below is not there yet and nothing
            # would ever end it.
            await host._append([])
            state = host.log.state
            if state.active is None or state.active.id != effect.turn_id:
                return
            await host._append(_step_failed(effect, message))

    async def _run_step(
        self,
        effect: RunStep,
        model: ModelAdapter,
        instructions: str | None,
        plan: CompactionPlan | None,
        signal: CancelSignal,
        planned: AIState,
    ) -> None:
        """Stream one model step over ``planned`` (the state its start makes; it may not be written yet)."""
        host = self.host
        agent = host.agent
        state = planned
        active = state.active
        if active is None:
            return
        try:
            tools = await agent.list_tools(state.app)
        except Exception as error:
            message = f"listing tools failed: {error}"
            await host._append(_step_failed(effect, message))
            return
        specs = [t.spec for t in tools] + agent.delegate_specs()
        if plan is not None:
            if not await self._maybe_compact(effect, plan, model, instructions, specs, signal):
                return  # the summary failed the step, or the step was cut off meanwhile
            state = host.log.state
        messages = prompt_messages(state)
        # The estimate calibrates compaction; without compaction it is not worth serializing the prompt.
        estimate = estimate_tokens(messages, instructions, specs) if plan is not None else 0
        request = ModelRequest(
            messages=messages,
            tools=specs,
            instructions=instructions,
            settings=dict(agent.settings),
            session_id=host.session_id,
            turn_index=active.index,
            step_index=effect.turn_step,
            session_step_index=effect.session_step,
        )
        stream = StepStream(host, effect.step_id, host.pacer.clock, first=effect.turn_step == 0)
        if agent.message_metadata is not None:
            meta = agent.message_metadata(MetadataContext("start", state))
            if meta:
                stream.add(MessageMetadata(dict(meta)))
        calls: list[JsonValue] = []
        usage: JsonObject | None = None
        reason = "stop"
        try:
            async for part in model.stream(request, signal):
                if type(part) is StepFinish:
                    usage = dict(part.usage) if part.usage else None
                    reason = part.finish_reason or reason
                    continue
                if type(part) is ToolCall:
                    calls.append({"id": part.id, "name": part.name})
                if stream.put(part):
                    await stream.flush()
            if signal.cancelled:
                stream.cancel()
                return
            if agent.message_metadata is not None:
                meta = agent.message_metadata(MetadataContext("finish", host.log.state, usage, reason))
                if meta:
                    stream.add(MessageMetadata(dict(meta)))
            finished: JsonObject = {"stepId": effect.step_id, "finishReason": reason, "toolCalls": calls}
            if estimate:
                finished["estimate"] = estimate
            if usage is not None:
                finished["usage"] = usage
            await stream.close([Event("", ai.STEP_FINISHED, finished)])
        except asyncio.CancelledError:
            stream.cancel()
            raise
        except Exception as error:  # an adapter that throws becomes an error part with its message
            code = error.code if isinstance(error, ModelError) else None
            message = error.message if isinstance(error, ModelError) else (str(error) or type(error).__name__)
            await stream.close(_step_failed(effect, message, code))
        finally:
            stream.leave()  # however the step ended, it no longer streams

    async def _maybe_compact(
        self,
        effect: RunStep,
        plan: CompactionPlan,
        model: ModelAdapter,
        instructions: str | None,
        specs: list[ToolSpec],
        signal: CancelSignal,
    ) -> bool:
        """Compact before the step when its plan says so; whether the step goes on."""
        host = self.host
        config = plan.config
        state = host.log.state
        active = state.active
        if active is None or active.id != effect.turn_id:
            return False
        messages = list(prompt_messages(state))  # a list, as the hooks have always been given
        estimate = calibrate(estimate_tokens(messages, instructions, specs), state, model.name)
        cut = compaction_cut(state)
        covered = (
            state.compaction.through if state.compaction is not None and state.compaction.status == "completed" else 0
        )
        if cut <= covered:
            return True  # nothing new to cover: the active turn's own work is never summarized
        to_cover = messages[: len(messages) - (len(state.messages) - cut)]
        context = CompactionContext(
            state,
            host.session_id,
            effect.turn_id,
            model.name,
            state.messages,
            messages,
            to_cover,
            instructions,
            estimate,
            plan.threshold,
        )
        if config.should_compact is not None:
            if not await _maybe_await(config.should_compact(context)):
                return True
        elif plan.threshold is None or estimate <= plan.threshold:
            return True
        compaction_id = f"{active.id}.compaction.{state.session_steps}"
        base = CompactionPayload(compaction_id, "running", estimate, plan.threshold)
        await host._append([Event("", base.type, data=base)])
        usage: JsonValue = None
        try:
            if config.compact is not None:
                summary = await _maybe_await(config.compact(context))
                if not isinstance(summary, str):
                    raise ModelError(f"compact() returned {type(summary).__name__}, not the summary text")
                summary = summary.strip()
            else:
                summary, usage = await self._summarize(
                    effect, active.index, model, instructions, specs, to_cover, config.instructions, signal
                )
            if signal.cancelled:
                return False  # stopped or superseded: the fold marks the compaction interrupted
            if not summary:
                raise ModelError("the summary request returned an empty summary")
        except asyncio.CancelledError:
            raise
        except Exception as error:
            message = error.message if isinstance(error, ModelError) else (str(error) or type(error).__name__)
            failed = replace(base, status="failed", error=message)
            if config.on_failure == "continue":
                # The explicit option: the context stays as it was and the step goes on with it.
                await host._append([Event("", failed.type, data=failed)])
                return True
            # The default: the generation fails; the previous context (and summary) stays intact.
            text = f"compaction failed: {message}"
            code = error.code if isinstance(error, ModelError) else None
            await host._append([Event("", failed.type, data=failed), *_step_failed(effect, text, code)])
            return False
        done = replace(
            base, status="completed", summary=summary, through=cut, usage=usage if isinstance(usage, dict) else None
        )
        await host._append([Event("", done.type, data=done)])
        return True

    async def _summarize(
        self,
        effect: RunStep,
        turn_index: int,
        model: ModelAdapter,
        instructions: str | None,
        specs: list[ToolSpec],
        to_cover: Sequence[AgentMessage],
        extra: str | None,
        signal: CancelSignal,
    ) -> tuple[str, JsonValue]:
        """The summary request: the step's instructions, tools and settings, then the guidance.

        Sending the same instructions, tools and settings as the generation keeps the provider's
        cached prefix valid; the guidance goes last, as a user message. Tools are offered, never
        run: a tool call instead of a summary is a failure.
        """
        host = self.host
        request = ModelRequest(
            [*to_cover, guidance_message(extra)],
            specs,
            instructions,
            dict(host.agent.settings),
            host.session_id,
            turn_index,
            effect.turn_step,
            effect.session_step,
            purpose="compact",
        )
        text: list[str] = []
        usage: JsonValue = None
        async for part in model.stream(request, signal):
            if type(part) is TextDelta:
                text.append(part.delta)
            elif type(part) is StepFinish:
                usage = dict(part.usage) if part.usage else None
            elif type(part) is ToolCall:
                raise ModelError("the summary request answered with a tool call instead of a summary")
        return "".join(text).strip(), usage


_CATALOGUED: dict[type, bool] = {}
"""Per adapter class: whether it is a ``CatalogModel`` (``isinstance`` on a Protocol is slow)."""


def _takes_part(model: ModelAdapter) -> bool:
    """Whether automatic compaction applies to ``model`` (the catalog or the adapter knows of it)."""
    kind = type(model)
    catalogued = _CATALOGUED.get(kind)
    if catalogued is None:
        catalogued = _CATALOGUED[kind] = isinstance(model, CatalogModel)
    if not catalogued:
        return False
    known = cast(CatalogModel, model)
    return known.catalog_name is not None or known.limits is not None


async def _maybe_await(value: T | Awaitable[T]) -> T:
    """A callback's answer, awaited when the callback was async."""
    if inspect.isawaitable(value):
        return await value
    return value


def _step_failed(effect: RunStep, message: str, code: str | None = None) -> list[Event]:
    """The step failed with ``message`` (and the model's error ``code``), and so did its turn."""
    failed = StepFailed(effect.step_id, message, code)
    ended = TurnFinished(effect.turn_id, "failed", error=message, code=code)
    return [Event("", failed.type, data=failed), Event("", ended.type, data=ended)]


def stale(state: AIState, event: Event) -> bool:
    """A stream flush or step end whose step is no longer the running one."""
    kind = event.type
    if kind not in (ai.STREAM, ai.STEP_FINISHED, ai.STEP_FAILED) or "callId" in event.payload:
        return False
    active = state.active
    step = active.step if active is not None else None
    return step is None or step.id != event.payload.get("stepId") or step.status != "running"
