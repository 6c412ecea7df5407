"""``troupe bench store``: how fast a store takes stream parts, and how small it keeps them.

Two measurements, each on a fresh store (``scratch``: SQLite files, or PostgreSQL databases):

- **Throughput.** ``ai.stream`` events whose payload is ``{"parts": [...]}`` of N ``text-delta``
  wire parts (4-character deltas), one event per append, appended by many sessions at once, so
  group commit is exercised as it is under load. Reported as stream parts per second, per N, with
  the latency of one append under that load (p50, p99) and the transactions it took.
- **Size.** Stored bytes (``Measurable.stored_bytes``: SQLite's checkpointed file, PostgreSQL's
  tables with their indexes and TOAST) per text-delta, and per synthetic 3-turn agent session
  built from Troupe's own event types (``three_turn_session``).
"""

from __future__ import annotations

import asyncio
import hashlib
import statistics
import time
from collections.abc import Sequence
from typing import Final

from orchestrator.core._json import JsonObject, JsonValue
from orchestrator.core.errors import UsageError
from orchestrator.core.events import Event
from orchestrator.core.stream import TextDelta
from orchestrator.core.wire import pack, part_to_wire
from orchestrator.store import EventStore, open_store
from orchestrator.store.base import Measurable
from orchestrator.surfaces.bench.scratch import Scratch

__all__ = ["bench_store", "format_store_bench", "measure_session_bytes", "three_turn_session"]

_TEXT: Final = (
    "Sure! I have added two ceramic mugs to your cart. They are dishwasher safe, hold about "
    "350 ml each, and ship within two business days. Would you like me to compare prices with "
    "the other stores I know about, or check whether a matching saucer set is in stock? I can "
    "also apply the discount code from your last order if it is still valid for this item. "
)
_T0: Final = 1_780_000_000.0
"""A fixed epoch for synthetic ``at`` values: the bench never reads the clock into events."""


async def bench_store(
    scratch: Scratch,
    *,
    parts: int = 100_000,
    batch_sizes: Sequence[int] = (64, 256),
    sessions: int = 100,
) -> dict[str, object]:
    """Benchmark one backend on fresh stores from ``scratch`` (each is dropped afterwards).

    Args:
        scratch: where fresh stores come from (``scratch.scratch_stores``).
        parts: text-delta parts appended per batch size.
        batch_sizes: parts per ``ai.stream`` event (one event per append).
        sessions: sessions appending concurrently.

    Returns:
        ``{"store", "parts", "sessions", "runs": [{"batch_size", "events", "seconds", "parts_per_s",
        "commits", "append_ms_p50", "append_ms_p99", "file_bytes", "bytes_per_part",
        "msgpack_bytes_per_part"}, ...], "session_bytes"}``.
    """
    if parts < 1 or sessions < 1 or not batch_sizes or min(batch_sizes) < 1:
        raise UsageError("parts, sessions and every batch size must be at least 1")
    runs = []
    for size in batch_sizes:
        url = await asyncio.to_thread(scratch.fresh)
        try:
            runs.append(await _run_parts(url, parts=parts, batch_size=size, sessions=sessions))
        finally:
            await asyncio.to_thread(scratch.drop, url)
    url = await asyncio.to_thread(scratch.fresh)
    try:
        session_bytes = await measure_session_bytes(url, sessions=sessions)
    finally:
        await asyncio.to_thread(scratch.drop, url)
    return {"store": scratch.label, "parts": parts, "sessions": sessions, "runs": runs, "session_bytes": session_bytes}


async def measure_session_bytes(url: str, *, sessions: int = 100) -> float:
    """Stored bytes (indexes included) per synthetic 3-turn session, in the fresh store at ``url``.

    Appends ``sessions`` copies of ``three_turn_session`` and divides the store's size by their
    number; the store's fixed pages are shared among them, as they are in a real store holding
    many sessions. Leaves the store in place.
    """
    store = open_store(url)
    try:
        ids = [f"session-{i:05d}" for i in range(sessions)]
        await asyncio.gather(*(_append_all(store, sid, three_turn_session(sid)) for sid in ids))
        return await _size(store) / sessions
    finally:
        await store.close()


