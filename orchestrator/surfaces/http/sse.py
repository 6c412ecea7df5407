"""Server-sent events: the response class, and a session's mutation stream (``GET .../events``).

The mutation stream is resumable without loss or duplicates. Every SSE event's ``id`` is a log
index, and an event carries everything up to that index:

- ``event: snapshot`` — ``{"index": N, "state": <state JSON>}``, the whole state at ``N``. Sent
  first on a fresh connection, and again whenever the subscription had to start over (``reset``).
- ``event: mutations`` — ``{"index": N, "mutations": [...]}``, the mutations that bring a client
  to log index ``N``: a host diffs each write as a whole, so ``N`` is the last index of a write
  (a reconnect's catch-up is one such event: the diff from the client's index to now).

A reconnecting client sends the last id it saw as ``Last-Event-ID`` (or ``?after=``). The
server subscribes first, then reads the state at ``S`` (which every later mutation follows), and
sends the catch-up ``diff(state at L, state at S)`` as one event with id ``S``; then only live
mutations with an index above ``S``. The catch-up folds the log once (``L`` and then on to ``S``),
so the two states share structure and the diff is as small as the change.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from starlette.responses import StreamingResponse
from starlette.types import Message, Send

from orchestrator.core.contract import Contract
from orchestrator.core.fold import fold_events
from orchestrator.core.mutations import diff
from orchestrator.run.log import Snapshot
from orchestrator.surfaces.http.state import state_json

if TYPE_CHECKING:
    from actors.client import Mutation, Session

__all__ = [
    "RESET",
    "EventStream",
    "Feed",
    "catch_up",
    "encode_groups",
    "snapshot_event",
    "sse_event",
    "sse_event_schema",
]

PING: bytes = b": ping\n\n"


def sse_event_schema(events: list[str] | None, data: str) -> dict[str, Any]:
    """The JSON schema of one server-sent event, for the OpenAPI document.

    Under ``text/event-stream`` OpenAPI 3.1 reads ``schema`` as one event: ``event`` (its name;
    ``message`` when the server sends none), ``data`` (text: here JSON), ``id`` and ``retry``.
    Comments (``: ping``) are not events.

    Args:
        events: the event names the stream sends (``None``: unnamed, so ``message``).
        data: what ``data`` holds.
    """
    return {
        "type": "object",
        "required": ["data"],
        "properties": {
            "event": {"type": "string", "enum": events or ["message"]},
            "data": {"type": "string", "description": data},
            "id": {"type": "string", "description": "The log index the event brings the client to."},
            "retry": {"type": "integer"},
        },
    }


class EventStream(StreamingResponse):
    """A ``text/event-stream`` response that always finishes its iterator and runs ``on_close``.

    Starlette cancels a stream whose client went away; this makes sure the generator is closed
    and the resources behind it (a subscription) released right then, not at garbage collection.
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        content: AsyncIterator[bytes],
        status_code: int = 200,
        *,
        headers: Mapping[str, str] | None = None,
        on_close: Callable[[], None] | None = None,
        closing: asyncio.Event | None = None,
    ) -> None:
        """Stream ``content``; ``on_close`` runs once the stream ends, however it ends.

        ``closing`` (the server's: set when it starts to stop) ends the stream early, cleanly:
        a live stream never ends by itself, and a server waiting for it would not stop.
        """
        merged = {"cache-control": "no-cache", "x-accel-buffering": "no", **(headers or {})}
        super().__init__(content, status_code, headers=merged, media_type=self.media_type)
        self._content = content
        self._on_close = on_close
        self._closing = closing

    async def stream_response(self, send: Send) -> None:
        """Send the stream (until the server closes), then close the generator and release what it held."""
        try:
            if self._closing is None:
                await super().stream_response(send)
            else:
                await self._until_closing(send, self._closing)
        finally:
            try:
                aclose = getattr(self._content, "aclose", None)
                if aclose is not None:
                    await aclose()
            finally:
                if self._on_close is not None:
                    self._on_close()

    async def _until_closing(self, send: Send, closing: asyncio.Event) -> None:
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            await send(message)
            started = True

        streaming = asyncio.ensure_future(super().stream_response(watched))
        closed = asyncio.ensure_future(closing.wait())
        try:
            await asyncio.wait({streaming, closed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
            if not streaming.done():
                streaming.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await streaming
                if started:  # end the body: the client sees the stream finish, and may reconnect
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
        streaming.result()


def sse_event(data: Any, *, event: str | None = None, id: int | None = None) -> bytes:
    """One SSE event with JSON ``data``."""
    lines = []
    if event is not None:
        lines.append(f"event: {event}")
    if id is not None:
        lines.append(f"id: {id}")
    lines.append("data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")))
    return ("\n".join(lines) + "\n\n").encode()


RESET: Literal["reset"] = "reset"
"""Fed to an SSE follower when its session's view started over: send a fresh snapshot."""

Feed = asyncio.Queue["list[tuple[int, bytes]] | Literal['reset'] | None"]
"""What an SSE follower is fed: per batch, the SSE event of each log index; ``RESET``; ``None`` at the end."""


def snapshot_event(snapshot: Snapshot) -> bytes:
    """The ``snapshot`` SSE event of ``snapshot``."""
    return sse_event(
        {"index": snapshot.index, "state": state_json(snapshot.state)}, event="snapshot", id=snapshot.index
    )


def encode_groups(batch: list[Mutation]) -> list[tuple[int, bytes]]:
    """A batch's ``mutations`` SSE events, one per log index (a host publishes an index in one piece)."""
    groups: list[tuple[int, list[dict[str, Any]]]] = []
    for mutation in batch:
        index = mutation.index
        if not groups or groups[-1][0] != index:
            groups.append((index, []))
        groups[-1][1].append(dict(mutation))
    return [
        (index, sse_event({"index": index, "mutations": group}, event="mutations", id=index)) for index, group in groups
    ]


async def catch_up(session: Session, contract: Contract | None, after: int, through: int) -> list[dict[str, Any]]:
    """The mutations from the state at ``after`` to the state at ``through`` (one fold of the log)."""
    events = await session.runtime.store.read(session.id, after=0, limit=through)
    before = fold_events(events[:after], None, contract)
    current = fold_events(events[after:], before, contract)
    return diff(before, current, through)
