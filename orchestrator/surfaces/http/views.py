"""``Views``: one live view per followed session in the server process, shared by reads and SSE.

A read (``/state``, ``/messages``, ``/info``, ``GET /api/chat/{id}/messages``) or an event stream
of a session starts following it: subscribe, then snapshot, then merge (the session's
``LiveView``). Every later read answers from that copy instead of a call to the session's host,
and every SSE follower of the session is fed from its one subscription (each batch's SSE bytes
are encoded once, for all of them). A view nobody streams from and nobody read for ``idle``
seconds is dropped.

Read-your-writes: once a command to a session has been answered by this server (``WriteMark``
notes it as the response starts), the next read of the session asks the store for its last index
(a local query) and waits until the view has reached it; reads with no such write since answer at
once. A write made elsewhere (the Python API, another server) shows as soon as its mutations
arrive, within a poll. A view that does not catch up within ``catch_up`` seconds (a host that is
restarting) gives way to a direct read of the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestrator.core.aistate import AIState
from orchestrator.core.mutations import info_of
from orchestrator.core.wire import message_to_wire
from orchestrator.run.log import Snapshot
from orchestrator.surfaces.http.aisdk import to_ui_messages
from orchestrator.surfaces.http.sse import PING, RESET, Feed, catch_up, encode_groups, snapshot_event, sse_event
from orchestrator.surfaces.http.state import state_json

if TYPE_CHECKING:
    from actors.client import LiveView, Mutation, Session
    from orchestrator.core.contract import Contract

__all__ = ["BODIES", "Followed", "JsonBytes", "Views", "WriteMark", "json_bytes", "session_events"]

log = structlog.get_logger(__name__)


@dataclass(eq=False)
class Followed:
    """One followed session: its live view, its SSE followers, and when it was last read."""

    live: LiveView
    used: float
    feeds: set[Feed] = field(default_factory=set)
    waiters: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)
    checked: int = 0
    """The write generation (``Views.written``) the view was last brought up to."""
    _snapshot: tuple[int, bytes] | None = None
    _bodies: dict[str, tuple[int, bytes]] = field(default_factory=dict)

    def body(self, kind: str) -> bytes:
        """A read's JSON body at ``index`` (``BODIES[kind]``), encoded once per index and kind."""
        cached = self._bodies.get(kind)
        if cached is None or cached[0] != self.index:
            cached = self._bodies[kind] = (self.index, BODIES[kind](self))
        return cached[1]

    @property
    def index(self) -> int:
        """The log index the view reflects."""
        return self.live.index

    @property
    def state(self) -> AIState:
        """The session's state as of ``index`` (what ``session.state()`` would answer)."""
        return self.live.confirmed

    def snapshot(self) -> Snapshot:
        """``state`` and ``index`` together."""
        return Snapshot(self.live.confirmed, self.live.index)

    def info(self) -> dict[str, Any]:
        """What ``GET .../info`` answers (``session.info()``)."""
        return {**info_of(self.state), "indicator": self.live.indicator, "index": self.index}

    def snapshot_event(self) -> tuple[int, bytes]:
        """The SSE ``snapshot`` event of ``state`` at ``index`` (encoded once per index)."""
        cached = self._snapshot
        if cached is None or cached[0] != self.index:
            cached = self._snapshot = (self.index, snapshot_event(self.snapshot()))
        return cached

    def attach(self) -> Feed:
        """A feed of every batch after ``index`` (read ``snapshot_event`` in the same step)."""
        feed: Feed = asyncio.Queue()
        self.feeds.add(feed)
        return feed

    def detach(self, feed: Feed) -> None:
        """Stop feeding ``feed``."""
        self.feeds.discard(feed)
        self.used = time.monotonic()

    async def reach(self, index: int, timeout: float) -> bool:
        """Wait until the view reflects ``index``; ``False`` when it did not within ``timeout``."""
        if self.index >= index:
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (index, future)
        self.waiters.append(entry)
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            with contextlib.suppress(ValueError):
                self.waiters.remove(entry)

    def on_batch(self, batch: list[Mutation]) -> None:
        """A batch was merged: feed the followers (encoded once), wake the readers it brings far enough."""
        if self.feeds:
            reset = any(m.type == "reset" for m in batch)
            item = RESET if reset else encode_groups(batch)
            if item:
                for feed in self.feeds:
                    feed.put_nowait(item)
        if self.waiters:
            index = self.index
            for target, future in self.waiters:
                if target <= index and not future.done():
                    future.set_result(None)


def json_bytes(body: Any) -> bytes:
    """``body`` as FastAPI's ``JSONResponse`` encodes it."""
    return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


class JsonBytes(Response):
    """A JSON body encoded already (a view's cached answer)."""

    media_type = "application/json"


BODIES: dict[str, Callable[[Followed], bytes]] = {
    "state": lambda f: json_bytes({"state": state_json(f.state), "index": f.index}),
    "messages": lambda f: json_bytes({"messages": [message_to_wire(m) for m in f.state.messages]}),
    "info": lambda f: json_bytes(f.info()),
    "ui": lambda f: json_bytes(to_ui_messages(f.state)),
}
"""The JSON body of each read a view answers (``GET .../state``, ``.../messages``, ``.../info``, the
chat messages), by the kind ``Followed.body`` caches it under."""


