"""``AIState`` to and from msgpack, for snapshots (a cache of the fold, never the truth).

A snapshot is stored under a key made of the fold's own version and the contract reducer's
name, so changing either makes old snapshots invisible and the state is rebuilt from the log.
Anything that does not decode (corrupt bytes, an older shape) is treated as missing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from orchestrator.core.aistate import (
    ActiveTurn,
    AIState,
    CompactionState,
    DueHandler,
    Inbox,
    InboxItem,
    Interaction,
    ModelMetadata,
    Receipt,
    StepState,
    ToolRecord,
    Usage,
)
from orchestrator.core.contract import Contract
from orchestrator.core.payloads import PAYLOAD_CLASSES
from orchestrator.core.wire import pack, state_from_wire, state_to_wire, unpack

__all__ = ["FOLD_VERSION", "decode_state", "encode_later", "encode_state", "snapshot_key"]

FOLD_VERSION = "ai.v5"
"""The built-in fold's snapshot identity; bump it whenever ``orchestrator.core.fold`` changes meaning
(``v2``: pending commands hold typed payloads; ``v3``: a contract's reducer folds every event;
``v4``: an answered interaction keeps the user's reason, and a tool record the recovery policy
its start recorded; ``v5``: the active turn lists the calls it made)."""

_TYPES: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (
        ActiveTurn,
        CompactionState,
        DueHandler,
        Inbox,
        InboxItem,
        Interaction,
        ModelMetadata,
        Receipt,
        StepState,
        ToolRecord,
        Usage,
        *PAYLOAD_CLASSES.values(),  # the pending commands' payloads
    )
}


def snapshot_key(contract: Contract | None) -> str:
    """The snapshot identity of the fold for ``contract``."""
    if contract is None or contract.reducer is None:
        return FOLD_VERSION
    return f"{FOLD_VERSION}+{contract.reducer.name}"


_SCALARS: frozenset[type] = frozenset({str, int, float, bool, type(None)})
"""Types ``_encode`` returns as they are, checked first: most values in a state are these."""

_FIELDS: dict[type, tuple[str, ...] | None] = {}
"""Per class met by ``_encode``, its dataclass field names (``None``: not a dataclass)."""


def _field_names(kind: type) -> tuple[str, ...] | None:
    names = tuple(f.name for f in dataclasses.fields(kind)) if dataclasses.is_dataclass(kind) else None
    _FIELDS[kind] = names
    return names


def _encode(value: Any) -> Any:
    """``value`` as msgpack-able data, by the snapshot's rules.

    A dataclass becomes ``{"__t": name, field: ...}``, a tuple ``{"__tuple": [...]}``, a mapping
    ``{"__map": [[key, value], ...]}``. Scalars by exact type first, and a dataclass's field names
    once per class: a long session's state holds a record per tool call, and the general checks
    (``is_dataclass``, ``fields``, the ``Mapping`` ABC) cost ~15 µs a record, which a snapshot of
    a 1,000-call session paid 1,000 times.
    """
    kind = type(value)
    if kind in _SCALARS:
        return value
    names = _FIELDS[kind] if kind in _FIELDS else _field_names(kind)
    if names is not None:
        out = {"__t": kind.__name__}
        for name in names:
            out[name] = _encode(getattr(value, name))
        return out
    if isinstance(value, tuple):
        return {"__tuple": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict) or isinstance(value, Mapping):  # a dict without the ABC's check
        return {"__map": [[_encode(k), _encode(v)] for k, v in value.items()]}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if "__t" in value:
            cls = _TYPES[value["__t"]]
            return cls(**{k: _decode(v) for k, v in value.items() if k != "__t"})
        if "__tuple" in value:
            return tuple(_decode(v) for v in value["__tuple"])
        if "__map" in value:
            return {_decode(k): _decode(v) for k, v in value["__map"]}
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def encode_state(state: AIState) -> bytes:
    """Msgpack bytes of ``state`` (its app state must be JSON-like)."""
    return encode_later(state)()


def encode_later(state: AIState) -> Callable[[], bytes]:
    """``encode_state(state)`` in two parts: the app state now, the rest when the result is called.

    Everything Troupe keeps in a state is immutable, so the rest may be encoded later and on
    another thread (``orchestrator.run.off_loop``). The app state is whatever the app's reducer
    made, perhaps a dict it goes on changing in place: it becomes plain data here, on the caller's
    thread, as it is at the state's index.

    Raises:
        TypeError: the app state holds something ``_encode`` cannot make plain (so can the call).
    """
    app = _encode(state.app)

    def rest() -> bytes:
        body = {
            f.name: app if f.name == "app" else _encode(getattr(state, f.name))
            for f in dataclasses.fields(state)
            if f.name not in ("session", "starting")
        }
        body["session"] = state_to_wire(state.session)
        return pack(body)

    return rest


def decode_state(data: bytes) -> AIState | None:
    """The state in ``data``, or ``None`` when it does not decode (treat as missing)."""
    try:
        body = unpack(data)
        session = state_from_wire(body.pop("session"))  # our own bytes: the trusted reader
        fields = {k: _decode(v) for k, v in body.items()}
        return AIState(session=session, **fields)
    except Exception:  # any corruption means "no snapshot": the log is the truth
        return None
