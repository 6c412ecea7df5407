"""Payloads to and from the wire: the fast codec generated from the field tables, and the validating reader.

``payload_to_wire`` and ``payload_from_wire`` run whenever an event is made from the other shape,
so they are generated once per class (``orchestrator.core._codegen``) from a field table read
off the class's dataclass fields at import. ``parse_payload`` is for a payload from outside: it
goes through ``PAYLOAD_ADAPTER``, slower, but it names the bad field.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Final, cast

from pydantic import BeforeValidator, ConfigDict, Discriminator, Tag, TypeAdapter, ValidationError
from pydantic.alias_generators import to_camel

from orchestrator.core._codegen import WireField, decoder, encoder
from orchestrator.core._json import JsonObject
from orchestrator.core.errors import ParseError
from orchestrator.core.payloads.commands import InputMove, InputSendNow, TurnStop
from orchestrator.core.payloads.lifecycle import ToolFinished
from orchestrator.core.payloads.schema import PAYLOAD_CLASSES, AIPayload
from orchestrator.core.wire import action_from_wire, action_to_wire, part_from_wire, part_to_wire

__all__ = ["PAYLOAD_ADAPTER", "parse_payload", "payload_from_wire", "payload_to_wire"]


def _strip_type(value: Any) -> Any:
    if isinstance(value, Mapping) and "type" in value:
        return {k: v for k, v in value.items() if k != "type"}
    return value


_STRIP: Final = BeforeValidator(_strip_type)
"""Drop the ``type`` tag before a payload class reads the dict (the tag is the event's, not a field)."""


def _tag(value: Any) -> str | None:
    return value.get("type") if isinstance(value, Mapping) else getattr(value, "type", None)


_TAGGED: Final[Any] = functools.reduce(
    operator.or_, (Annotated[cls, _STRIP, Tag(cls.type)] for cls in PAYLOAD_CLASSES.values())
)
"""Every payload class, tagged with its event type: the union the adapter discriminates on, made
from ``PAYLOAD_CLASSES`` so that no class can be left out of it."""

PAYLOAD_ADAPTER: Final[TypeAdapter[AIPayload]] = TypeAdapter(
    Annotated[_TAGGED, Discriminator(_tag)],
    config=ConfigDict(defer_build=True),
)
"""The one validating reader of built-in payloads: ``{"type": <event type>, **payload}`` in.

Its schema is built on first use (``defer_build``), not at import: only a payload from outside
is validated, and building it took ~250 ms of every host process's start, which a restarted
host (crash recovery) pays before it can re-activate anything."""


# -- the field table ---------------------------------------------------------------------------

_CODECS: Final[dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]]] = {
    "parts": (lambda v: [part_to_wire(p) for p in v], lambda v: tuple(part_from_wire(p) for p in v)),
    "actions": (lambda v: [action_to_wire(a) for a in v], lambda v: tuple(action_from_wire(a) for a in v)),
    "tool_calls": (
        lambda v: [{"id": i, "name": n} for i, n in v],
        lambda v: tuple((str(c["id"]), str(c["name"])) for c in v),
    ),
    "input_ids": (list, tuple),
}
"""Fields whose wire value is not the attribute itself (by attribute name, in every class)."""

_KEEP_NULL: Final = frozenset(
    {(InputMove, "before_id"), (InputSendNow, "turn_id"), (TurnStop, "turn_id"), (ToolFinished, "output")}
)
"""Optional fields that today's logs write as ``null`` rather than leave out (kept so)."""


def _table(cls: type[Any]) -> tuple[WireField, ...]:
    out = []
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING
        codec = _CODECS.get(f.name)
        out.append(
            WireField(
                f.name,
                to_camel(f.name),
                required=required,
                default=None if required else f.default,
                omit="never" if (cls, f.name) in _KEEP_NULL or f.default is not None else "none",
                encode=None if codec is None else codec[0],
                decode=None if codec is None else codec[1],
            )
        )
    return tuple(out)


_TABLES: Final = {cls: _table(cls) for cls in PAYLOAD_CLASSES.values()}
"""The field table of every payload class."""
_ENCODE: Final = {cls: encoder(cls, table) for cls, table in _TABLES.items()}
_DECODE: Final = {cls.type: decoder(cls, table) for cls, table in _TABLES.items()}


def payload_to_wire(payload: AIPayload) -> JsonObject:
    """The wire dict (camelCase) of a typed payload: the shape every stored log holds."""
    return _ENCODE[type(payload)](payload)


def payload_from_wire(kind: str, obj: Mapping[str, Any]) -> AIPayload:
    """The typed payload of a trusted wire dict (our own store, our own engine): no checks.

    A field an older log leaves out takes its default. Raises ``KeyError`` for an unknown type
    or a missing required field (a bug in the writer, not a caller's mistake).
    """
    return cast(AIPayload, _DECODE[kind](obj))


def parse_payload(kind: str, obj: object) -> AIPayload:
    """The typed payload of an untrusted wire dict, every field checked.

    Raises:
        ParseError: naming the event type and the bad field.
    """
    if kind not in PAYLOAD_CLASSES:
        raise ParseError(f"{kind!r} is not a built-in event type", "type")
    if not isinstance(obj, Mapping):
        raise ParseError(f"the payload of {kind} must be an object, got {type(obj).__name__}", "payload")
    try:
        return PAYLOAD_ADAPTER.validate_python({**obj, "type": kind})
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"][1:]) or "payload"
        raise ParseError(f"{kind} payload: {where}: {first['msg']}", f"payload.{where}") from None
    except ParseError as error:  # from the part and action readers, which name the field themselves
        raise ParseError(f"{kind} payload: {error.message}", f"payload.{error.field}") from None
