"""``troupe bench http``: the HTTP API under a bounded loopback load.

It serves ``configs/bench-http.yaml`` (``troupe serve`` in a child process, on 127.0.0.1 and a
free port, on a local Ray or ``--local``; or an already running server: ``--url``), creates S
sessions and starts one turn in each, then:

1. connects N SSE followers (``GET /api/sessions/{id}/events``), spread over the sessions, and
   waits until each has its snapshot;
2. sends a burst of M mixed requests over C connections while the followers stream: reads
   (``/state``, ``/messages``, ``/info``, ``GET /api/chat/{id}/messages``) and writes (``POST
   .../messages``, each of which starts a turn once the session is free);
3. sends M reads alone over C connections (reads per second);
4. waits for every session to finish its turns, then checks every follower: per session, a
   reference follower that connected first folds every event it got into its copy of the
   conversation, which must equal the session's state at the end; every other follower must
   have received exactly the reference's events after its own snapshot, in order, each once
   (same ids, same bytes), and reached the session's last index.

Each phase also reports the CPU seconds the server's process used meanwhile (found by its
listening port; its Ray processes are not counted) and this process's own: on a shared machine
the wall-clock figures move with the load, the CPU per request much less. The requests go over a
lean keep-alive HTTP/1.1 client of its own (one connection per worker), so that the client costs
a fraction of the server.

Everything is bounded: the request counts, the connections, and ``limit`` seconds for the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psutil

from orchestrator.core.errors import ParseError, UsageError
from orchestrator.core.mutations import ClientView
from orchestrator.core.wire import parse_state, state_to_wire

__all__ = ["CONFIG", "HttpFigures", "Phase", "bench_http", "format_http"]

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "bench-http.yaml"
"""The served workload: every turn streams 40 text chunks."""

READS = ("state", "messages", "info", "chat")
MIX: tuple[tuple[str, int], ...] = (("state", 25), ("messages", 15), ("info", 20), ("chat", 10), ("send", 30))
"""The burst's mix, in percent."""


@dataclass(frozen=True)
class Phase:
    """One load phase: how many requests, how long, and their latencies."""

    name: str
    requests: int
    errors: int
    seconds: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    failures: tuple[str, ...] = ()
    """What the failed requests got (distinct: a status code, or the client's error)."""
    server_cpu: float | None = None
    """CPU seconds the server's process used meanwhile (its own, not its Ray's; ``None``: not found)."""
    client_cpu: float = 0.0
    """CPU seconds this process (the load and the SSE followers) used meanwhile."""

    @property
    def rate(self) -> float:
        """Requests per second."""
        return self.requests / self.seconds if self.seconds > 0 else 0.0


@dataclass
class HttpFigures:
    """What ``bench_http`` measured and checked."""

    url: str
    sessions: int
    followers: int
    connections: int
    phases: list[Phase] = field(default_factory=list)
    events: int = 0
    """SSE ``mutations`` events received, over every follower."""
    lost: int = 0
    """Followers that missed an event (or ended before the session's last index)."""
    duplicated: int = 0
    """Followers that received an event twice (or out of order)."""
    mismatched: int = 0
    """Sessions whose reference follower's copy differs from the session's state at the end."""
    resets: int = 0
    """Snapshots sent after the first (a view that started over); not an error, but counted."""
    unfinished: int = 0
    """Sessions still running turns when the time ran out."""

    @property
    def ok(self) -> bool:
        """Every follower saw every event exactly once, and every request succeeded."""
        return (
            self.lost == 0
            and self.duplicated == 0
            and self.mismatched == 0
            and self.unfinished == 0
            and all(p.errors == 0 for p in self.phases)
        )

    def summary(self) -> dict[str, Any]:
        """The figures as JSON."""
        out = asdict(self)
        out["phases"] = [{**asdict(p), "rate": round(p.rate, 1)} for p in self.phases]
        out["ok"] = self.ok
        return out


