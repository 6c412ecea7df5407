"""How payloads are stored: msgpack, deflated when that pays, compared by decoded value.

Every backend keeps a payload as the msgpack bytes of its JSON value (``orchestrator.core.wire.pack``).
The SQLite backend additionally deflates large blobs: a stored blob that begins with the byte
``0xC1`` is raw deflate of the msgpack bytes. ``0xC1`` is the one byte msgpack never uses, so
the two forms cannot be confused and no column is spent on a flag. Stream events repeat
``{"type": "text-delta", "delta": ...}`` hundreds of times, which deflate turns into a few bytes
per part (measured: 33 bytes of file per text-delta raw, 3-5 deflated; a 3-turn session
21 KB raw, 11 KB deflated). The log is mostly stream events, so this is where storage goes.

A backend stores ``Event.payload``, the wire dict, and reads it back with ``decode``; the
``Event`` it builds from that dict decodes a built-in event's typed payload (``Event.data``)
once, with the trusted fast decoder (``orchestrator.core.payloads.payload_from_wire``): the
store holds only what the server wrote. A log from a source that is not trusted is read with
``payload_from_wire``'s checking twin, ``parse_payload``.
"""

from __future__ import annotations

import zlib
from typing import Final, cast

from orchestrator.core._json import JsonObject, JsonValue
from orchestrator.core.wire import unpack

__all__ = ["compress", "decode", "decompress", "json_equal", "same_payload"]

_DEFLATED: Final = 0xC1
"""The first byte of a deflated blob (never the first byte of a msgpack value)."""
_MIN_COMPRESS: Final = 160
"""Blobs shorter than this stay raw: deflate's fixed cost outweighs the gain on small events."""
_LEVEL: Final = 6
"""zlib level. Measured on 256-part stream events: level 6 is ~8 % smaller than level 1 at the
same throughput; level 9 gains ~3 % more for ~15 % less throughput."""


def compress(blob: bytes) -> bytes:
    """The stored form of a msgpack blob: deflated when that makes it smaller."""
    if len(blob) < _MIN_COMPRESS:
        return blob
    packer = zlib.compressobj(_LEVEL, zlib.DEFLATED, -15)  # raw deflate: no zlib header/trailer
    deflated = packer.compress(blob) + packer.flush()
    if len(deflated) + 1 >= len(blob):
        return blob
    return bytes((_DEFLATED,)) + deflated


def decompress(stored: bytes) -> bytes:
    """The msgpack bytes of a stored blob (raw or deflated)."""
    if stored[:1] == b"\xc1":
        return zlib.decompress(stored[1:], -15)
    return stored


def decode(stored: bytes) -> JsonObject:
    """The JSON object a stored blob holds."""
    return cast(JsonObject, unpack(decompress(stored)))


def same_payload(stored: bytes, packed: bytes) -> bool:
    """Whether a stored blob and a freshly packed payload hold the same JSON value.

    Equal bytes settle it cheaply; otherwise the values are compared decoded, so that the same
    object built with its keys in another order is still the same payload.
    """
    raw = decompress(stored)
    return raw == packed or json_equal(unpack(raw), unpack(packed))


def json_equal(a: JsonValue, b: JsonValue) -> bool:
    """Strict JSON equality of two decoded values.

    Python's ``==`` says ``True == 1 == 1.0``; as JSON those are three different values, and a
    re-append that changed one into another is new content, not a replay.
    """
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return a.keys() == b.keys() and all(json_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        assert isinstance(b, list)
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b
