"""``run_sessions``: one durable session per row of a Ray Dataset (the Ray Data door).

::

    with Runtime.sync(store="sqlite:////data/troupe.db", namespace="batch") as rt:
        results = run_sessions(ds, runtime=rt, agent=shopper, prompt="question", key="id")
        for row in results.iter_rows():  # key, session_id, text, success, error, outcome, index, usage
            ...

How it runs: ``Dataset.map_batches`` over a pool of ``concurrency`` Ray Data actors
(``SessionRows``). Each keeps one ``Runtime`` attached to the namespace (in a worker a runtime
owns nothing: ``actors.runtime``) and runs at most ``in_flight`` sessions at once on the pooled
hosts, so however long the dataset, no more than ``concurrency * in_flight`` sessions run at a
time (and Ray Data's own backpressure holds the batches back). A batch leaves as soon as its
sessions have finished, so results stream out while later rows still run.

Durable and idempotent by row key: the session id is ``prefix + key`` and its one input's id is
derived from it (``row_input_id``). Before running a row the actor reads the session's log from
the store: a turn that already ended for that input is the row's result, with no host call; an
input already accepted but not finished is joined (the prompt with the same id replays, it is
never a second turn), and the host's recovery policies hold as everywhere (a ``report`` tool
that started is never run again). So a rerun of the pipeline, or Ray Data retrying a batch whose
actor died, converges on one turn per row. A row's prompt is not compared on a rerun: the key
names the session, whatever the text.

Errors are data: a failed turn, or a row whose key or prompt cannot be read, is a row with
``success=False`` and the error; ``on_error="raise"`` fails the job instead (``RowFailed``).

Ray Data is imported by this module only (``pip install 'raytroupe[data]'``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
from ray.data import ActorPoolStrategy

from actors.runtime import Runtime, SyncRuntime
from orchestrator.core.errors import RunError, UsageError
from orchestrator.core.ids import CHILD_SEPARATOR, RESERVED_ID_PREFIX, row_input_id
from orchestrator.core.turn import TurnOutcome
from orchestrator.core.wire import message_to_wire
from orchestrator.run.agent import Agent
from orchestrator.run.ledger import TurnLedger
from orchestrator.run.log import SessionLog
from orchestrator.store.base import EventStore

if TYPE_CHECKING:
    from ray.data import Dataset

__all__ = ["RESULT_SCHEMA", "RowFailed", "RowSpec", "SessionRows", "run_sessions", "stored_row"]

RowValue = str | Callable[[Mapping[str, Any]], str]
"""A column name, or a function of the row (a dict) that returns the value."""

_USAGE = pa.struct([("input_tokens", pa.int64()), ("output_tokens", pa.int64())])
RESULT_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("session_id", pa.string()),
        ("text", pa.string()),
        ("success", pa.bool_()),
        ("error", pa.string()),
        ("outcome", pa.string()),
        ("index", pa.int64()),
        ("usage", _USAGE),
    ]
)
"""The columns of ``run_sessions``' result (``messages``, a JSON string, follows when asked for)."""


class RowFailed(RunError):
    """A row's session did not succeed and the pipeline was told to fail (``on_error="raise"``)."""


@dataclass(frozen=True)
class RowSpec:
    """What every actor of the pool needs: the agent, how to read a row, where the sessions live."""

    agent: Agent
    prompt: RowValue
    key: RowValue
    runtime: dict[str, Any]
    """``Runtime`` keyword arguments (``Runtime.worker_options()`` of the driver's runtime)."""
    prefix: str = ""
    in_flight: int = 32
    messages: bool = False
    on_error: Literal["row", "raise"] = "row"
    schema: pa.Schema = field(default=RESULT_SCHEMA)


def _read(row: Mapping[str, Any], how: RowValue, what: str) -> str:
    if callable(how):
        value = how(row)
    elif how in row:
        value = row[how]
    else:
        raise UsageError(f"the row has no column {how!r} for the {what} (its columns: {sorted(row)})")
    if value is None or (isinstance(value, str) and not value):
        raise UsageError(f"the row's {what} is empty")
    return str(value)