# -- the server ----------------------------------------------------------------------------------------


def _server_process(base: str) -> psutil.Process | None:
    """The process listening on ``base``'s port here (its CPU is reported per phase), if it can be seen."""
    port = urlsplit(base).port
    try:
        for connection in psutil.net_connections(kind="tcp"):
            if connection.status == psutil.CONN_LISTEN and connection.laddr.port == port and connection.pid:
                return psutil.Process(connection.pid)
    except (psutil.Error, OSError):
        pass
    return None


def _cpu(process: psutil.Process | None) -> float | None:
    try:
        return None if process is None else sum(process.cpu_times()[:2])
    except psutil.Error:
        return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def _served(local: bool, store: str | None, limit: float) -> AsyncIterator[str]:
    """``troupe serve configs/bench-http.yaml`` in a child process; its URL once it answers."""
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="troupe-bench-http-") as scratch:
        url = store or f"sqlite:///{Path(scratch) / 'bench.db'}"
        command = [sys.executable, "-m", "orchestrator.surfaces.cli.main", "serve", str(CONFIG)]
        command += ["--host", "127.0.0.1", "--port", str(port), "--store", url] + (["--local"] if local else [])
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
        log = Path(scratch) / "server.log"
        process = await asyncio.to_thread(_start, command, scratch, env, log)
        base = f"http://127.0.0.1:{port}"
        try:
            await _wait_ready(base, process, limit, log)
            yield base
        finally:
            process.send_signal(signal.SIGTERM)  # it stops by itself, its Ray too
            try:
                await asyncio.to_thread(process.wait, 60)
            except subprocess.TimeoutExpired:
                process.kill()
                await asyncio.to_thread(process.wait, 10)


def _start(command: list[str], cwd: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:  # the child keeps its own descriptor
        return subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)


async def _wait_ready(base: str, process: subprocess.Popen[bytes], limit: float, log: Path) -> None:
    deadline = time.monotonic() + limit
    async with httpx.AsyncClient(base_url=base, timeout=5) as http:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                tail = (await asyncio.to_thread(log.read_text, errors="replace"))[-2000:]
                raise UsageError(f"the server exited ({process.returncode}) before it answered:\n{tail}")
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get("/openapi.json")).status_code == 200:
                    return
            await asyncio.sleep(0.2)
    raise UsageError(f"the server did not answer within {limit:g} s (its log: {log})")


# -- SSE followers (raw HTTP/1.1: 500 of them cost little) ----------------------------------------------


@dataclass
class _Follower:
    session: str
    reference: bool
    events: list[tuple[int, int]] = field(default_factory=list)
    """(id, hash of the event's bytes) of every ``mutations`` event, in order."""
    start: int = -1
    """The index of the first snapshot."""
    snapshots: int = 0
    view: ClientView | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    error: str | None = None
    closed: bool = False

    async def reached(self, index: int) -> None:
        """Wait until an event at ``index`` (or later) came, or the stream ended."""
        while self.last < index and self.error is None and not self.closed:
            self.changed.clear()
            await self.changed.wait()

    @property
    def last(self) -> int:
        return self.events[-1][0] if self.events else self.start

    def take(self, block: bytes) -> None:
        kind, event_id, data = None, None, b""
        for line in block.split(b"\n"):
            if line.startswith(b"event: "):
                kind = line[7:].decode()
            elif line.startswith(b"id: "):
                event_id = int(line[4:])
            elif line.startswith(b"data: "):
                data = line[6:]
        if event_id is None:
            return  # a comment (ping)
        self.changed.set()
        if kind == "snapshot":
            self.snapshots += 1
            if self.start < 0:
                self.start = event_id
            else:  # the stream started over: what follows is checked from this snapshot on
                self.events.append((event_id, -1))
            if self.reference:
                body = json.loads(data)
                run = {k: v for k, v in body["state"].items() if k in ("messages", "status", "error")}
                self.view = ClientView.of(parse_state(run), body["index"])
            self.ready.set()
            return
        self.events.append((event_id, hash(data)))
        if self.reference and self.view is not None:
            for mutation in json.loads(data)["mutations"]:
                self.view.apply(mutation)


