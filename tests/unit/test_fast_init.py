"""``fast_init``: the rewritten ``__init__`` of a frozen, slotted dataclass behaves as the dataclass's own."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import InitVar, dataclass, field
from typing import Any

import pytest

from orchestrator.core._fast import fast_init
from orchestrator.core.errors import UsageError
from orchestrator.core.events import AppendResult, Event
from orchestrator.core.payloads import Stream
from orchestrator.core.stream import TextDelta
from orchestrator.models.base import ModelRequest
from orchestrator.run.log import Applied
from orchestrator.store._validate import PreparedEvent


def _pair() -> tuple[Any, Any]:
    """The same class twice: once as the dataclass wrote it, once rewritten."""

    def make() -> type:
        @dataclass(frozen=True, slots=True)
        class Sample:
            name: str
            size: int = 3
            tags: list[str] = field(default_factory=list)
            note: str | None = field(default=None, kw_only=True)
            seen: list[str] = field(default_factory=list, init=False)
            checked: bool = field(default=False, init=False, compare=False)

            def __post_init__(self) -> None:
                if self.size < 0:
                    raise ValueError(f"size must be 0 or more, got {self.size}")
                object.__setattr__(self, "checked", True)

        return Sample

    return make(), fast_init(make())


def test_it_takes_the_same_arguments_and_builds_the_same_value() -> None:
    plain, fast = _pair()
    assert [(p.name, p.kind) for p in inspect.signature(fast.__init__).parameters.values()] == [
        (p.name, p.kind) for p in inspect.signature(plain.__init__).parameters.values()
    ]
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        (("a",), {}),
        (("a", 5, ["x"]), {"note": "n"}),
        ((), {"name": "b", "tags": ["y"]}),
    ]
    for args, kwargs in calls:
        a, b = plain(*args, **kwargs), fast(*args, **kwargs)
        assert repr(a) == repr(b)
        assert dataclasses.asdict(a) == dataclasses.asdict(b)
        assert b.checked is True  # __post_init__ ran


def test_each_value_gets_its_own_default_from_a_factory() -> None:
    _, fast = _pair()
    one, two = fast("a"), fast("b")
    assert one.tags == [] and one.tags is not two.tags
    assert one.seen == [] and one.seen is not two.seen  # init=False fields are filled in too


def test_bad_calls_fail_as_they_did() -> None:
    plain, fast = _pair()
    for cls in (plain, fast):
        with pytest.raises(TypeError, match="missing 1 required positional argument: 'name'"):
            cls()
        with pytest.raises(TypeError, match="positional argument"):
            cls("a", 1, [], "note-by-position")
        with pytest.raises(TypeError, match="unexpected keyword argument 'seen'"):
            cls("a", seen=[])
        with pytest.raises(ValueError, match="size must be 0 or more"):
            cls("a", -1)


def test_the_value_stays_frozen() -> None:
    _, fast = _pair()
    value = fast("a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.name = "b"


def test_a_subclass_is_filled_through_the_base_slots() -> None:
    @fast_init
    @dataclass(frozen=True, slots=True)
    class Base:
        a: int

    @fast_init
    @dataclass(frozen=True, slots=True)
    class Child(Base):
        b: int = 2

    assert Child(1) == Child(1, 2) and (Child(1).a, Child(1).b) == (1, 2)


def test_it_refuses_what_it_cannot_rewrite() -> None:
    @dataclass(slots=True)
    class Mutable:
        a: int

    @dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclass(frozen=True, slots=True)
    class WithInitVar:
        a: int
        scale: InitVar[int] = 1

        def __post_init__(self, scale: int) -> None:
            object.__setattr__(self, "a", self.a * scale)

    for cls in (Mutable, NoSlots):
        with pytest.raises(TypeError, match="frozen=True and slots=True"):
            fast_init(cls)
    with pytest.raises(TypeError, match="InitVar"):
        fast_init(WithInitVar)


def test_the_hot_classes_use_it_and_still_check_their_values() -> None:
    """An event, its stored form and its fold record, a stream part: built per event or per chunk."""
    for cls in (Event, TextDelta, Stream, Applied, PreparedEvent, AppendResult, ModelRequest):
        assert "_fi_MISSING" in getattr(cls.__init__, "__globals__", {}), cls
    event = Event("e-1", "ai.stream", data=Stream("step-1", parts=(TextDelta("hi"),)))
    assert event.payload == {"stepId": "step-1", "parts": [{"type": "text-delta", "delta": "hi"}]}  # __post_init__
    with pytest.raises(UsageError, match=r"has type 'ai\.turn\.started' but a 'ai\.stream' payload"):
        Event("e-2", "ai.turn.started", data=Stream("step-1"))
