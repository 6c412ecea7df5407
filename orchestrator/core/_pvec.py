"""A persistent vector: the message list of a session, shared structurally between versions.

Every stream part produces a new session state, and a session may hold 10,000 messages. A tuple
would copy all of them on every text-delta; this vector (a 32-way trie with a separate tail, the
Clojure design) copies only the path it touches: appending or updating near the end copies one
small tuple, anywhere else at most ``log32(n)`` of them, and replacing the last item (what
streaming does, once per stream part) copies none, since the last item is kept apart from the
tail. Old versions stay valid and unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")

_BITS = 5
_WIDTH = 1 << _BITS
_MASK = _WIDTH - 1

_Node = tuple[Any, ...]


def _new_path(level: int, node: _Node) -> _Node:
    while level > 0:
        node = (node,)
        level -= _BITS
    return node


class PVec(Sequence[T], Generic[T]):
    """An immutable sequence with cheap ``append`` and ``set`` that return new vectors."""

    # The tail leaf is kept as ``_tail`` (all but its last item) and ``_last``: replacing the last
    # item, which streaming does once per stream part, then copies no tuple at all.
    __slots__ = ("_ids", "_last", "_root", "_shift", "_size", "_tail")

    _ids: dict[Any, int]
    _last: Any
    _root: _Node
    _shift: int
    _size: int
    _tail: _Node

    def __new__(cls, items: Iterable[T] = ()) -> PVec[T]:
        return _build(items if type(items) is list else list(items))

    # -- reading -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._size

    def _tail_offset(self) -> int:
        size = self._size
        return 0 if size < _WIDTH else ((size - 1) >> _BITS) << _BITS

    def _tail_leaf(self) -> _Node:
        """The whole tail leaf, last item included (empty for an empty vector)."""
        return (*self._tail, self._last) if self._size else ()

    def _trie_leaf(self, i: int) -> _Node:
        node = self._root
        level = self._shift
        while level > 0:
            node = node[(i >> level) & _MASK]
            level -= _BITS
        return node

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> PVec[T]: ...

    def __getitem__(self, index: int | slice) -> T | PVec[T]:
        if isinstance(index, slice):
            return PVec(self._iter_range(*index.indices(self._size)))
        size = self._size
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError("PVec index out of range")
        return self.at(index)

    def at(self, index: int) -> T:
        """The item at a non-negative ``index`` (no slices, no negatives: the fast path)."""
        size = self._size
        offset = 0 if size < _WIDTH else ((size - 1) >> _BITS) << _BITS
        if index >= offset:
            tail = self._tail
            j = index - offset
            if j < len(tail):
                item: T = tail[j]
                return item
            if index == size - 1:
                last: T = self._last
                return last
            raise IndexError("PVec index out of range")
        if index < 0:
            raise IndexError("PVec.at takes a non-negative index")
        return self._trie_leaf(index)[index & _MASK]  # type: ignore[no-any-return]

    def _iter_range(self, start: int, stop: int, step: int) -> Iterator[T]:
        at = self.at
        for i in range(start, stop, step):
            yield at(i)

    def __iter__(self) -> Iterator[T]:
        # Leaf by leaf, chained in C: a generator resumed once per item cost ~0.2 µs an item, and
        # a model step lists the whole conversation (``prompt_messages``) once per request.
        leaves = map(self._trie_leaf, range(0, self._tail_offset(), _WIDTH))
        return chain(chain.from_iterable(leaves), self._tail, (self._last,) if self._size else ())

    def __reversed__(self) -> Iterator[T]:
        at = self.at
        for i in range(self._size - 1, -1, -1):
            yield at(i)

    @property
    def last(self) -> T | None:
        """The last item, or ``None`` when empty (the hot path: the newest message)."""
        last: T | None = self._last
        return last

    def index_of_id(self, key: Any) -> int | None:
        """The index of the item whose ``id`` is ``key`` (``None`` if there is none).

        Meant for unique ids (a session's message ids are); with duplicates, it finds one of them.

        Constant time: the versions of one vector share an id -> index map, filled as items are
        added. An entry can be stale (another version put something else there, or replaced the
        item), so a hit is checked; only a failed check falls back to a scan.
        """
        index = self._ids.get(key)
        if index is None:
            return None
        if index < self._size and getattr(self.at(index), "id", None) == key:
            return index
        for i in range(self._size - 1, -1, -1):
            if getattr(self.at(i), "id", None) == key:
                return i
        return None

    # -- writing (each returns a new vector) --------------------------------------------------

    def append(self, item: T) -> PVec[T]:
        """A new vector with ``item`` at the end."""
        size = self._size
        ids = self._ids if size else {}  # a new vector (from empty) starts a map of its own
        ids[getattr(item, "id", None)] = size
        if not size:
            return _make(1, self._shift, self._root, (), item, ids)
        if size - self._tail_offset() < _WIDTH:
            return _make(size + 1, self._shift, self._root, (*self._tail, self._last), item, ids)
        full = (*self._tail, self._last)
        shift = self._shift
        if (size >> _BITS) > (1 << shift):
            root = (self._root, _new_path(shift, full))
            shift += _BITS
        else:
            root = self._push_tail(shift, self._root, full)
        return _make(size + 1, shift, root, (), item, ids)

    def _push_tail(self, level: int, parent: _Node, tail: _Node) -> _Node:
        sub = ((self._size - 1) >> level) & _MASK
        if level == _BITS:
            insert = tail
        elif sub < len(parent):
            insert = self._push_tail(level - _BITS, parent[sub], tail)
        else:
            insert = _new_path(level - _BITS, tail)
        return (*parent[:sub], insert, *parent[sub + 1 :])

    def set(self, index: int, item: T) -> PVec[T]:
        """A new vector with ``item`` at ``index`` (negative indexes count from the end)."""
        size = self._size
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError("PVec index out of range")
        ids = self._ids
        ids[getattr(item, "id", None)] = index
        if index == size - 1:
            return _make(size, self._shift, self._root, self._tail, item, ids)
        offset = self._tail_offset()
        if index >= offset:
            tail = self._tail
            j = index - offset
            return _make(size, self._shift, self._root, (*tail[:j], item, *tail[j + 1 :]), self._last, ids)
        root = _assoc(self._shift, self._root, index, item)
        return _make(size, self._shift, root, self._tail, self._last, ids)

    def set_last(self, item: T) -> PVec[T]:
        """A new vector whose last item is ``item`` (the streaming hot path: no copying)."""
        size = self._size
        if not size:
            raise IndexError("set_last on an empty PVec")
        ids = self._ids
        key = getattr(item, "id", None)
        if key is not getattr(self._last, "id", None):  # the streaming path keeps the same id object
            ids[key] = size - 1
        return _make(size, self._shift, self._root, self._tail, item, ids)

    def take(self, n: int) -> PVec[T]:
        """The first ``n`` items (``self`` when that is all of them)."""
        if n >= self._size:
            return self
        return PVec(self._iter_range(0, max(n, 0), 1))

    # -- values ------------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if isinstance(other, PVec):
            return self._size == other._size and all(a == b for a, b in zip(self, other, strict=True))
        if isinstance(other, list | tuple):
            return self._size == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PVec({list(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (PVec, (list(self),))


def _assoc(level: int, node: _Node, index: int, item: object) -> _Node:
    if level == 0:
        j = index & _MASK
        return (*node[:j], item, *node[j + 1 :])
    sub = (index >> level) & _MASK
    return (*node[:sub], _assoc(level - _BITS, node[sub], index, item), *node[sub + 1 :])


_new = object.__new__


def _make(size: int, shift: int, root: _Node, tail: _Node, last: Any, ids: dict[Any, int]) -> PVec[Any]:
    # PVec has no ``__setattr__`` of its own (it is immutable by its API), so plain stores work
    # and are the cheapest construction there is (a specialised slot store each).
    vec: PVec[Any] = _new(PVec)
    vec._size = size
    vec._shift = shift
    vec._root = root
    vec._tail = tail
    vec._last = last
    vec._ids = ids
    return vec


def _build(items: list[Any]) -> PVec[Any]:
    """The vector ``append`` would make of ``items`` one by one, made at once.

    Leaves of ``_WIDTH`` items, grouped ``_WIDTH`` to a node until one node is the root; the
    last partial leaf is the tail. A session's log or snapshot opens with thousands of messages,
    and appending them one at a time copied the tail for every item.
    """
    size = len(items)
    if not size:
        return _EMPTY  # type: ignore[return-value]
    offset = 0 if size < _WIDTH else ((size - 1) >> _BITS) << _BITS
    nodes: list[Any] = [tuple(items[i : i + _WIDTH]) for i in range(0, offset, _WIDTH)]
    shift = _BITS
    while len(nodes) > _WIDTH:
        nodes = [tuple(nodes[i : i + _WIDTH]) for i in range(0, len(nodes), _WIDTH)]
        shift += _BITS
    ids = {getattr(item, "id", None): i for i, item in enumerate(items)}
    return _make(size, shift, tuple(nodes), tuple(items[offset : size - 1]), items[size - 1], ids)


_EMPTY: PVec[Any] | None = None
_EMPTY = _make(0, _BITS, (), (), None, {})