def _session_id(prefix: str, key: str) -> str:
    session_id = prefix + key
    if session_id.startswith(RESERVED_ID_PREFIX) or CHILD_SEPARATOR in session_id:
        raise UsageError(
            f"row key {key!r} gives session id {session_id!r}: it may not start with {RESERVED_ID_PREFIX!r} "
            f"or hold {CHILD_SEPARATOR!r} (sub-agent sessions); pick another key or prefix"
        )
    return session_id


def _result(key: str, session_id: str, outcome: TurnOutcome, log: SessionLog | None, messages: bool) -> dict[str, Any]:
    usage = {"input_tokens": 0, "output_tokens": 0}
    if log is not None:
        usage = {"input_tokens": log.state.usage.input_tokens, "output_tokens": log.state.usage.output_tokens}
    row: dict[str, Any] = {
        "key": key,
        "session_id": session_id,
        "text": outcome.text,
        "success": outcome.success,
        "error": outcome.error,
        "outcome": outcome.outcome,
        "index": outcome.index,
        "usage": usage,
    }
    if messages:
        state = log.state.messages if log is not None else ()
        row["messages"] = json.dumps([message_to_wire(m) for m in state])
    return row


async def stored_row(
    store: EventStore, agent: Agent, key: str, session_id: str, *, messages: bool = False
) -> dict[str, Any] | None:
    """The row of a session whose pipeline input has been answered, read from the store; else ``None``.

    ``None`` when the session has no log yet, or its input has not been sent or not finished.
    """
    if await store.last_index(session_id) == 0:
        return None
    log = await SessionLog.open(store, session_id, agent.contract)
    ledger = await TurnLedger.from_log(log, agent.contract)
    input_id = row_input_id(session_id)
    if not ledger.knows(input_id, log.state) or not ledger.input_done(input_id, log.state):
        return None
    return _result(key, session_id, ledger.input_outcome(input_id), log, messages)


class SessionRows:
    """The Ray Data UDF: one session per row of each batch, on the namespace's pooled hosts.

    An async callable class: Ray Data runs ``__call__`` on an event loop of its own in the actor,
    where the runtime is started on first use (and kept for the actor's life).
    """

    def __init__(self, spec: RowSpec) -> None:
        self.spec = spec
        self._runtime: Runtime | None = None
        self._lock: asyncio.Lock | None = None
        self._slots: asyncio.Semaphore | None = None

    async def _started(self) -> tuple[Runtime, asyncio.Semaphore]:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._runtime is None:
                runtime = Runtime(**self.spec.runtime)
                await runtime.start()
                self._runtime = runtime
                self._slots = asyncio.Semaphore(self.spec.in_flight)
        assert self._slots is not None
        return self._runtime, self._slots

    async def __call__(self, batch: pa.Table) -> pa.Table:
        """The batch's rows, each through its session (those already answered straight from the store)."""
        runtime, slots = await self._started()
        rows = await asyncio.gather(*(self._row(runtime, slots, row) for row in batch.to_pylist()))
        return pa.Table.from_pylist(rows, schema=self.spec.schema)

    async def _row(self, runtime: Runtime, slots: asyncio.Semaphore, row: Mapping[str, Any]) -> dict[str, Any]:
        spec = self.spec
        key = ""
        session_id = ""
        try:
            key = _read(row, spec.key, "key")
            session_id = _session_id(spec.prefix, key)
            text = _read(row, spec.prompt, "prompt")
            async with slots:
                result = await self._run(runtime, key, session_id, text)
        except Exception as error:
            if spec.on_error == "raise":
                raise
            message = str(error) or type(error).__name__
            failed = TurnOutcome("", "error", "", f"{type(error).__name__}: {message}")
            return _result(key, session_id, failed, None, spec.messages)
        if spec.on_error == "raise" and not result["success"]:
            raise RowFailed(f"row {key!r} (session {session_id!r}): {result['outcome']}: {result['error']}")
        return result

    async def _run(self, runtime: Runtime, key: str, session_id: str, text: str) -> dict[str, Any]:
        spec = self.spec
        stored = await stored_row(runtime.store, spec.agent, key, session_id, messages=spec.messages)
        if stored is not None:
            return stored  # answered before (a rerun, or a retried batch): nothing runs again
        session = runtime.session(session_id, agent=spec.agent)
        turn = await session.prompt(text, id=row_input_id(session_id))  # a repeat replays: one turn
        outcome = await turn.finished
        log = await SessionLog.open(runtime.store, session_id, spec.agent.contract)
        return _result(key, session_id, outcome, log, spec.messages)


