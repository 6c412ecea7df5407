"""The store's id checks: the quick test that the write path (and ``check_id``) starts with."""

from __future__ import annotations

import pytest

from orchestrator.core.errors import UsageError
from orchestrator.store._validate import MAX_ID_LENGTH, check_id, plain_id

REFUSED = [
    ("", "is empty"),
    ("a\x00b", "NUL character"),
    ("\ud800", "lone surrogate"),
    ("x" * (MAX_ID_LENGTH + 1), f"limit {MAX_ID_LENGTH}"),
    (7, "must be a string"),
]


@pytest.mark.parametrize(("value", "phrase"), REFUSED)
def test_what_check_id_refuses_is_never_plain(value: object, phrase: str) -> None:
    assert not plain_id(value)
    with pytest.raises(UsageError, match=phrase):
        check_id(value, "event id")


@pytest.mark.parametrize("value", ["troupe:s#1", "a", "x" * MAX_ID_LENGTH])
def test_a_short_ascii_id_is_plain(value: str) -> None:
    assert plain_id(value) and check_id(value, "event id") == value


@pytest.mark.parametrize("value", ["café", "s-✓"])
def test_a_non_ascii_id_is_not_plain_but_is_accepted(value: str) -> None:
    assert not plain_id(value) and check_id(value, "event id") == value


def test_a_str_subclass_takes_the_full_check_and_passes() -> None:
    class Name(str):
        pass

    assert not plain_id(Name("s-1"))
    assert check_id(Name("s-1"), "session id") == "s-1"
