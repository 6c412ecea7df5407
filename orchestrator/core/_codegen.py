"""Wire codecs generated once, at import, from a field table.

A value's wire dict is written and read by hand in one place only: its field table (attribute,
wire key, optional codec, when to leave it out). From the table, ``encoder`` and ``decoder``
generate straight-line functions (``exec`` of a few lines per class, once per process), so the
trusted decoder used for replay costs what hand-written code costs, without a loop over the
table per value and without a second hand-written copy that can drift from the first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Omit", "WireField", "decoder", "encoder"]

Omit = Literal["never", "none", "default"]
"""When a field is left out of the wire dict: never, when ``None``, or when it equals its default."""


@dataclass(frozen=True, slots=True)
class WireField:
    """One row of a field table."""

    attr: str
    """The attribute (snake_case)."""
    wire: str
    """The wire key (camelCase)."""
    required: bool = False
    """Whether the wire dict always holds it (a reader fails without it)."""
    default: Any = None
    """What a reader takes when the key is missing (or ``null``)."""
    omit: Omit = "none"
    """When the writer leaves it out (a required field is never left out)."""
    encode: Callable[[Any], Any] | None = None
    """Attribute value -> wire value, when they differ."""
    decode: Callable[[Any], Any] | None = None
    """Trusted wire value -> attribute value, when they differ."""


def _source_encoder(tag: str | None, fields: Sequence[WireField]) -> str:
    lines = ["def encode(value):", f"    out = {{'type': {tag!r}}}" if tag is not None else "    out = {}"]
    for i, f in enumerate(fields):
        value = f"e{i}(v)" if f.encode is not None else "v"
        lines.append(f"    v = value.{f.attr}")
        if f.required or f.omit == "never":
            lines.append(f"    out[{f.wire!r}] = {value}")
        elif f.omit == "none":
            lines.append(f"    if v is not None: out[{f.wire!r}] = {value}")
        else:
            lines.append(f"    if v is not None and v != d{i}: out[{f.wire!r}] = {value}")
    lines.append("    return out")
    return "\n".join(lines)


def _source_decoder(fields: Sequence[WireField]) -> str:
    args = []
    for i, f in enumerate(fields):
        if f.required:
            read = f"obj[{f.wire!r}]"
            args.append(f"{f.attr}=" + (f"c{i}({read})" if f.decode is not None else read))
        elif f.decode is not None:
            args.append(f"{f.attr}=(d{i} if (x{i} := get({f.wire!r})) is None else c{i}(x{i}))")
        else:
            args.append(f"{f.attr}=(d{i} if (x{i} := get({f.wire!r})) is None else x{i})")
    return "def decode(obj):\n    get = obj.get\n    return cls(" + ", ".join(args) + ")"


def _namespace(cls: type[Any], fields: Sequence[WireField]) -> dict[str, Any]:
    names: dict[str, Any] = {"cls": cls}
    for i, f in enumerate(fields):
        names[f"d{i}"] = f.default
        names[f"e{i}"] = f.encode
        names[f"c{i}"] = f.decode
    return names


def encoder(cls: type[Any], fields: Sequence[WireField], tag: str | None = None) -> Callable[[Any], dict[str, Any]]:
    """The writer of ``cls``: its wire dict (with ``"type": tag`` first, when a tag is given)."""
    names = _namespace(cls, fields)
    exec(_source_encoder(tag, fields), names)
    function: Callable[[Any], dict[str, Any]] = names["encode"]
    return function


def decoder(cls: type[Any], fields: Sequence[WireField]) -> Callable[[Mapping[str, Any]], Any]:
    """The trusted reader of ``cls``: no checks; a missing or ``null`` optional key takes its default."""
    names = _namespace(cls, fields)
    exec(_source_decoder(fields), names)
    function: Callable[[Mapping[str, Any]], Any] = names["decode"]
    return function