def run_sessions(
    ds: Dataset,
    *,
    agent: Agent,
    prompt: RowValue,
    key: RowValue,
    runtime: Runtime | SyncRuntime | None = None,
    store: str | None = None,
    namespace: str | None = None,
    prefix: str = "",
    concurrency: int = 2,
    in_flight: int = 32,
    batch_size: int = 16,
    messages: bool = False,
    on_error: Literal["row", "raise"] = "row",
    num_cpus: float = 0.25,
    ray_remote_args: Mapping[str, Any] | None = None,
) -> Dataset:
    """A Dataset of one session's result per row of ``ds`` (lazy, like every Ray Data transform).

    Args:
        ds: the inputs.
        agent: what every row's session runs.
        prompt: the column holding the prompt, or a function of the row (a dict) returning it.
        key: the column holding the row's stable key, or a function of the row; the session id is
            ``prefix + key``, so a rerun finds the sessions it ran before.
        runtime: a started ``Runtime`` (or ``Runtime.sync``) on the driver: the namespace, store and
            host layout to use.
        store: without ``runtime``: the store URL (an absolute SQLite path, or PostgreSQL).
        namespace: without ``runtime``: the Ray namespace (default: Troupe's).
        prefix: put before every key to make the session id.
        concurrency: Ray Data actors running sessions.
        in_flight: sessions each actor runs at once.
        batch_size: rows per batch handed to an actor.
        messages: add a ``messages`` column, the final conversation as JSON.
        on_error: ``"row"``: a failed session is a row with ``success=False``; ``"raise"``: the job fails.
        num_cpus: CPUs reserved per actor (they mostly wait on the hosts).
        ray_remote_args: more options for the actors (``max_restarts``, ``memory``, ...).

    Raises:
        UsageError: an argument that cannot work (the message says how to fix it).
    """
    if not isinstance(agent, Agent):
        raise UsageError(f"run_sessions(agent=...) needs an Agent, got {type(agent).__name__}")
    if on_error not in ("row", "raise"):
        raise UsageError(f"run_sessions(on_error=...) must be 'row' or 'raise', not {on_error!r}")
    for name, value in (("concurrency", concurrency), ("in_flight", in_flight), ("batch_size", batch_size)):
        if not isinstance(value, int) or value < 1:
            raise UsageError(f"run_sessions({name}=...) must be a positive integer, not {value!r}")
    if runtime is not None:
        if store is not None or namespace is not None:
            raise UsageError("run_sessions: pass runtime=..., or store= (and namespace=), not both")
        options = (runtime.runtime if isinstance(runtime, SyncRuntime) else runtime).worker_options()
    elif store is not None:
        options = {"store": store, **({"namespace": namespace} if namespace else {})}
    else:
        raise UsageError("run_sessions needs runtime=<a started Runtime> or store=<the store URL>")
    schema = RESULT_SCHEMA.append(pa.field("messages", pa.string())) if messages else RESULT_SCHEMA
    spec = RowSpec(agent, prompt, key, options, prefix, in_flight, messages, on_error, schema)
    return ds.map_batches(
        SessionRows,
        fn_constructor_args=(spec,),
        batch_format="pyarrow",
        batch_size=batch_size,
        compute=ActorPoolStrategy(size=concurrency),
        num_cpus=num_cpus,
        **dict(ray_remote_args or {}),
    )
