"""Append-only text shared between immutable versions, so streaming a long text is linear.

A text part grows by one small delta per stream part. Building ``old + delta`` each time copies the
whole text, which is quadratic over a long reply. Instead every version of a growing text is a
length into a shared, append-only ``TextBuffer``: a ``Rope`` (a tool call's streaming arguments),
or a ``TextPart`` itself, which holds the buffer and the length in its own slots (one object
fewer per text delta on the reducer's hot path). The newest version appends in place
(amortised O(1)); appending to an older version (a branch) copies once and starts a new buffer.
Old versions never see later appends because they only read their own length.
"""

from __future__ import annotations

import threading

_LOCK = threading.Lock()
lock_acquire = _LOCK.acquire
"""Take the lock every buffer's appends and reads hold (bound once: cheaper than ``with``)."""
lock_release = _LOCK.release
"""Release it (``orchestrator.core._hotpath`` appends to a buffer itself, under this lock)."""

# Join pending chunks once there are this many and they add at least a quarter of the joined
# text: the copy cost stays linear overall and small chunks do not pile up in memory.
FLATTEN_CHUNKS = 128


class TextBuffer:
    """The shared, append-only text behind every version of one growing text."""

    __slots__ = ("_chunks", "_flat", "_flatten_at", "_size")

    def __init__(self, text: str) -> None:
        self._flat = text
        # The appends not yet joined into ``_flat``; ``None`` when there are none. A text is
        # read (flattened) once it is finished, and most buffers never grow (a user's input, a
        # part decoded from the wire): neither keeps an empty list (56 bytes) for its life.
        self._chunks: list[str] | None = None
        self._size = len(text)
        self._flatten_at = _flatten_size(len(text))

    def _flatten(self) -> None:
        chunks = self._chunks
        if chunks:
            self._flat = flat = self._flat + "".join(chunks)
            self._flatten_at = _flatten_size(len(flat))
        self._chunks = None

    def settle(self) -> None:
        """Join the pending appends now: the text is finished (one string holds less than many).

        A finished reply that was never read in this process (a host sends deltas, and reads
        a text only when a tool or the prompt needs it) would otherwise keep every delta as a
        string of its own, ~50 bytes of header each, for as long as the session stays active.
        """
        with _LOCK:
            if self._chunks:
                self._flatten()

    def read(self, size: int) -> str:
        with _LOCK:
            if self._chunks and size > len(self._flat):
                self._flatten()
            flat = self._flat
        return flat if size == len(flat) else flat[:size]

    def read_range(self, start: int, stop: int) -> str:
        """Characters ``start:stop``; reads only the pending chunks when they cover it."""
        with _LOCK:
            flat = self._flat
            if start >= len(flat) and self._chunks:
                pending = "".join(self._chunks)
                return pending[start - len(flat) : stop - len(flat)]
        if stop <= len(flat):
            return flat[start:stop]
        return self.read(stop)[start:]

    def grow(self, size: int, delta: str) -> TextBuffer:
        """The buffer that holds this buffer's first ``size`` characters followed by ``delta``.

        That is this buffer, appended to in place, when ``size`` is its end (the newest version
        grows: the streaming hot path); otherwise a new buffer (an older version branches).
        """
        lock_acquire()
        try:
            if size == self._size:
                self._size = end = size + len(delta)
                chunks = self._chunks
                if chunks is None:
                    self._chunks = [delta]
                else:
                    chunks.append(delta)
                    if end >= self._flatten_at and len(chunks) >= FLATTEN_CHUNKS:
                        self._flatten()
                return self
        finally:
            lock_release()
        return TextBuffer(self.read(size) + delta)


def _flatten_size(flat: int) -> int:
    """The size at which pending chunks add a quarter of a flat text of length ``flat``."""
    return flat + (flat + 3) // 4


class Rope:
    """An immutable string value with an amortised O(1) ``+ delta`` for the newest version."""

    __slots__ = ("_buf", "_size")

    def __init__(self, text: str = "") -> None:
        self._buf = TextBuffer(text)
        self._size = len(text)

    def __add__(self, delta: str) -> Rope:
        if not delta:
            return self
        rope: Rope = _new(Rope)
        rope._buf = self._buf.grow(self._size, delta)
        rope._size = self._size + len(delta)
        return rope

    def __str__(self) -> str:
        return self._buf.read(self._size)

    def settle(self) -> None:
        """Join the buffer's pending appends (``TextBuffer.settle``): the text is finished."""
        self._buf.settle()

    def tail(self, start: int) -> str:
        """The text from ``start`` on, without joining what comes before (for deltas)."""
        return self._buf.read_range(start, self._size)

    def __len__(self) -> int:
        return self._size

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Rope):
            return self._size == other._size and str(self) == str(other)
        if isinstance(other, str):
            return self._size == len(other) and str(self) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(str(self))

    def __repr__(self) -> str:
        return f"Rope({str(self)!r})"

    def __reduce__(self) -> tuple[type[Rope], tuple[str]]:
        return (Rope, (str(self),))


_new = object.__new__
