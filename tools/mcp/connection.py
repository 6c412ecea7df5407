"""One live connection to an MCP server (a stdio process or an HTTP session), with the official SDK.

The SDK's ``Client`` must be entered and left in one task, so each connection runs a task of its
own that holds it open until the connection closes or the server goes away; calls from any
session go through it. The connection is started on first use; when the server dies (the process
exits, the HTTP session is lost), the calls in flight fail with an error naming the server, and
the next use starts it again after the registry's backoff (``restart_delay``), which grows with
each failure in a row. A server that does not start gives one error naming it and its command.

The handshake is the initialize one (``mode="legacy"`` in the SDK): it is what every server
speaks, and it carries the two notifications Troupe relies on, ``notifications/tools/list_changed``
(the list is fetched again) and ``notifications/cancelled`` (sent when a call is cancelled).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import structlog
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import CONNECTION_CLOSED

from orchestrator.core.errors import ToolError
from tools.mcp.registry import restart_delay
from tools.mcp.spec import ServerSpec, Stdio, expand_env

__all__ = ["Connection", "connection_key"]

log = structlog.get_logger()

_LOST = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, ConnectionError, OSError)
"""What a call raises when the server went away under it (not the tool's own failure)."""


def connection_key(source: ServerSpec) -> tuple[Any, ...]:
    """What makes two sources the same server (they then share one connection in a host)."""
    t = source.transport
    if isinstance(t, Stdio):
        return ("stdio", t.command, t.args, tuple(sorted(t.env.items())), t.cwd)
    return ("http", t.url, tuple(sorted(t.headers.items())))


class Connection:
    """A server's connection in this host (see the module docstring)."""

    def __init__(self, source: ServerSpec) -> None:
        self.source = source
        self.describe = source.describe()
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._lost = asyncio.Event()
        self._lock = asyncio.Lock()
        self._failures = 0
        self._down_at = 0.0
        self._closed = False
        self._tools: list[types.Tool] | None = None
        self._version = 0
        self.generation = 0
        """How many times the server was started (tests; logs)."""

    # -- lifecycle ----------------------------------------------------------------------------

    async def client(self) -> Client:
        """The connected client, started (or restarted, after the backoff) if need be."""
        client = self._client
        if client is not None and not self._lost.is_set():
            return client
        async with self._lock:
            client = self._client
            if client is not None and not self._lost.is_set():
                return client
            if self._closed:
                raise ToolError(f"{self.describe} is closed: its host is stopping", "mcp_unavailable")
            if self._failures:
                wait = restart_delay(self._failures - 1) - (time.monotonic() - self._down_at)
                if wait > 0:
                    await asyncio.sleep(wait)
            return await self._start()

    async def _start(self) -> Client:
        self._stop, self._lost = asyncio.Event(), asyncio.Event()
        self._tools = None
        self._version += 1
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._task = asyncio.ensure_future(self._hold(ready, self._stop, self._lost))
        try:
            client = await asyncio.wait_for(asyncio.shield(ready), self.source.connect_timeout)
        except BaseException as error:
            self._stop.set()
            if not ready.done():  # still connecting (a timeout, or our caller cancelled): give up on it
                self._task.cancel()
            self._failures += 1
            self._down_at = time.monotonic()
            if isinstance(error, asyncio.CancelledError):
                raise
            reason = (
                _reason(error)
                if not isinstance(error, TimeoutError)
                else (f"no answer within {self.source.connect_timeout:g} s")
            )
            log.warning("mcp_server_start_failed", server=self.source.name, reason=reason)
            raise ToolError(f"{self.describe} failed to start: {reason}", "mcp_unavailable") from None
        self._failures = 0
        self.generation += 1
        log.info("mcp_server_started", server=self.source.name, generation=self.generation)
        return client

    async def _hold(self, ready: asyncio.Future[Client], stop: asyncio.Event, lost: asyncio.Event) -> None:
        """Enter the SDK client, publish it, and keep it open until ``stop`` (in this one task)."""
        mine: Client | None = None
        try:
            async with AsyncExitStack() as stack:
                client = mine = await stack.enter_async_context(self._make_client(stack))
                self._client = client
                if not ready.done():
                    ready.set_result(client)
                await stop.wait()
        except BaseException as error:  # the server failed to start, or went away
            if not ready.done():
                ready.set_exception(error)
                ready.exception()  # retrieved here; the starter raises its own error
            elif not stop.is_set():
                log.warning("mcp_server_lost", server=self.source.name, reason=_reason(error))
            if isinstance(error, asyncio.CancelledError):
                raise
        finally:
            if self._client is mine:  # a newer generation may have started meanwhile
                self._client = None
            self._down_at = time.monotonic()
            lost.set()

    def _make_client(self, stack: AsyncExitStack) -> Client:
        t = self.source.transport
        info = types.Implementation(name="troupe", version="0.1.0")
        if isinstance(t, Stdio):
            env = {k: expand_env(v, f"{self.describe}: env {k}") for k, v in t.env.items()}
            command = _command(t.command)
            params = StdioServerParameters(command=command, args=list(t.args), env=env or None, cwd=t.cwd)
            server: Any = params
        else:
            headers = {k: expand_env(v, f"{self.describe}: header {k}") for k, v in t.headers.items()}
            http = create_mcp_http_client(headers=headers)
            stack.push_async_callback(http.aclose)
            server = streamable_http_client(t.url, http_client=http)
        return Client(server, mode="legacy", cache=None, message_handler=self._on_message, client_info=info)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.stale()
        elif isinstance(message, Exception):
            log.warning("mcp_transport_error", server=self.source.name, reason=_reason(message))

    def _gone(self, lost: asyncio.Event) -> None:
        """The server went away under a call: drop the connection (the next use restarts it).

        ``lost`` is the event of the connection the call used: once a newer one runs, a late
        failure of an older call leaves it alone.
        """
        if lost is not self._lost:
            return
        self._stop.set()
        self._lost.set()
        self._client = None
        self._failures = max(self._failures, 1)
        self._down_at = time.monotonic()

    async def aclose(self) -> None:
        """Close the connection (a stdio server's process ends); later uses fail."""
        self._closed = True
        self._stop.set()
        task = self._task
        if task is not None and not task.done():
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(task), 10)
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    # -- the tool list ------------------------------------------------------------------------

    def stale(self) -> None:
        """The list may have changed (after a call; on ``list_changed``): fetch it on next use."""
        self._tools = None
        self._version += 1

    async def list_tools(self) -> list[types.Tool]:
        """The server's tools: fetched when stale, else as last fetched."""
        cached = self._tools
        if cached is not None and not self._lost.is_set():
            return cached
        client = await self.client()
        version, lost = self._version, self._lost
        tools: list[types.Tool] = []
        cursor: str | None = None
        try:
            for _ in range(100):  # a paginator that never ends cannot hang the step
                page = await asyncio.wait_for(client.list_tools(cursor=cursor), self.source.connect_timeout)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
        except (MCPError, TimeoutError, *_LOST) as error:
            if _lost(error):
                self._gone(lost)
            raise ToolError(f"{self.describe}: listing its tools failed: {_reason(error)}", "mcp_unavailable") from None
        if version == self._version:
            self._tools = tools
        return tools

    # -- calls --------------------------------------------------------------------------------

    async def call(
        self, name: str, arguments: dict[str, Any], timeout: float | None, progress: ProgressFnT | None = None
    ) -> types.CallToolResult:
        """Call ``name``; a timeout or a cancellation of the caller sends ``notifications/cancelled``.

        Raises:
            ToolError: the server went away during the call (``mcp_lost``), or could not be
                reached (``mcp_unavailable``), or the call timed out (``timeout``).
        """
        client = await self.client()
        lost = self._lost
        call = asyncio.ensure_future(client.call_tool(name, arguments, progress_callback=progress))
        watch = asyncio.ensure_future(lost.wait())
        try:
            done, _ = await asyncio.wait({call, watch}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            call.cancel()  # the SDK tells the server: notifications/cancelled
            with contextlib.suppress(BaseException):
                await call
            raise
        finally:
            watch.cancel()
            self.stale()  # a call may change what tools exist
        if call not in done:
            call.cancel()
            with contextlib.suppress(BaseException):
                await call
            if lost.is_set():
                raise ToolError(f"{self.describe} went away during the call to {name}", "mcp_lost")
            raise ToolError(f"{name} timed out after {timeout:g} s", "timeout")
        try:
            return call.result()
        except (MCPError, *_LOST) as error:
            if not _lost(error):
                raise ToolError(f"{name} failed on {self.describe}: {error}", "mcp_error") from None
            self._gone(lost)
            raise ToolError(
                f"{self.describe} went away during the call to {name}: {_reason(error)}", "mcp_lost"
            ) from None


def _lost(error: BaseException) -> bool:
    """Whether ``error`` says the server went away (not that a request failed)."""
    return isinstance(error, _LOST) or (isinstance(error, MCPError) and error.code == CONNECTION_CLOSED)


def _command(command: str) -> str:
    """``command`` as found on ``PATH``, else beside the running Python (a virtualenv's scripts)."""
    if os.sep in command or shutil.which(command) is not None:
        return command
    beside = Path(sys.executable).parent / command
    return str(beside) if beside.exists() else command


def _reason(error: BaseException) -> str:
    """One line for an error, through the SDK's exception groups."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    if isinstance(error, FileNotFoundError):
        return f"the program was not found ({error.filename or error})"
    text = str(error) or type(error).__name__
    return text.splitlines()[0] if text else type(error).__name__