class Views:
    """The live views of the sessions this server follows (see the module docstring)."""

    def __init__(self, *, idle: float = 30.0, catch_up: float = 5.0, clock: Callable[[], float] = time.monotonic):
        self.idle = idle
        self.catch_up = catch_up
        self.clock = clock
        self.followed: dict[str, Followed] = {}
        self._starting: dict[str, asyncio.Future[Followed]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._closed = False
        self.written: dict[str, int] = {}
        """Per session, how many of its commands this server has answered (see ``wrote``)."""
        self.direct = 0
        """Reads answered by the session's host because its view was behind (a host restarting)."""

    async def follow(self, session: Session) -> Followed:
        """The session's view, started on first use (concurrent first uses share one start)."""
        found = self.followed.get(session.id)
        if found is not None and found.live.running:
            found.used = self.clock()
            return found
        if found is not None:  # its subscription ended (the runtime closed it): start over
            del self.followed[session.id]
        starting = self._starting.get(session.id)
        if starting is not None:
            return await asyncio.shield(starting)
        future: asyncio.Future[Followed] = asyncio.get_running_loop().create_future()
        self._starting[session.id] = future
        try:
            live = await session.live()
            followed = Followed(live, self.clock())
            live.listeners.append(followed.on_batch)
            self.followed[session.id] = followed
            future.set_result(followed)
            self._ensure_sweeper()
            return followed
        except BaseException as error:
            future.set_exception(error)
            future.exception()  # retrieved: the waiters re-raise it
            raise
        finally:
            del self._starting[session.id]

    def wrote(self, session_id: str) -> None:
        """A command to ``session_id`` was answered: the next read must show it."""
        if session_id in self.followed or session_id in self._starting:
            self.written[session_id] = self.written.get(session_id, 0) + 1

    async def current(self, session: Session) -> Followed | None:
        """The session's view, holding every write this server answered before now (``None``: it lags)."""
        followed = await self.follow(session)
        generation = self.written.get(session.id, 0)
        if followed.checked >= generation:
            return followed
        target = await session.runtime.store.last_index(session.id)
        if not await followed.reach(target, self.catch_up):
            self.direct += 1
            log.info("http_view_behind", session=session.id, index=followed.index, target=target)
            return None
        followed.checked = max(followed.checked, generation)
        return followed

    async def read(self, session: Session) -> Snapshot:
        """The session's state and index, with every write this server answered before the read."""
        followed = await self.current(session)
        return followed.snapshot() if followed is not None else await session.state()

    def _ensure_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.ensure_future(self._sweep())

    async def _sweep(self) -> None:
        """Drop the views nobody streams from and nobody read for ``idle`` seconds."""
        while self.followed and not self._closed:
            await asyncio.sleep(max(self.idle / 2, 0.01))
            now = self.clock()
            for session_id, followed in list(self.followed.items()):
                if not followed.feeds and not followed.waiters and now - followed.used >= self.idle:
                    del self.followed[session_id]
                    self.written.pop(session_id, None)
                    await followed.live.close()

    async def close(self) -> None:
        """Stop following every session (the server stops)."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        followed, self.followed = list(self.followed.values()), {}
        for item in followed:
            for feed in item.feeds:
                feed.put_nowait(None)
            await item.live.close()


async def session_events(
    views: Views,
    session: Session,
    contract: Contract | None,
    last_event_id: int | None,
    *,
    heartbeat: float = 15.0,
) -> AsyncGenerator[bytes, None]:
    """The SSE bytes of a session's mutation stream (see the module docstring).

    It follows the session through the server's shared view of it (``views``): the snapshot
    is the view's, and every batch the view merges comes here already encoded.
    """
    followed = await views.follow(session)
    feed = followed.attach()
    try:
        cursor, first = followed.snapshot_event()  # in the same step as attach: nothing falls between
        if last_event_id is None or last_event_id > cursor:
            # A fresh client, or one from another history (its index is past this log's end).
            yield first
        elif last_event_id < cursor:
            mutations = await catch_up(session, contract, last_event_id, cursor)
            yield sse_event({"index": cursor, "mutations": mutations}, event="mutations", id=cursor)
        while True:
            try:
                item = await asyncio.wait_for(feed.get(), heartbeat)
            except TimeoutError:
                yield PING
                continue
            # Everything queued goes out in one write: under load the stream sends fewer, larger
            # chunks (each send crosses every middleware) instead of falling behind.
            out: list[bytes] = []
            while True:
                if item is None:
                    if out:
                        yield b"".join(out)
                    return
                if item == RESET:
                    cursor, first = followed.snapshot_event()
                    out = [first]
                else:
                    for index, data in item:
                        if index > cursor:  # the snapshot or catch-up holds the rest
                            out.append(data)
                            cursor = index
                if feed.empty():
                    break
                item = feed.get_nowait()
            if out:
                yield b"".join(out)
    finally:
        followed.detach(feed)


class WriteMark:
    """ASGI middleware: a command's answer marks its session written (``Views.wrote``) as it starts.

    Any non-GET request under ``/api/sessions/{id}/`` or ``/api/chat`` with a session id counts:
    the mark is made before the client can see the answer, so a read it sends next waits for the
    write (and a read that does not follow a write costs no store query).
    """

    def __init__(self, app: ASGIApp, views: Views) -> None:
        self.app = app
        self.views = views

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on; mark its session as the answer starts."""
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        session_id = path.split("/")[3] if path.startswith("/api/sessions/") and path.count("/") >= 4 else None
        if session_id is None:
            await self.app(scope, receive, send)
            return
        views = self.views

        async def marked(message: Message) -> None:
            if message["type"] == "http.response.start":
                views.wrote(session_id)
            await send(message)

        await self.app(scope, receive, marked)
