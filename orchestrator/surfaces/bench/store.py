"""``troupe bench store``: how fast the SQLite store takes stream parts, and how small it keeps them.

Two measurements, each on a fresh file:

- **Throughput.** ``ai.stream`` events whose payload is ``{"parts": [...]}`` of N ``text-delta``
  wire parts (4-character deltas), one event per append, appended by many sessions at once, so
  group commit is exercised as it is under load. Reported as stream parts per second, per N.
- **Size.** File bytes (after ``PRAGMA wal_checkpoint(TRUNCATE)``) per text-delta, and per
  synthetic 3-turn agent session built from Troupe's own event types (``three_turn_session``).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
import time
from collections.abc import Sequence
from typing import Final

from orchestrator.core._json import JsonObject, JsonValue
from orchestrator.core.errors import UsageError
from orchestrator.core.events import Event
from orchestrator.core.stream import TextDelta
from orchestrator.core.wire import pack, part_to_wire
from orchestrator.store.sqlite import SqliteStore

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
    path: str,
    *,
    parts: int = 100_000,
    batch_sizes: Sequence[int] = (64, 256),
    sessions: int = 100,
) -> dict[str, object]:
    """Benchmark the SQLite store at ``path``, which must not exist; it is removed afterwards.

    Args:
        path: where to create the scratch database (refused if the file exists).
        parts: text-delta parts appended per batch size.
        batch_sizes: parts per ``ai.stream`` event (one event per append).
        sessions: sessions appending concurrently.

    Returns:
        ``{"parts", "sessions", "runs": [{"batch_size", "events", "seconds", "parts_per_s",
        "commits", "file_bytes", "bytes_per_part", "msgpack_bytes_per_part"}, ...],
        "session_bytes"}``.
    """
    if parts < 1 or sessions < 1 or not batch_sizes or min(batch_sizes) < 1:
        raise UsageError("parts, sessions and every batch size must be at least 1")
    if await asyncio.to_thread(os.path.exists, path):
        raise UsageError(f"{path} exists: bench_store needs a fresh file; pass a path that does not exist")
    runs = []
    try:
        for size in batch_sizes:
            runs.append(await _run_parts(path, parts=parts, batch_size=size, sessions=sessions))
            await asyncio.to_thread(_remove, path)
        session_bytes = await measure_session_bytes(path, sessions=sessions)
    finally:
        await asyncio.to_thread(_remove, path)
    return {"parts": parts, "sessions": sessions, "runs": runs, "session_bytes": session_bytes}


async def measure_session_bytes(path: str, *, sessions: int = 100) -> float:
    """Bytes of SQLite file (indexes included) per synthetic 3-turn session.

    Appends ``sessions`` copies of ``three_turn_session`` to a fresh file at ``path`` and divides
    the checkpointed file size by their number; the file's fixed pages are shared among them,
    as they are in a real store holding many sessions. Leaves the file in place.
    """
    store = SqliteStore(path)
    try:
        ids = [f"session-{i:05d}" for i in range(sessions)]
        await asyncio.gather(*(_append_all(store, sid, three_turn_session(sid)) for sid in ids))
    finally:
        await store.close()
    return await asyncio.to_thread(_checkpointed_size, path) / sessions


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
        f"SQLite event store: {result['parts']:,} text-delta parts per row, {result['sessions']} sessions "
        "appending at once, one ai.stream event per append",
        f"{'parts/event':>11}  {'events':>7}  {'seconds':>8}  {'parts/s':>10}  {'commits':>7}  "
        f"{'bytes/part':>10}  {'msgpack B/part':>14}",
    ]
    for run in runs:
        lines.append(
            f"{run['batch_size']:>11}  {run['events']:>7,}  {run['seconds']:>8.3f}  "
            f"{run['parts_per_s']:>10,.0f}  {run['commits']:>7,}  {run['bytes_per_part']:>10.2f}  "
            f"{run['msgpack_bytes_per_part']:>14.2f}"
        )
    lines.append(f"3-turn agent session: {result['session_bytes']:,.0f} bytes of file per session, indexes included")
    return "\n".join(lines)


async def _run_parts(path: str, *, parts: int, batch_size: int, sessions: int) -> dict[str, object]:
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
    store = SqliteStore(path)
    try:
        await store.append("bench-warmup", [Event("bench-warmup", "ai.stream", {"parts": []})])  # opens the file
        commits = store.commits
        began = time.perf_counter()
        await asyncio.gather(
            *(_append_events(store, f"bench-{batch_size}-session-{i:04d}", evs) for i, evs in enumerate(per_session))
        )
        seconds = time.perf_counter() - began
        commits = store.commits - commits
    finally:
        await store.close()
    size = await asyncio.to_thread(_checkpointed_size, path)
    return {
        "batch_size": batch_size,
        "events": events,
        "seconds": seconds,
        "parts_per_s": parts / seconds,
        "commits": commits,
        "file_bytes": size,
        "bytes_per_part": size / parts,
        "msgpack_bytes_per_part": raw / parts,
    }


def _delta(k: int) -> str:
    """The k-th 4-character delta: A000, A001, ..., A999, B000, and so on."""
    return f"{chr(65 + (k // 1000) % 26)}{k % 1000:03d}"


async def _append_events(store: SqliteStore, session_id: str, events: list[Event]) -> None:
    for index, event in enumerate(events):
        await store.append(session_id, [event], expected_index=index)


async def _append_all(store: SqliteStore, session_id: str, batches: list[list[Event]]) -> None:
    for batch in batches:
        await store.append(session_id, batch)


def _checkpointed_size(path: str) -> int:
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    wal = f"{path}-wal"
    return os.path.getsize(path) + (os.path.getsize(wal) if os.path.exists(wal) else 0)


def _remove(path: str) -> None:
    for name in (path, f"{path}-wal", f"{path}-shm"):
        if os.path.exists(name):
            os.remove(name)