async def _follow(base: str, follower: _Follower) -> None:
    """Follow one session's stream until it ends, or the task is cancelled (the run is over)."""
    parts = urlsplit(base)
    try:
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    except OSError as error:
        follower.error = f"connect: {error}"
        follower.ready.set()
        return
    try:
        request = (
            f"GET /api/sessions/{follower.session}/events HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            "Accept: text/event-stream\r\n\r\n"
        )
        writer.write(request.encode())
        head = await reader.readuntil(b"\r\n\r\n")
        if b" 200 " not in head.split(b"\r\n", 1)[0]:
            follower.error = head.split(b"\r\n", 1)[0].decode()
            follower.ready.set()
            return
        buffer = b""
        async for chunk in _chunks(reader):
            buffer += chunk
            while b"\n\n" in buffer:
                block, buffer = buffer.split(b"\n\n", 1)
                follower.take(block)
    except (OSError, asyncio.IncompleteReadError, ValueError, KeyError, ParseError) as error:
        follower.error = f"{type(error).__name__}: {error}"
    finally:
        follower.closed = True
        follower.changed.set()
        follower.ready.set()
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """The body of a chunked response, until it ends (or the follower is cancelled)."""
    while size := int((await reader.readuntil(b"\r\n")).strip() or b"0", 16):
        data = await reader.readexactly(size + 2)
        yield data[:-2]


