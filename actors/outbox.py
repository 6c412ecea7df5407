"""``Outbox``: the session calls a client makes in one turn of its loop, sent to each host as one Ray call.

A client with many sessions (a server, a pipeline, the shop benchmark) sends their commands and
snapshots in bursts: a poll reply ends a hundred turns and their next prompts go out together.
Each Ray call costs a task, an argument and a reply on both sides, and while calls are in
flight each holds its task's memory; a thousand sessions subscribing at once held ~13 KB each in
the client. The outbox gathers the calls made before the loop next runs its ready callbacks,
one list per host, and sends each list as ``SessionHost.calls``. A call alone is sent as itself
(one turn of the loop later than before: the cost of a quiet client). Each caller gets its own
result or its own exception (the host's, or the Ray error of the batch when the host is gone,
which ``Router.on_host`` retries per call as before). Only the quick calls of
``actors.host.BATCHED_CALLS`` go this way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

__all__ = ["Outbox"]

Pending = list[tuple[str, str, tuple[Any, ...], "asyncio.Future[Any]"]]


class Outbox:
    """Per-host lists of calls waiting for the end of this turn of the loop."""

    def __init__(self, host: Callable[[str], Any]) -> None:
        self._host = host
        """The actor handle of a host by name (``Router.host``)."""
        self._pending: dict[tuple[str, asyncio.AbstractEventLoop], Pending] = {}

    def call(self, name: str, method: str, session_id: str, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        """``method(session_id, *args)`` on host ``name``, sent with the other calls of this turn."""
        loop = asyncio.get_running_loop()
        key = (name, loop)  # a client on several loops (threads) batches each loop's calls apart
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = []
            loop.call_soon(self._flush, key)
        future: asyncio.Future[Any] = loop.create_future()
        pending.append((method, session_id, args, future))
        return future

    def _flush(self, key: tuple[str, asyncio.AbstractEventLoop]) -> None:
        pending = self._pending.pop(key)
        futures = [future for *_, future in pending]
        alone = len(pending) == 1
        try:
            handle = self._host(key[0])
            if alone:
                method, session_id, args, _ = pending[0]
                ref = getattr(handle, method).remote(session_id, *args)
            else:
                ref = handle.calls.remote([(method, session_id, args) for method, session_id, args, _ in pending])
            _reply(ref).add_done_callback(lambda done: _settle(done, futures, alone=alone))
        except Exception as error:  # e.g. HostNotFound: each caller's retry decides, as for a call of its own
            for future in futures:
                if not future.done():
                    future.set_exception(error)


def _reply(ref: Any) -> asyncio.Future[Any]:
    """The reply of a Ray call as a future of this loop (what ``await ref`` does, without a task)."""
    return asyncio.wrap_future(ref.future())


def _settle(done: asyncio.Future[Any], futures: list[asyncio.Future[Any]], *, alone: bool) -> None:
    """Each caller's own result or exception (``alone``: the reply is the one call's result).

    The error of the Ray call itself (the host is gone) goes to every caller.
    """
    error = _error(done)
    if error is not None:
        results: list[tuple[bool, Any]] = [(False, error)] * len(futures)
    else:
        results = [(True, done.result())] if alone else done.result()
    for future, (ok, value) in zip(futures, results, strict=True):
        if future.done():  # the caller gave up (cancelled)
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)


def _error(done: asyncio.Future[Any]) -> BaseException | None:
    return asyncio.CancelledError() if done.cancelled() else done.exception()
