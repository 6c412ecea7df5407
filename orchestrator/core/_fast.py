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
- ``replacer``: ``dataclasses.replace`` for one frozen, slotted class, without its checks: a draft
  of the class is filled in by a function written for its fields (about 1.3 µs for the 17 fields
  of ``AIState`` on the 2-vCPU VMs, where a loop of slot setters took 2.3-3.4 and ``replace``
  7.6). The fold copies a state or a record for almost every event.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["check_draft", "replacer", "slot_setter"]

T = TypeVar("T")


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


def replacer(cls: type[T]) -> Callable[..., T]:
    """``dataclasses.replace`` for ``cls`` (a frozen dataclass with slots and no ``__post_init__``).

    ``replacer(cls)(value, name=new, ...)`` is a copy of ``value`` with those fields changed; a
    name that is not a field raises ``TypeError``, as ``replace`` does. The copy is built as a
    draft (a plain class with the same slots) and then given ``cls`` (see the module docstring).
    """
    fields = [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else None
    if fields is None or set(fields) != set(getattr(cls, "__slots__", ())):
        raise TypeError(f"{cls.__name__} must be a dataclass whose slots are its fields")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} checks its values in __post_init__: use dataclasses.replace")
    draft = type(f"_{cls.__name__}Draft", (), {"__slots__": tuple(fields)})
    check_draft(draft, cls)
    params = ", ".join(f"{name}=_KEEP" for name in fields)
    lines = [f"def replace(value, *, {params}):", "    new = _draft()"]
    lines += [f"    new.{name} = value.{name} if {name} is _KEEP else {name}" for name in fields]
    lines += ["    new.__class__ = _cls", "    return new"]
    namespace: dict[str, Any] = {"_KEEP": object(), "_draft": draft, "_cls": cls}
    exec("\n".join(lines), namespace)  # our own code, written from the class's field names
    function: Callable[..., T] = namespace["replace"]
    function.__qualname__ = f"replacer({cls.__name__})"
    return function