# -- the load ---------------------------------------------------------------------------------------


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _plan(count: int, sessions: Sequence[str], kinds: Sequence[tuple[str, int]], seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    names = [k for k, _ in kinds]
    weights = [w for _, w in kinds]
    return [(rng.choices(names, weights)[0], rng.choice(sessions)) for _ in range(count)]


class _Connection:
    """One keep-alive HTTP/1.1 connection, one request at a time.

    A lean client, so that the load measures the server: httpx's pool spent more CPU per request
    (most of it choosing among 200 connections) than the server did.
    """

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.head = f"Host: {host}:{port}\r\n".encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """Send one request; its status and body (it reconnects when the server closed the connection)."""
        if self.writer is None or self.reader is None or self.reader.at_eof():
            await self.close()
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.reader, self.writer
        lines = [f"{method} {path} HTTP/1.1\r\n".encode(), self.head]
        if body is not None:
            lines.append(f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n".encode())
        lines.append(b"\r\n")
        if body is not None:
            lines.append(body)
        writer.write(b"".join(lines))
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length, chunked, close = -1, False, False
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                match name.strip().lower():
                    case b"content-length":
                        length = int(value)
                    case b"transfer-encoding":
                        chunked = b"chunked" in value.lower()
                    case b"connection":
                        close = b"close" in value.lower()
            if chunked:
                parts = []
                while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
                    parts.append((await reader.readexactly(size + 2))[:-2])
                await reader.readuntil(b"\r\n")
                data = b"".join(parts)
            else:
                data = await reader.readexactly(length) if length >= 0 else await reader.read()
        except BaseException:
            await self.close()  # a half-read response: never reuse the connection
            raise
        if close:
            await self.close()
        return status, data

    async def close(self) -> None:
        """Close the connection (the next request opens another)."""
        writer, self.writer, self.reader = self.writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


async def _request(connection: _Connection, kind: str, sid: str, n: int) -> int:
    """One request of the load; its status."""
    match kind:
        case "state":
            status, _ = await connection.request("GET", f"/api/sessions/{sid}/state")
        case "messages":
            status, _ = await connection.request("GET", f"/api/sessions/{sid}/messages")
        case "info":
            status, _ = await connection.request("GET", f"/api/sessions/{sid}/info")
        case "chat":
            status, _ = await connection.request("GET", f"/api/chat/{sid}/messages")
        case _:
            body = json.dumps({"text": f"message {n}"}).encode()
            status, _ = await connection.request("POST", f"/api/sessions/{sid}/messages", body)
    return status


async def _phase(
    name: str, base: str, plan: list[tuple[str, str]], connections: int, server: psutil.Process | None
) -> Phase:
    latencies: list[float] = []
    errors = 0
    failures: set[str] = set()
    work: Iterator[tuple[int, tuple[str, str]]] = iter(enumerate(plan))
    parts = urlsplit(base)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80

    async def worker() -> None:
        nonlocal errors
        connection = _Connection(host, port)
        try:
            for n, (kind, sid) in work:
                began = time.perf_counter()
                failure = None
                try:
                    status = await _request(connection, kind, sid, n)
                    if status >= 400:
                        failure = f"{kind}: HTTP {status}"
                except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as error:
                    failure = f"{kind}: {type(error).__name__}"
                latencies.append(time.perf_counter() - began)
                if failure is not None:
                    errors += 1
                    failures.add(failure)
        finally:
            await connection.close()

    began, cpu_began, server_began = time.perf_counter(), time.process_time(), _cpu(server)
    await asyncio.gather(*(worker() for _ in range(connections)))
    seconds = time.perf_counter() - began
    server_ended = _cpu(server)
    return Phase(
        name,
        len(plan),
        errors,
        seconds,
        _percentile(latencies, 0.5) * 1000,
        _percentile(latencies, 0.99) * 1000,
        max(latencies, default=0.0) * 1000,
        tuple(sorted(failures)),
        None if server_began is None or server_ended is None else server_ended - server_began,
        time.process_time() - cpu_began,
    )


async def _settle(http: httpx.AsyncClient, sessions: Sequence[str], deadline: float) -> list[dict[str, Any]]:
    """Wait until no session runs or queues a turn; the final states (``unfinished`` ones too)."""
    finals: list[dict[str, Any]] = []
    for sid in sessions:
        while True:
            info = (await http.get(f"/api/sessions/{sid}/info")).json()
            if (not info["executing"] and not info["queued"]) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        finals.append((await http.get(f"/api/sessions/{sid}/state")).json())
    return finals


async def bench_http(
    *,
    sessions: int = 50,
    followers: int = 500,
    requests: int = 1000,
    connections: int = 200,
    url: str | None = None,
    local: bool = False,
    store: str | None = None,
    limit: float = 600.0,
    seed: int = 7,
) -> HttpFigures:
    """Run the load (see the module docstring) against ``url``, or a server of its own."""
    if min(sessions, followers, requests, connections) < 1:
        raise UsageError("bench http: --sessions, --followers, --requests and --connections must be at least 1")
    if url is not None:
        return await _run(url.rstrip("/"), sessions, followers, requests, connections, limit, seed)
    async with _served(local, store, limit) as base:
        return await _run(base, sessions, followers, requests, connections, limit, seed)


async def _run(
    base: str, sessions: int, followers: int, requests: int, connections: int, limit: float, seed: int
) -> HttpFigures:
    deadline = time.monotonic() + limit
    figures = HttpFigures(base, sessions, followers, connections)
    server = _server_process(base)
    async with httpx.AsyncClient(base_url=base, timeout=max(limit, 10)) as http:  # setup and checks only
        run = os.urandom(4).hex()
        ids = [f"bench-{run}-{i}" for i in range(sessions)]
        for sid in ids:
            created = await http.post("/api/sessions", json={"id": sid})
            created.raise_for_status()
        # One reference follower per session first (it folds what it gets), then the rest.
        crowd = [_Follower(sid, True) for sid in ids[: min(sessions, followers)]]
        crowd += [_Follower(ids[i % sessions], False) for i in range(len(crowd), followers)]
        tasks = [asyncio.ensure_future(_follow(base, f)) for f in crowd[: len(ids)]]
        await asyncio.wait_for(asyncio.gather(*(f.ready.wait() for f in crowd[: len(ids)])), limit)
        for sid in ids:  # every session live: one turn each
            (await http.post(f"/api/sessions/{sid}/messages", json={"text": "hello"})).raise_for_status()
        tasks += [asyncio.ensure_future(_follow(base, f)) for f in crowd[len(ids) :]]
        await asyncio.wait_for(asyncio.gather(*(f.ready.wait() for f in crowd)), max(1.0, deadline - time.monotonic()))
        figures.phases.append(await _phase("burst", base, _plan(requests, ids, MIX, seed), connections, server))
        reads = tuple((k, 1) for k in READS)
        figures.phases.append(await _phase("reads", base, _plan(requests, ids, reads, seed + 1), connections, server))
        finals = await _settle(http, ids, deadline)
        figures.unfinished = sum(
            1 for f in finals if f["state"]["status"] == "streaming" or f["state"]["inbox"]["items"]
        )
        # The followers get to the last index (or the time runs out), then stop.
        last = {sid: final["index"] for sid, final in zip(ids, finals, strict=True)}
        behind = [f for f in crowd if f.error is None and f.last < last[f.session]]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*(f.reached(last[f.session]) for f in behind)), max(0.1, deadline - time.monotonic())
            )
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    _check(figures, crowd, ids, finals)
    return figures


