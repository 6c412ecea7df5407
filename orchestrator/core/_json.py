"""JSON value types, and a best-effort parse of a JSON text that is still arriving."""

from __future__ import annotations

import json
from typing import TypeAlias, cast

from pydantic import JsonValue

__all__ = ["JsonObject", "JsonValue", "partial_json"]

JsonObject: TypeAlias = dict[str, JsonValue]

_CLOSERS = {"{": "}", "[": "]"}


def partial_json(text: str) -> JsonValue:
    """Parse the longest sensible prefix of an incomplete JSON text.

    Tool arguments stream as JSON text a few characters at a time; a UI wants to show the draft
    (``{"command": "ls -l`` shows as ``{"command": "ls -l"}``). This closes an open string, drops
    a dangling key, a trailing comma or a partial literal, and closes open arrays and objects.
    It is a display draft, never validated input. Returns ``None`` when nothing parses.
    """
    text = text.lstrip()
    if not text.strip():
        return None
    try:
        value: JsonValue = json.loads(text)
        return value
    except ValueError:
        pass
    stack: list[str] = []
    in_string = False
    escaped = False
    # Positions where cutting the text leaves something that can be completed by closers.
    last_safe = 0
    safe_stack: list[str] = []
    safe_in_string = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
                last_safe, safe_stack, safe_in_string = i + 1, list(stack), False
            else:
                last_safe, safe_stack, safe_in_string = i + 1, list(stack), True
            continue
        if ch == '"':
            in_string = True
            last_safe, safe_stack, safe_in_string = i + 1, list(stack), True
        elif ch in _CLOSERS:
            stack.append(_CLOSERS[ch])
            last_safe, safe_stack, safe_in_string = i + 1, list(stack), False
        elif ch in "}]":
            if stack:
                stack.pop()
            last_safe, safe_stack, safe_in_string = i + 1, list(stack), False
        elif ch not in " \t\r\n,:":
            last_safe, safe_stack, safe_in_string = i + 1, list(stack), False
    for cut, closers, open_string in ((last_safe, safe_stack, safe_in_string), (len(text), stack, in_string)):
        candidate = _complete(text[:cut], closers, open_string)
        if candidate is not _FAIL:
            return cast(JsonValue, candidate)
    return None


_FAIL = object()


def _complete(prefix: str, closers: list[str], open_string: bool) -> JsonValue | object:
    body = prefix
    if open_string:
        if body.endswith("\\"):
            body = body[:-1]
        body += '"'
    # Try progressively shorter bodies: a dangling key (`{"a"`), a partial literal (`tru`),
    # or a trailing separator all fail to parse and are trimmed back to the last value.
    for _ in range(64):
        attempt = body.rstrip().rstrip(",")
        try:
            value: JsonValue = json.loads(attempt + "".join(reversed(closers)))
            return value
        except ValueError:
            pass
        trimmed = _trim_last_token(attempt)
        if trimmed is None:
            return _FAIL
        body, closers = trimmed, _recount(trimmed)
    return _FAIL


def _trim_last_token(text: str) -> str | None:
    """Drop the last token (a key, a literal, a `key:` pair start) of a JSON prefix."""
    text = text.rstrip()
    if not text or text[-1] in "{[":
        return None
    if text.endswith(":"):
        text = text[:-1].rstrip()
    if text.endswith('"'):
        # Cut back to the opening quote of this string.
        i = len(text) - 2
        while i >= 0:
            if text[i] == '"' and (i == 0 or text[i - 1] != "\\"):
                break
            i -= 1
        return text[:i] if i >= 0 else None
    i = len(text) - 1
    while i >= 0 and text[i] not in ",:{[":
        i -= 1
    if i < 0:
        return None
    return text[: i + 1] if text[i] in "{[" else text[:i]


def _recount(text: str) -> list[str]:
    stack: list[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in _CLOSERS:
            stack.append(_CLOSERS[ch])
        elif ch in "}]" and stack:
            stack.pop()
    return stack
