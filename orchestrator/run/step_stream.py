"""``StepStream``: a running model step's buffer between the model and the session's log.

A step's parts are not written one by one: they are buffered and flushed as one ``ai.stream``
event when enough have gathered (``flush_parts``) or a timer fires. The first flush comes after
``flush_interval`` (by default none: queued with the first part) so the first text goes out fast;
later ones wait longer, as the process's ``StreamPacer`` says. Only the turn's first step
flushes early: a later one follows a tool call the user already sees, and its text keeps the
pace from its first batch (on the shop workload, two writes fewer a turn and ~10 % less CPU).
A step's last parts go out with its end, in one batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

from orchestrator.core import event_types as ai
from orchestrator.core.buffer import coalesce
from orchestrator.core.events import Event
from orchestrator.core.payloads import Stream
from orchestrator.core.stream import AgentStreamPart, TextDelta
from orchestrator.run.log import Applied
from orchestrator.run.pacing import Clock, StreamPacer, Timer

__all__ = ["JOIN_TEXT", "StepStream", "StreamHost"]


class StreamHost(Protocol):
    """What a step's buffer needs from its session (``SessionRunner`` is one)."""

    flush_interval: float
    flush_every: float
    flush_parts: int
    pacer: StreamPacer

    async def _append(self, events: Sequence[Event]) -> list[Applied]:
        """Queue ``events`` for the session's next write; return once it is durable."""
        ...

    def _queue_write(self, events: Sequence[Event]) -> asyncio.Future[list[Applied]]:
        """Queue ``events`` for the session's next write; the future resolves once it is durable."""
        ...


JOIN_TEXT = 32
"""A text run in a step's buffer is joined once it holds this many deltas (see ``StepStream``)."""


class StepStream:
    """The running step's buffer: flushed on size, on a timer, and at the end of the step.

    A run of text deltas to one message is kept as its strings, joined every ``JOIN_TEXT``: under
    load a step buffers up to ``flush_parts`` parts between writes, and a 4-character delta kept as
    a part is over 100 bytes (the part, its string, its slot). The log gets the same joined text.
    """

    def __init__(self, runner: StreamHost, step_id: str, clock: Clock, *, first: bool = True) -> None:
        self.runner = runner
        self.step_id = step_id
        self.clock = clock
        """Where the flush timer runs (the pacer's: the loop's, or a test's fake)."""
        self.parts: list[AgentStreamPart] = []
        """What is buffered before the text run (``text``)."""
        self.count = 0
        """Parts buffered, each delta of the text run counted."""
        self.text: list[str] | None = None
        """The text deltas buffered last, all to one message (``text_to``), not yet made a part."""
        self.text_to: str | None = None
        self.timer: Timer | None = None
        self.flushing: asyncio.Future[list[Applied]] | None = None
        self.pacer: StreamPacer | None = runner.pacer
        self.pacer.enter()
        # The turn's first step shows its first text fast; a later one (after a tool call the
        # user already sees) is on the cadence its text keeps after that first batch anyway.
        self.interval = runner.flush_interval if first else runner.pacer.interval(runner.flush_every)

    def add(self, part: AgentStreamPart) -> None:
        """Buffer a part the step makes itself (message metadata): never a reason to flush."""
        self._end_text()
        self.parts.append(part)
        self.count += 1

    def put(self, part: AgentStreamPart) -> bool:
        """Buffer ``part``; ``True`` when the buffer is full and the step must ``flush`` it now.

        Not a coroutine: a part costs no coroutine of its own (one per model chunk), only the
        rare full buffer awaits its write.
        """
        if type(part) is TextDelta:
            text = self.text
            if text is not None and part.message_id == self.text_to:
                text.append(part.delta)
                if len(text) >= JOIN_TEXT:
                    self.text = ["".join(text)]
            else:
                self._end_text()
                self.text = [part.delta]
                self.text_to = part.message_id
        else:
            self._end_text()
            self.parts.append(part)
        self.count = count = self.count + 1
        if count >= self.runner.flush_parts:
            return True
        if self.timer is None:
            if not self.interval and self.flushing is None:
                # The turn's first text (``FIRST_FLUSH``): queued now, not a turn of the loop
                # later, so it joins the session's next write (often the one behind the input).
                self.flushing = self.runner._queue_write(self._events())
            else:
                self.timer = self.clock.call_later(self.interval, self._on_timer)
            if self.pacer is not None:
                self.interval = self.pacer.interval(self.runner.flush_every)
        return False

    def _end_text(self) -> None:
        """Make the buffered text run one part (before another part, or when taken)."""
        text = self.text
        if text is not None:
            self.parts.append(TextDelta(text[0] if len(text) == 1 else "".join(text), self.text_to))
            self.text = None

    def _on_timer(self) -> None:
        self.timer = None
        if self.count and (self.flushing is None or self.flushing.done()):
            # Queued now, not from a task of its own: the batch joins the session's next write
            # without waiting a turn of the loop (``close`` awaits it before the step's last one).
            self.flushing = self.runner._queue_write(self._events())

    def _events(self, extra: Sequence[Event] = ()) -> list[Event]:
        parts = self._take()
        events = [Event("", ai.STREAM, data=Stream(self.step_id, parts=parts))] if parts else []
        return [*events, *extra]

    def _take(self) -> tuple[AgentStreamPart, ...]:
        self._end_text()
        parts, self.parts, self.count = self.parts, [], 0
        return tuple(coalesce(parts))  # typed: the fold applies them as they are; the store encodes once

    async def flush(self, extra: Sequence[Event] = ()) -> None:
        """Write what is buffered now, with ``extra`` after it (a full buffer, or the step's end)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        events = self._events(extra)
        if events:
            # Queued with whatever else the session writes next; if the step was stopped or
            # superseded meanwhile, these are dropped when the write is assembled.
            await self.runner._append(events)

    async def close(self, final: Sequence[Event]) -> None:
        """Flush what is left together with the step's final events, in one batch."""
        self.leave()
        if self.flushing is not None and not self.flushing.done():
            await self.flushing
        await self.flush(final)

    def cancel(self) -> None:
        """The step was stopped: nothing more is written, and its share of the budget goes back."""
        self.leave()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def leave(self) -> None:
        """The step no longer streams: its share of the write budget goes back (once)."""
        if self.pacer is not None:
            self.pacer.leave()
            self.pacer = None
