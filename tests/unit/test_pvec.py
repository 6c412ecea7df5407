"""The persistent vector behaves like a tuple, in every version, across its tail and trie levels."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.core._pvec import PVec

_ops = st.lists(
    st.tuples(st.sampled_from(["append", "set", "set_last", "take", "branch"]), st.integers(0, 2_000)),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 1_100), _ops)
def test_every_version_reads_like_the_list_it_models(start: int, ops: list[tuple[str, int]]) -> None:
    """Start at any size (up to past two trie levels) and check each version after each step."""
    versions: list[tuple[PVec[int], list[int]]] = [(PVec(range(start)), list(range(start)))]
    for op, n in ops:
        vec, model = versions[n % len(versions)] if op == "branch" else versions[-1]
        if op in ("append", "branch"):
            vec, model = vec.append(-n), [*model, -n]
        elif op == "set" and model:
            i = n % len(model)
            vec, model = vec.set(i, -n), [*model[:i], -n, *model[i + 1 :]]
        elif op == "set_last" and model:
            vec, model = vec.set_last(-n), [*model[:-1], -n]
        elif op == "take":
            vec, model = vec.take(n % (len(model) + 1)), model[: n % (len(model) + 1)]
        versions.append((vec, model))
    for vec, model in versions:
        assert len(vec) == len(model)
        assert list(vec) == model
        assert list(reversed(vec)) == model[::-1]
        assert vec.last == (model[-1] if model else None)
        assert [vec.at(i) for i in range(len(model))] == model
        assert [vec[i - len(model)] for i in range(len(model))] == model
        assert list(vec[1:-1:2]) == model[1:-1:2]
        assert vec == model
        assert pickle.loads(pickle.dumps(vec)) == vec


def test_out_of_range_reads_and_writes_raise_index_error() -> None:
    for size in (0, 1, 31, 32, 33, 1_057):
        vec = PVec(range(size))
        for bad in (size, size + 1):
            with pytest.raises(IndexError):
                vec[bad]
            with pytest.raises(IndexError):
                vec.at(bad)
            with pytest.raises(IndexError):
                vec.set(bad, 0)
        with pytest.raises(IndexError):
            vec[-size - 1]
    with pytest.raises(IndexError):
        PVec[int]().set_last(0)


class _Item:
    __slots__ = ("id",)

    def __init__(self, n: int) -> None:
        self.id = f"m{n % 700}"  # some ids repeat: the last index wins, as with appends


@pytest.mark.parametrize("size", [*range(0, 70), 1_023, 1_024, 1_025, 1_056, 1_057, 32 * 32 * 32 + 1, 40_000])
def test_a_vector_made_at_once_is_the_one_appends_make(size: int) -> None:
    items = [_Item(n) for n in range(size)]
    appended: PVec[_Item] = PVec()
    for item in items:
        appended = appended.append(item)
    built = PVec(items)
    assert (built._size, built._shift, built._root, built._tail, built._last, built._ids) == (
        appended._size,
        appended._shift,
        appended._root,
        appended._tail,
        appended._last,
        appended._ids,
    )
    assert PVec(iter(items)) == built and list(built) == items
