"""The field kinds and table machinery that ``wire.py``'s field tables are built from.

A field kind checks (and converts) one wire value, raising a ``ParseError`` that names it; a field
table is a tuple of ``_Field`` rows, each a kind beside its trusted codec. ``_read_fields`` and
``_parse_tagged`` read a table with every check, ``_encoders`` and ``_decoders`` generate its
trusted codecs (``_codegen``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.core._codegen import Omit, WireField, decoder, encoder
from orchestrator.core._json import JsonObject, JsonValue, json_problem
from orchestrator.core.errors import ParseError
from orchestrator.core.state import ERROR_CODES

# -- field kinds: each checks (and converts) one wire value -------------------------------------

Check = Callable[[Any, str], Any]


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ParseError(f"{where} must be a string, got {_kind(value)}", where)
    return value


def _nonempty(value: Any, where: str) -> str:
    if not _str(value, where):
        raise ParseError(f"{where} must be a non-empty string", where)
    return str(value)


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParseError(f"{where} must be an integer, got {_kind(value)}", where)
    return value


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ParseError(f"{where} must be true or false, got {_kind(value)}", where)
    return value


def _json(value: Any, where: str) -> JsonValue:
    problem = json_problem(value, where)
    if problem is not None:
        raise ParseError(f"{where} must be JSON: {problem.message}", problem.path)
    result: JsonValue = value
    return result


def _object(value: Any, where: str) -> JsonObject:
    if not isinstance(value, Mapping):
        raise ParseError(f"{where} must be an object, got {_kind(value)}", where)
    return dict(_json(dict(value), where))  # type: ignore[arg-type]


def _one_of(*choices: str) -> Check:
    def check(value: Any, where: str) -> str:
        if value not in choices:
            raise ParseError(f"{where} must be one of {', '.join(map(repr, choices))}; got {value!r}", where)
        return str(value)

    return check


def _error_code(value: Any, where: str) -> str:
    if value not in ERROR_CODES:
        raise ParseError(f"{where} must be one of {', '.join(sorted(ERROR_CODES))} (or left out); got {value!r}", where)
    return str(value)


def _within(value: Any, where: str) -> str | tuple[str, ...]:
    if isinstance(value, str):
        return _nonempty(value, where)
    if isinstance(value, Sequence) and value and all(isinstance(v, str) and v for v in value):
        return tuple(value)
    raise ParseError(f"{where} must be a call id or a non-empty list of call ids, got {_kind(value)}", where)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
    }.get(type(value), type(value).__name__)


def _list(value: Any, where: str, item: Callable[[Any, str], Any]) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise ParseError(f"{where} must be a list, got {_kind(value)}", where)
    return [item(v, f"{where}[{i}].") for i, v in enumerate(value)]


# -- field tables ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Field:
    """One row of a field table: the check (validating reader) beside the trusted codec's row."""

    row: WireField
    check: Check


Codec = Callable[[Any], Any] | None
"""A field's conversion between its attribute value and its wire value (``None``: the same)."""


def _req(wire: str, attr: str, check: Check, *, encode: Codec = None, decode: Codec = None) -> _Field:
    return _Field(WireField(attr, wire, True, None, "default", encode, decode), check)


def _opt(
    wire: str,
    attr: str,
    check: Check,
    default: Any = None,
    *,
    omit: Omit = "default",
    encode: Codec = None,
    decode: Codec = None,
) -> _Field:
    return _Field(WireField(attr, wire, False, default, omit, encode, decode), check)


_Table = tuple[type, tuple[_Field, ...]]


def _read_fields(obj: Mapping[str, Any], fields: tuple[_Field, ...], what: str, prefix: str) -> dict[str, Any]:
    known = {f.row.wire for f in fields} | {"type"}
    for key in obj:
        if key not in known:
            names = ", ".join(sorted(known - {"type"})) or "none"
            raise ParseError(
                f"{prefix}{key} is not a field of {what} (its fields: {names}); remove it or fix its spelling",
                f"{prefix}{key}",
            )
    kwargs: dict[str, Any] = {}
    for f in fields:
        row = f.row
        if row.wire in obj and obj[row.wire] is not None:
            kwargs[row.attr] = f.check(obj[row.wire], f"{prefix}{row.wire}")
        elif row.required:
            raise ParseError(f"{prefix}{row.wire} is required in {what}", f"{prefix}{row.wire}")
        else:  # missing or null: the table's default, as the trusted reader takes it
            kwargs[row.attr] = row.default
    return kwargs


def _tagged(obj: Any, what: str, prefix: str, tags: Mapping[str, Any]) -> str:
    if not isinstance(obj, Mapping):
        raise ParseError(f"{prefix or 'the value'} must be an object (a {what}), got {_kind(obj)}", prefix.rstrip("."))
    tag = obj.get("type")
    if tag not in tags:
        raise ParseError(
            f"{prefix}type must name a {what}: one of {', '.join(sorted(tags))}; got {tag!r}", f"{prefix}type"
        )
    return str(tag)


def _encoders(tables: Mapping[str, _Table]) -> dict[type, Callable[[Any], dict[str, Any]]]:
    return {cls: encoder(cls, [f.row for f in fields], tag) for tag, (cls, fields) in tables.items()}


def _decoders(tables: Mapping[str, _Table]) -> dict[str, Callable[[Mapping[str, Any]], Any]]:
    return {tag: decoder(cls, [f.row for f in fields]) for tag, (cls, fields) in tables.items()}


def _parse_tagged(tables: Mapping[str, _Table], what: str, obj: Any, prefix: str) -> Any:
    tag = _tagged(obj, what, prefix, tables)
    cls, fields = tables[tag]
    return cls(**_read_fields(obj, fields, f"a {tag!r} part", prefix))
