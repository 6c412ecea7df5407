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
- ``fast_init``: the class's own ``__init__``, rewritten to fill each slot through its descriptor
  instead of ``object.__setattr__`` (about half the cost: 0.4 against 0.9 µs for a ``TextDelta``,
  0.7 against 1.4 for an ``Event``'s seven fields, on the 2-vCPU VMs). The runner builds an
  event, its stamped copy, its stored form and its fold record for every event it writes, and the
  model adapter a part for every chunk; in a host's profile these constructions were about 9 % of
  its CPU. The new ``__init__`` takes the same arguments (checked against the old one at import)
  and still calls ``__post_init__``.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["check_draft", "fast_init", "replacer", "slot_setter"]

T = TypeVar("T")


def slot_setter(cls: type, name: str) -> Callable[[Any, Any], None]:
    """The raw setter of slot ``name`` of ``cls`` or a base (bypasses a frozen ``__setattr__``).

    Raises:
        TypeError: ``name`` is not a slot of ``cls`` or of a base class.
    """
    for klass in cls.__mro__:
        descriptor = klass.__dict__.get(name)
        if descriptor is not None:
            if not isinstance(descriptor, types.MemberDescriptorType):
                raise TypeError(f"{cls.__name__}.{name} is not a slot")
            setter: Callable[[Any, Any], None] = descriptor.__set__
            return setter
    raise TypeError(f"{cls.__name__} has no slot {name!r}")


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


def fast_init(cls: type[T]) -> type[T]:
    """Give ``cls`` (a frozen dataclass with slots) a faster ``__init__`` of the same signature.

    Use it above ``@dataclass(frozen=True, slots=True)``. Each field is set through its slot's
    descriptor (see the module docstring); defaults, default factories, keyword-only fields and
    ``__post_init__`` behave as in the ``__init__`` the dataclass wrote.

    Raises:
        TypeError: ``cls`` is not such a class, or has ``InitVar`` pseudo-fields (the signatures
            would differ).
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} must be a dataclass with frozen=True and slots=True")
    namespace: dict[str, Any] = {"_fi_MISSING": _MISSING}
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = []
    klass: Any = cls
    for f in dataclasses.fields(klass):
        namespace[f"_fi_set_{f.name}"] = slot_setter(cls, f.name)
        has_default = f.default is not dataclasses.MISSING
        has_factory = f.default_factory is not dataclasses.MISSING
        if has_default:
            namespace[f"_fi_default_{f.name}"] = f.default
        if has_factory:
            namespace[f"_fi_factory_{f.name}"] = f.default_factory
        if f.init:
            default = "=_fi_MISSING" if has_factory else f"=_fi_default_{f.name}" if has_default else ""
            (keyword if f.kw_only else positional).append(f"{f.name}{default}")
            value = f"_fi_factory_{f.name}() if {f.name} is _fi_MISSING else {f.name}" if has_factory else f.name
        elif has_factory:
            value = f"_fi_factory_{f.name}()"
        elif has_default:
            value = f"_fi_default_{f.name}"
        else:
            continue  # init=False and no default: the dataclass leaves the slot empty too
        body.append(f"    _fi_set_{f.name}(self, {value})")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    signature = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    source = "\n".join([f"def __init__({signature}):", *(body or ["    pass"])])
    exec(source, namespace)  # our own code, written from the class's field names
    init: Callable[..., None] = namespace["__init__"]
    _check_same_signature(cls, klass.__init__, init)
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    klass.__init__ = init
    return cls


class _Factory:
    def __repr__(self) -> str:
        return "<factory>"


_MISSING: Any = _Factory()
"""The default of a field with a default factory (shown as the dataclass's own is: ``<factory>``)."""


def _check_same_signature(cls: type, old: Callable[..., None], new: Callable[..., None]) -> None:
    """Raise ``TypeError`` unless ``new`` takes what ``old`` took (names, kinds, plain defaults)."""

    def shape(function: Callable[..., None]) -> list[tuple[str, Any, bool]]:
        return [(p.name, p.kind, p.default is p.empty) for p in inspect.signature(function).parameters.values()]

    if shape(old) != shape(new):
        raise TypeError(f"fast_init cannot rewrite {cls.__name__}.__init__ (InitVar fields?): keep the dataclass's own")
