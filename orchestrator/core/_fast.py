"""Construction without ``__init__`` for the reducer's hot path.

Frozen values pay for immutability on every construction: a frozen dataclass's ``__init__`` calls
``object.__setattr__`` per field. The reducer builds several values per stream part, so it skips
that in one of two ways; the values stay immutable to everyone else.

- ``slot_setter``: set one slot through its descriptor (about 40 ns a field on CPython 3.11).
- A *draft* class: a plain class with the same slots and no ``__setattr__``, so a value is filled
  in with ordinary attribute stores (a few ns each), then given its real, frozen class with
  ``draft.__class__ = cls`` (about 50 ns: CPython allows it between heap types with the same base
  and the same slots). From three fields on, that is the cheaper way (``orchestrator.core._hotpath``).
  ``check_draft`` proves at import that a draft and its class still match, so a field added to
  the class and not to its draft fails at once, not on the first stream part.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["check_draft", "slot_setter"]


def slot_setter(cls: type, name: str) -> Callable[[Any, Any], None]:
    """The raw setter of slot ``name`` of ``cls`` (bypasses a frozen ``__setattr__``)."""
    descriptor: Any = cls.__dict__[name]
    setter: Callable[[Any, Any], None] = descriptor.__set__
    return setter


def check_draft(draft: type, cls: type) -> None:
    """Raise ``TypeError`` unless an instance of ``draft`` can become a ``cls`` (see the module docstring)."""
    if set(getattr(draft, "__slots__", ())) != set(getattr(cls, "__slots__", ())) or draft.__bases__ != (object,):
        raise TypeError(f"{draft.__name__} must have exactly the slots of {cls.__name__} and no base class")
    probe: Any = object.__new__(draft)
    probe.__class__ = cls  # CPython checks the two layouts here, too
