"""A text part's buffer keeps no list of pending appends when it has none (most never grow)."""

from __future__ import annotations

from orchestrator.core.parts import TextPart
from tests.unit.sizes import bytes_each


def test_a_text_that_never_grows_is_the_part_its_buffer_and_the_string() -> None:
    text = "x" * 40
    assert bytes_each(lambda: TextPart("m:0", text)) < 140  # with an empty list of appends: 176


def test_a_text_read_after_it_grew_keeps_no_list_of_appends() -> None:
    parts = [TextPart("m:0", "a")]
    for i in range(300):
        parts.append(parts[-1].extended(f"{i:03d}"))
    last = parts[-1]
    assert last.text == "a" + "".join(f"{i:03d}" for i in range(300))
    assert parts[100].text == last.text[:301]  # an older version reads its own length
    assert last.text_from(1) == last.text[1:]
    assert last._buf._chunks is None  # joined into one string once read, and the list let go
    assert bytes_each(lambda: last.extended("").text) < 16  # reading again copies nothing (8: the list slot)
