"""Troupe agents as MCP tools, so other agents and MCP clients (an IDE, another framework) delegate to them.

One tool per agent of the config, named after it: its input is ``task`` (the user message), its
output the turn's final text. Every call is a new durable session (``mcp-<agent>-<id>``) on the
runtime, so a crash mid-call loses nothing and repeats no ``report`` tool; a call the client
cancels (``notifications/cancelled``) stops its turn. While the turn runs, progress
notifications carry the streamed text (``message``: the new text, a sub-agent's included;
``progress``: the characters so far), when the client asked for progress.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver import Context, MCPServer

from orchestrator.core.ids import new_id

if TYPE_CHECKING:
    from actors.base import BaseRuntime
    from orchestrator.run.agent import Agent

__all__ = ["agent_server", "progress_chunks"]


def agent_server(runtime: BaseRuntime, agents: Mapping[str, Agent], *, name: str = "troupe") -> MCPServer:
    """An MCP server with one tool per agent, running its calls as sessions on ``runtime``."""
    server = MCPServer(name, instructions="Troupe agents: give each a task; it answers with its final text.")
    for agent in agents.values():
        server.add_tool(
            _runner(runtime, agent),
            name=agent.name,
            description=agent.description
            or f"Delegate a task to the {agent.name} agent; it answers with its final text.",
        )
    return server


def _runner(runtime: BaseRuntime, agent: Agent) -> Any:
    async def run(task: str, ctx: Context) -> str:
        """Run the agent on ``task``; the answer is its final text."""
        session = runtime.session(new_id(f"mcp-{agent.name}-"), agent=agent)
        progress = 0
        async with session.subscribe() as subscription:
            await subscription.ready()
            turn = await session.prompt(task)
            finished = asyncio.ensure_future(turn.finished)
            seen: dict[tuple[str, ...], int] = {}
            try:
                while not finished.done():
                    batch = asyncio.ensure_future(subscription.next_batch())
                    racing: set[asyncio.Future[Any]] = {batch, finished}
                    await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
                    if not batch.done():
                        batch.cancel()
                        with contextlib.suppress(BaseException):
                            await batch
                        break
                    mutations = batch.result()
                    if mutations is None:
                        break
                    for chunk in progress_chunks(mutations, seen):
                        progress += len(chunk)
                        await ctx.report_progress(progress, None, chunk)
                result = await finished
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    await asyncio.shield(session.stop())  # the client cancelled: end the durable turn too
                raise
        if not result.success:
            raise RuntimeError(f"the {agent.name} agent's turn {result.outcome}: {result.error or result.reason}")
        return result.text or ""

    run.__name__ = f"run_{agent.name}"
    return run


def progress_chunks(mutations: Iterable[Mapping[str, Any]], seen: dict[tuple[str, ...], int]) -> list[str]:
    """The new assistant text in ``mutations`` (nested runs' too), in order; ``seen`` holds what was sent."""
    chunks: list[str] = []

    def text(key: tuple[str, ...], value: str) -> None:
        sent = seen.get(key, 0)
        if len(value) > sent:
            chunks.append(value[sent:])
            seen[key] = len(value)

    def part(path: tuple[str, ...], message_id: str, wire: Mapping[str, Any]) -> None:
        if wire.get("type") == "text":
            text((*path, message_id, str(wire.get("id"))), str(wire.get("text", "")))
        nested = wire.get("agent")
        if isinstance(nested, Mapping):  # a sub-agent's run under its delegate call
            for message in nested.get("messages") or []:
                whole((*path, str(wire.get("id"))), message)

    def whole(path: tuple[str, ...], message: Mapping[str, Any]) -> None:
        if message.get("role") != "assistant":
            return
        for wire in message.get("parts") or []:
            part(path, str(message.get("id")), wire)

    for mutation in mutations:
        path = tuple(str(p) for p in mutation.get("path") or [])
        match mutation.get("type"):
            case "delta" if mutation.get("kind") == "text":
                key = (*path, str(mutation.get("messageId")), str(mutation.get("partId")))
                delta = str(mutation.get("delta", ""))
                seen[key] = seen.get(key, 0) + len(delta)
                chunks.append(delta)
            case "part":
                part(path, str(mutation.get("messageId")), mutation.get("part") or {})
            case "message":
                whole(path, mutation.get("message") or {})
            case _:
                pass
    return [c for c in chunks if c]
