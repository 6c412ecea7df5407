"""Construction without ``__init__`` for the reducer's hot path.

Frozen dataclasses pay for immutability on every construction (``object.__setattr__`` per
field). The reducer builds several values per stream part, so it sets slots directly through
their descriptors instead; the values stay immutable to everyone else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["slot_setter"]


def slot_setter(cls: type, name: str) -> Callable[[Any, Any], None]:
    """The raw setter of slot ``name`` of ``cls`` (bypasses a frozen ``__setattr__``)."""
    descriptor: Any = cls.__dict__[name]
    setter: Callable[[Any, Any], None] = descriptor.__set__
    return setter