def _check(figures: HttpFigures, crowd: list[_Follower], ids: list[str], finals: list[dict[str, Any]]) -> None:
    references = {f.session: f for f in crowd if f.reference}
    last = {sid: int(final["index"]) for sid, final in zip(ids, finals, strict=True)}
    for sid, final in zip(ids, finals, strict=True):
        view = references[sid].view
        folded = {} if view is None else state_to_wire(view.state)
        if view is None or folded != {k: final["state"].get(k) for k in folded}:
            figures.mismatched += 1
    for follower in crowd:
        figures.events += len(follower.events)
        figures.resets += max(0, follower.snapshots - 1)
        seen = [i for i, _ in follower.events]
        if follower.error is not None:
            figures.lost += 1
        elif any(b <= a for a, b in itertools.pairwise(seen)):
            figures.duplicated += 1
        elif follower.last < last[follower.session]:
            figures.lost += 1
        elif follower.snapshots == 1 and references[follower.session].snapshots == 1:
            expected = [e for e in references[follower.session].events if e[0] > follower.start]
            if follower.events != expected:
                figures.lost += 1


def format_http(figures: HttpFigures) -> str:
    """The figures as a few lines of text."""
    lines = [f"server {figures.url}: {figures.sessions} sessions, {figures.followers} SSE followers"]
    for phase in figures.phases:
        lines.append(
            f"{phase.name:>6}: {phase.requests} requests over {figures.connections} connections in "
            f"{phase.seconds:.2f} s ({phase.rate:.0f} req/s), p50 {phase.p50_ms:.0f} ms, p99 {phase.p99_ms:.0f} ms, "
            f"max {phase.max_ms:.0f} ms, {phase.errors} errors"
            + (f" ({', '.join(phase.failures)})" if phase.errors else "")
        )
        cpu = (
            ""
            if phase.server_cpu is None
            else f"server {phase.server_cpu:.2f} s ({phase.server_cpu / phase.requests * 1000:.2f} ms/request), "
        )
        lines.append(f"{'':>8}CPU: {cpu}client {phase.client_cpu:.2f} s")
    exact = figures.lost == figures.duplicated == figures.mismatched == figures.unfinished == 0
    verdict = "every follower saw every event exactly once" if exact else "NOT every event exactly once"
    lines.append(
        f"   sse: {figures.events} events to {figures.followers} followers; {figures.lost} lost, "
        f"{figures.duplicated} duplicated, {figures.mismatched} sessions whose stream does not fold to their state, "
        f"{figures.resets} re-snapshots, {figures.unfinished} sessions unfinished: {verdict}"
    )
    return "\n".join(lines)
