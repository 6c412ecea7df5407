"""``troupe chat``: a terminal chat with one session, drawn live, with slash commands.

Each line typed is a prompt (``session.prompt``) and the reply is drawn as it streams. Ctrl-C
while a turn runs stops it (``session.stop(turn_id=...)``: the turn drawn, never a later one);
Ctrl-C at the prompt, or a second Ctrl-C within a second, leaves. A tool that needs approval
returns you to the prompt: answer with ``/approve`` or ``/deny``.

The loop is ``chat_loop(session, lines, console)``: lines come from any iterator (the terminal,
a list in a test), output goes to any console, and Ctrl-C arrives through ``Interrupts.hit()``
(the command wires it to SIGINT), so nothing in it needs a real TTY.

The loop learns how turns end from the live view's mutations (``turn``, ``interaction``) rather
than by asking, and before it decides anything it waits until the view holds the log as far as
the last ``session.info()`` it read: a scripted turn can start and finish before a command's
reply is back, and it must still be drawn.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable, Iterable
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from orchestrator.core.approvals import nested_approvals, pending_approvals
from orchestrator.surfaces.cli.common import (
    ConfigPath,
    LocalOption,
    StoreOption,
    load_target,
    started_runtime,
    stdout,
)
from orchestrator.surfaces.cli.live import LiveTurn, awaiting_approval, caught_up, last_user_index
from orchestrator.surfaces.cli.render import render_conversation
from orchestrator.surfaces.event_loop import run_async

if TYPE_CHECKING:
    from actors.client import LiveView, Session
    from orchestrator.core.aistate import AIState, Receipt

__all__ = ["COMMANDS", "Interrupts", "TerminalLines", "chat_command", "chat_loop"]

COMMANDS: Final = (
    ("/stop", "stop the running turn (as Ctrl-C does while it streams)"),
    ("/retry", "run the last turn again, from its last finished tool call"),
    ("/pause", "pause after the current turn (/pause now: pause at once)"),
    ("/resume", "resume a paused session and its queued inputs"),
    ("/reset", "stop the running turn and start a new conversation (the log keeps the old one)"),
    ("/steer TEXT", "redirect the running turn (sends TEXT when none runs)"),
    ("/queue", "show the queued inputs"),
    ("/approve [REASON]", "approve the tool call that awaits approval"),
    ("/deny [REASON]", "deny it"),
    ("/help", "this list"),
    ("/quit", "leave (so do Ctrl-D, and Ctrl-C at the prompt)"),
)

Watch = Literal["ended", "approval", "paused", "quit"]


class Interrupts:
    """Ctrl-C presses as the chat sees them: ``hit()`` is called from the SIGINT handler (or a test)."""

    def __init__(self, *, window: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self.clock = clock
        self.event = asyncio.Event()
        self.last: float | None = None
        self.double = False
        """Whether the last press came within ``window`` seconds of the one before."""

    def hit(self) -> None:
        """Record a press."""
        now = self.clock()
        self.double = self.last is not None and now - self.last <= self.window
        self.last = now
        self.event.set()

    def pressed(self) -> bool:
        """Whether a press is waiting to be handled."""
        return self.event.is_set()


class TerminalLines:
    """Lines typed at the terminal, each read on a daemon thread so Ctrl-C reaches the event loop."""

    def __init__(self, console: Console, prompt: str = "you> ") -> None:
        self.console = console
        self.prompt = Text(prompt, style="bold cyan")

    def __aiter__(self) -> TerminalLines:
        return self

    async def __anext__(self) -> str:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[str | None] = loop.create_future()

        def deliver(line: str | None) -> None:
            if not answer.done():
                answer.set_result(line)

        def read() -> None:
            try:
                line: str | None = self.console.input(self.prompt)
            except (EOFError, KeyboardInterrupt, OSError):
                line = None
            with contextlib.suppress(RuntimeError):  # the loop closed while we waited for a line
                loop.call_soon_threadsafe(deliver, line)

        threading.Thread(target=read, name="troupe-chat-input", daemon=True).start()
        line = await answer
        if line is None:
            raise StopAsyncIteration
        return line


async def _lines(source: Iterable[str] | AsyncIterable[str]) -> AsyncGenerator[str, None]:
    if isinstance(source, AsyncIterable):
        async for line in source:
            yield line
    else:
        for line in source:
            yield line


async def chat_loop(
    session: Session,
    lines: Iterable[str] | AsyncIterable[str],
    console: Console,
    *,
    interrupts: Interrupts | None = None,
    assistant: str = "assistant",
) -> int:
    """Chat with ``session``: each line is a prompt or a slash command; returns the exit code (0).

    Ends at the end of ``lines``, on ``/quit``, on Ctrl-C at the prompt, or on a second Ctrl-C
    within a second while a turn runs.
    """
    chat = _Chat(session, console, interrupts or Interrupts(), assistant)
    return await chat.run(lines)


class _Chat:
    def __init__(self, session: Session, console: Console, interrupts: Interrupts, assistant: str) -> None:
        self.session = session
        self.console = console
        self.interrupts = interrupts
        self.assistant = assistant
        self._live: LiveView | None = None
        self.ended: dict[str, str] = {}
        """Turn id -> outcome, for every turn seen ending."""
        self.turn: dict[str, Any] | None = None
        """The active turn's wire shape, as the last mutation had it."""
        self.interactions: dict[str, dict[str, Any]] = {}
        self.turns: list[asyncio.Future[Any]] = []
        self.quit = False

    @property
    def live(self) -> LiveView:
        assert self._live is not None
        return self._live

    # -- the loop --------------------------------------------------------------------------------------

    async def run(self, lines: Iterable[str] | AsyncIterable[str]) -> int:
        self._live = await self.session.live()
        assert self.live.state is not None
        self._load(self.live.state)
        self.live.listeners.append(self._track)
        source = _lines(lines)
        try:
            history = self.live.view.state.messages
            if history:
                self.console.rule("[dim]so far[/]", style="dim", align="left")
                self.console.print(render_conversation(history, assistant=self.assistant))
            await self._follow(last_user_index(self.live.view), set(self.ended))  # a turn already running
            while not self.quit:
                line = await self._read(source)
                if line is None:
                    break
                text = line.strip()
                if not text:
                    continue
                if text.startswith("/"):
                    await self._command(text)
                else:
                    await self._prompt(text)
        finally:
            await source.aclose()
            await self.live.close()
            await self._drop_turns()
        return 0

    async def _read(self, source: AsyncIterator[str]) -> str | None:
        if self.interrupts.pressed():
            return None
        line = asyncio.ensure_future(anext(source))
        stop = asyncio.ensure_future(self.interrupts.event.wait())
        await asyncio.wait({line, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not line.done():  # Ctrl-C at the prompt
            line.cancel()
        await asyncio.gather(line, stop, return_exceptions=True)
        if line.cancelled() or line.exception() is not None:
            self.console.print()
            return None
        return line.result()

    # -- following turns -----------------------------------------------------------------------------

    def _load(self, state: AIState) -> None:
        from orchestrator.core.mutations import turn_of

        self.turn = turn_of(state)
        if state.last_turn is not None:
            self.ended[state.last_turn[0]] = state.last_turn[1]
        for interaction in state.interactions.values():
            self.interactions[interaction.id] = {
                "id": interaction.id,
                "callId": interaction.call_id,
                "name": interaction.name,
                "prompt": interaction.prompt,
                "status": interaction.status,
            }

    def _track(self, batch: list[Any]) -> None:
        """A listener of the live view: how turns and approvals stand."""
        for mutation in batch:
            kind = mutation.get("type")
            if kind == "reset" and self._live is not None and self.live.state is not None:
                self._load(self.live.state)
            elif kind == "turn":
                self.turn = mutation.get("turn")
                last = mutation.get("lastTurn")
                if isinstance(last, dict):
                    self.ended[str(last["id"])] = str(last["outcome"])
            elif kind == "interaction":
                interaction = mutation.get("interaction")
                if isinstance(interaction, dict):
                    self.interactions[str(interaction["id"])] = interaction

    def _pending(self) -> dict[str, Any] | None:
        for interaction in self.interactions.values():
            if interaction.get("status") == "pending":
                return interaction
        return None

    async def _info(self) -> dict[str, Any]:
        info = await self.session.info()
        await caught_up(self.live, int(info["index"]))
        return info

    async def _follow(self, start: int, before: set[str], wake: asyncio.Future[Any] | None = None) -> None:
        """Draw from message ``start`` while turns run, until the session is idle or needs you.

        ``before``: the turns that had ended before the command that led here was sent.
        """
        info = await self._info()
        if info["turn"] is None and self.ended.keys() <= before:
            self._idle_note(info)
            return
        reason: Watch | None = None
        with LiveTurn(self.console, self.live, start, assistant=self.assistant):
            while not self.quit and info["turn"] is not None:
                reason = await self._watch(str(info["turn"]["id"]), wake)
                if reason != "ended":
                    break
                info = await self._info()
        for turn_id, outcome in self.ended.items():
            if turn_id not in before and outcome != "completed":
                style = "yellow" if outcome == "stopped" else "red"
                self.console.print(Text(f"turn {turn_id} {outcome}", style=style))
        if reason == "approval":
            self._announce()
        elif reason == "paused":
            self.console.print(Text("the turn is paused; /resume continues it", style="yellow"))
        elif reason is None or reason == "ended":
            self._idle_note(info)
        self._collect()

    async def _watch(self, turn_id: str, wake: asyncio.Future[Any] | None) -> Watch:
        while True:
            self.live.changed.clear()  # before looking: a batch that lands after this wakes the wait
            if turn_id in self.ended:
                return "ended"
            if self.turn is not None and self.turn.get("id") == turn_id and self.turn.get("phase") == "paused":
                return "paused"
            if self._pending() is not None or awaiting_approval(self.live.view.state.messages) is not None:
                return "approval"
            if self.interrupts.pressed():
                self.interrupts.event.clear()
                if self.interrupts.double:
                    self.quit = True
                    return "quit"
                self.console.print(Text("stopping the turn (Ctrl-C again to quit)", style="yellow"))
                await self.session.stop(turn_id=turn_id)  # the turn drawn: never one that started since
                continue
            waiters = [
                asyncio.ensure_future(self.live.changed.wait()),
                asyncio.ensure_future(self.interrupts.event.wait()),
            ]
            others = [wake] if wake is not None and not wake.done() else []
            try:
                await asyncio.wait([*waiters, *others], return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()
                await asyncio.gather(*waiters, return_exceptions=True)

    def _announce(self) -> None:
        interaction = self._pending()
        if interaction is None:
            self._nested_note()
            return
        self.console.print(
            Text.assemble(
                ("⚠ ", "bold yellow"),
                (str(interaction.get("name")), "bold"),
                f" needs approval: {interaction.get('prompt')} — ",
                ("/approve", "bold"),
                " or ",
                ("/deny", "bold"),
            )
        )

    def _nested_note(self) -> bool:
        """Announce a sub-agent's approval (answered through this session, like its own)."""
        found = awaiting_approval(self.live.view.state.messages)
        if found is None or not found[0]:
            return False
        path, part = found
        self.console.print(
            Text.assemble(
                ("⚠ ", "bold yellow"),
                (part.name, "bold"),
                f" in sub-agent session {'/'.join((self.session.id, *path))} needs approval: {part.prompt} — ",
                ("/approve", "bold"),
                " or ",
                ("/deny", "bold"),
            )
        )
        return True

    def _idle_note(self, info: dict[str, Any]) -> None:
        queued = info.get("queued") or []
        if info.get("paused") and queued:
            self.console.print(
                Text(f"the session is paused: {len(queued)} input(s) wait; /resume runs them", style="yellow")
            )

    def _collect(self) -> None:
        for turn in [t for t in self.turns if t.done()]:
            self.turns.remove(turn)
            if not turn.cancelled():
                turn.exception()  # retrieved: how the turn ended was drawn already

    async def _drop_turns(self) -> None:
        for turn in self.turns:
            turn.cancel()
        await asyncio.gather(*self.turns, return_exceptions=True)
        self.turns.clear()

    # -- inputs and commands ---------------------------------------------------------------------------

    async def _prompt(self, text: str) -> None:
        before, start = set(self.ended), len(self.live.view.state.messages)
        turn = await self.session.prompt(text)
        self.turns.append(turn.finished)
        await self._follow(start, before, turn.finished)

    def _rejected(self, receipt: Receipt | None, what: str) -> bool:
        if receipt is not None and receipt.outcome == "rejected":
            self.console.print(Text(f"{what} was rejected: {receipt.reason}", style="yellow"))
            return True
        return False

    async def _command(self, line: str) -> None:
        name, _, rest = line.partition(" ")
        rest = rest.strip()
        before, start = set(self.ended), last_user_index(self.live.view)
        match name.lower():
            case "/quit" | "/exit":
                self.quit = True
            case "/help":
                self._help()
            case "/queue":
                await self._queue()
            case "/stop":
                # The turn this chat shows, so a /stop typed as it ends never stops the next one.
                running = self.turn.get("id") if self.turn is not None else None
                stopped = await self.session.stop(turn_id=str(running)) if running is not None else None
                if stopped is None or stopped.receipt is None:
                    self.console.print(Text("no turn is running", style="dim"))
                elif stopped.receipt.reason == "stale-turn":
                    self.console.print(Text(f"turn {running} had already ended", style="dim"))
                elif not self._rejected(stopped.receipt, "/stop"):
                    await self._follow(start, before)
            case "/retry":
                if not self._rejected(await self.session.retry(), "/retry"):
                    await self._follow(start, before)
            case "/resume":
                if self.turn is None:  # nothing paused mid-turn: only queued inputs can start
                    start = len(self.live.view.state.messages)
                if not self._rejected(await self.session.resume(), "/resume"):
                    await self._follow(start, before)
            case "/pause":
                when: Literal["after-turn", "now"] = "now" if rest == "now" else "after-turn"
                if rest not in ("", "now"):
                    self.console.print(Text("usage: /pause or /pause now", style="yellow"))
                elif not self._rejected(await self.session.pause(when), "/pause"):
                    what = "paused now" if when == "now" else "paused: no new turn starts until /resume"
                    self.console.print(Text(what, style="yellow"))
            case "/reset":
                if not self._rejected(await self.session.reset(), "/reset"):
                    message = "new conversation (the earlier one stays in the log: troupe sessions replay)"
                    self.console.print(Text(message, style="yellow"))
            case "/steer":
                if not rest:
                    self.console.print(Text("usage: /steer TEXT", style="yellow"))
                    return
                if self.turn is None:
                    start = len(self.live.view.state.messages)
                observed = str(self.turn["id"]) if self.turn is not None and "id" in self.turn else None
                if not self._rejected(await self.session.steer(rest, turn_id=observed), "/steer"):
                    await self._follow(start, before)
            case "/approve" | "/deny":
                await self._respond(name.lower() == "/approve", rest or None, start, before)
            case _:
                self.console.print(Text(f"unknown command {name}; /help lists the commands", style="yellow"))

    def _help(self) -> None:
        table = Table(show_header=False, show_edge=False, box=None)
        for command, what in COMMANDS:
            table.add_row(Text(command, style="bold"), what)
        self.console.print(table)
        self.console.print(Text("anything else is sent as a prompt; Ctrl-C stops a running turn", style="dim"))

    async def _queue(self) -> None:
        info = await self.session.info()
        queued = info.get("queued") or []
        state = "paused" if info.get("paused") else "running" if info.get("executing") else "idle"
        if not queued:
            self.console.print(Text(f"nothing queued (the session is {state})", style="dim"))
            return
        table = Table(title=f"queued inputs (the session is {state})", title_justify="left", show_edge=False)
        table.add_column("id")
        table.add_column("role")
        table.add_column("text", overflow="fold")
        for item in queued:
            table.add_row(str(item.get("id")), str(item.get("role")), str(item.get("text")))
        self.console.print(table)

    async def _respond(self, approved: bool, reason: str | None, start: int, before: set[str]) -> None:
        snapshot = await self.session.state()
        pending = pending_approvals(snapshot.state)  # this session's own first, then its sub-agents'
        if not pending:
            self.console.print(Text("nothing awaits approval", style="dim"))
            return
        target = pending[0]
        receipt = await self.session.respond(target.id, approved, reason=reason)
        if self._rejected(receipt, "/approve" if approved else "/deny"):
            return
        verb = "approved" if approved else "denied"
        self.console.print(Text(f"{verb} {target.name}", style="green" if approved else "yellow"))
        if target.path:  # the answer is in the sub-agent's log: wait for it to reach this session
            with contextlib.suppress(TimeoutError):
                await self.live.wait_for(lambda v: target.id not in _nested(v.state.messages), 30.0)
        await self._follow(start, before)


def _nested(messages: Any) -> set[str]:
    return {a.id for a in nested_approvals(messages)}


def chat_command(
    config: ConfigPath,
    session_id: Annotated[
        str | None, typer.Option(help="Chat in this session (an existing one continues). Default: chat-<random>.")
    ] = None,
    store: StoreOption = None,
    local: LocalOption = False,
    agent: Annotated[
        str | None, typer.Option(help="Chat with this agent of the config instead of its main one.")
    ] = None,
) -> None:
    """Chat with the config's agent in the terminal; /help lists the commands, Ctrl-C stops a turn."""
    console = stdout()
    main_agent, settings = load_target(config, agent)
    chosen = session_id or f"chat-{secrets.token_hex(2)}"

    async def go() -> int:
        async with started_runtime(settings, store=store, local=local) as runtime:
            session = runtime.session(chosen, agent=main_agent)
            console.print(
                Text.assemble(
                    ("chatting with ", "dim"),
                    (main_agent.name, "bold"),
                    (f" in session {chosen}; /help lists the commands, /quit leaves", "dim"),
                )
            )
            interrupts = Interrupts()
            loop = asyncio.get_running_loop()
            try:
                loop.add_signal_handler(signal.SIGINT, interrupts.hit)
                installed = True
            except (NotImplementedError, RuntimeError):  # not the main thread, or no signals here
                installed = False
            try:
                return await chat_loop(
                    session, TerminalLines(console), console, interrupts=interrupts, assistant=main_agent.name
                )
            finally:
                if installed:
                    loop.remove_signal_handler(signal.SIGINT)

    raise typer.Exit(run_async(go()))