async def _size(store: EventStore) -> int:
    if not isinstance(store, Measurable):
        raise UsageError(f"{store.url} cannot say how many bytes it takes: bench a SQLite or PostgreSQL store")
    return await store.stored_bytes()


def three_turn_session(session_id: str) -> list[list[Event]]:
    """A plausible 3-turn agent session, as append batches of Troupe's built-in events.

    Each turn: a user input and its decision, a turn start, a model step streaming ~400
    characters in 4-character deltas (flushed as ``ai.stream`` events of up to 32 parts) and
    calling a tool, the tool's run, a second step streaming ~200 characters, and the turn's end:
    15 events, ~150 text-deltas. Ids are hash-like, as derived ids are (they do not compress).
    """
    batches: list[list[Event]] = []
    clock = iter(_T0 + 0.0137 * i for i in range(10_000))

    def event(kind: str, payload: JsonObject, *, name: str) -> Event:
        digest = hashlib.blake2b(f"{session_id}/{name}".encode(), digest_size=11).hexdigest()
        return Event(f"troupe:{digest}", kind, payload, next(clock))

    def stream(step: str, message: str, text: str, extra: list[JsonValue]) -> None:
        chunks: list[JsonValue] = [part_to_wire(TextDelta(text[i : i + 4])) for i in range(0, len(text), 4)]
        wire: list[JsonValue] = [{"type": "message-start", "messageId": message}, *chunks, *extra]
        for n, start in enumerate(range(0, len(wire), 32)):
            payload: JsonObject = {"stepId": step, "parts": wire[start : start + 32]}
            batches.append([event("ai.stream", payload, name=f"{step}/stream/{n}")])

    for turn in range(1, 4):
        input_id = f"msg-{hashlib.blake2b(f'{session_id}/{turn}'.encode(), digest_size=8).hexdigest()}"
        turn_id, call_id = f"turn-{turn}", f"call_{turn}abcdefghij"
        usage: JsonObject = {"inputTokens": 812 * turn, "outputTokens": 143}
        batches.append(
            [
                Event(input_id, "ai.input", {"role": "user", "text": _TEXT[:80], "generate": True}, next(clock)),
                event("ai.control.decided", {"commandId": input_id, "outcome": "applied"}, name=f"{turn}/d"),
            ]
        )
        for step_no, (text, tool) in enumerate(((_TEXT, True), (_TEXT[:200], False))):
            step, message = f"{turn_id}/step-{step_no}", f"msg-{turn}-{step_no}-assistant"
            if step_no == 0:
                started: JsonObject = {
                    "turnId": turn_id,
                    "inputIds": [input_id],
                    "messageId": message,
                    "retry": False,
                }
                batches.append([event("ai.turn.started", started, name=f"{turn}/start")])
            step_started: JsonObject = {
                "turnId": turn_id,
                "stepId": step,
                "turnStep": step_no,
                "sessionStep": turn * 2 + step_no,
            }
            batches.append([event("ai.step.started", {**step_started, "model": "scripted"}, name=f"{step}/start")])
            call: JsonObject = {
                "type": "tool-call",
                "id": call_id,
                "name": "add_to_cart",
                "input": {"slug": "mug", "qty": 2},
            }
            stream(step, message, text, [call] if tool else [{"type": "finish", "reason": "stop"}])
            finished: JsonObject = {
                "stepId": step,
                "finishReason": "tool-calls" if tool else "stop",
                "usage": usage,
            }
            if tool:
                finished["toolCalls"] = [{"id": call_id, "name": "add_to_cart"}]
            batches.append([event("ai.step.finished", finished, name=f"{step}/end")])
            if tool:
                tool_started: JsonObject = {"callId": call_id, "name": "add_to_cart", "attempt": 1}
                output: JsonObject = {"ok": True, "cart": [{"slug": "mug", "qty": 2, "price": 12.5}]}
                batches.append([event("ai.tool.started", tool_started, name=f"{call_id}/start")])
                batches.append(
                    [event("ai.tool.finished", {"callId": call_id, "output": output}, name=f"{call_id}/end")]
                )
        batches.append([event("ai.turn.finished", {"turnId": turn_id, "outcome": "completed"}, name=f"{turn}/end")])
    return batches


def format_store_bench(result: dict[str, object]) -> str:
    """A small plain-text table of a ``bench_store`` result."""
    runs = result["runs"]
    assert isinstance(runs, list)
    lines = [
        f"{result['store']} event store: {result['parts']:,} text-delta parts per row, {result['sessions']} "
        "sessions appending at once, one ai.stream event per append",
        f"{'parts/event':>11}  {'events':>7}  {'seconds':>8}  {'parts/s':>10}  {'commits':>7}  "
        f"{'append p50/p99 ms':>17}  {'bytes/part':>10}  {'msgpack B/part':>14}",
    ]
    for run in runs:
        latency = f"{run['append_ms_p50']:.2f} / {run['append_ms_p99']:.2f}"
        lines.append(
            f"{run['batch_size']:>11}  {run['events']:>7,}  {run['seconds']:>8.3f}  "
            f"{run['parts_per_s']:>10,.0f}  {run['commits']:>7,}  {latency:>17}  {run['bytes_per_part']:>10.2f}  "
            f"{run['msgpack_bytes_per_part']:>14.2f}"
        )
    lines.append(f"3-turn agent session: {result['session_bytes']:,.0f} bytes stored per session, indexes included")
    return "\n".join(lines)


async def _run_parts(url: str, *, parts: int, batch_size: int, sessions: int) -> dict[str, object]:
    per_session: list[list[Event]] = [[] for _ in range(sessions)]
    raw = 0
    for n, start in enumerate(range(0, parts, batch_size)):
        wire: list[JsonValue] = [
            part_to_wire(TextDelta(_delta(k))) for k in range(start, min(start + batch_size, parts))
        ]
        payload: JsonObject = {"parts": wire}
        raw += len(pack(payload))
        per_session[n % sessions].append(Event(f"bench-{batch_size}-{n}", "ai.stream", payload, _T0 + n))
    events = sum(len(e) for e in per_session)
    store = open_store(url)
    latencies: list[float] = []
    try:
        await store.append("bench-warmup", [Event("bench-warmup", "ai.stream", {"parts": []})])  # connects
        commits = _commits(store)
        began = time.perf_counter()
        await asyncio.gather(
            *(
                _append_events(store, f"bench-{batch_size}-session-{i:04d}", evs, latencies)
                for i, evs in enumerate(per_session)
            )
        )
        seconds = time.perf_counter() - began
        commits = _commits(store) - commits
        size = await _size(store)
    finally:
        await store.close()
    cuts = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else latencies * 99
    return {
        "batch_size": batch_size,
        "events": events,
        "seconds": seconds,
        "parts_per_s": parts / seconds,
        "commits": commits,
        "append_ms_p50": cuts[49] * 1000,
        "append_ms_p99": cuts[98] * 1000,
        "file_bytes": size,
        "bytes_per_part": size / parts,
        "msgpack_bytes_per_part": raw / parts,
    }


def _commits(store: EventStore) -> int:
    """Write transactions the store object has committed (SQLite and PostgreSQL count them)."""
    return int(getattr(store, "commits", 0))


def _delta(k: int) -> str:
    """The k-th 4-character delta: A000, A001, ..., A999, B000, and so on."""
    return f"{chr(65 + (k // 1000) % 26)}{k % 1000:03d}"


async def _append_events(store: EventStore, session_id: str, events: list[Event], latencies: list[float]) -> None:
    for index, event in enumerate(events):
        began = time.perf_counter()
        await store.append(session_id, [event], expected_index=index)
        latencies.append(time.perf_counter() - began)


async def _append_all(store: EventStore, session_id: str, batches: list[list[Event]]) -> None:
    for batch in batches:
        await store.append(session_id, batch)
