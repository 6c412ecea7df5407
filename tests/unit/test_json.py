"""The one JSON-value check (``json_problem``) and the draft parse of streaming arguments (``partial_json``)."""

from __future__ import annotations

import datetime
import json

import pytest

from orchestrator.core._json import MAX_INT, MAX_JSON_DEPTH, MIN_INT, JsonProblem, json_problem, partial_json

# -- json_problem ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -1,
        MAX_INT,
        MIN_INT,
        1.5,
        -0.0,
        1e308,
        "",
        "text with \u00e9 and \U0001f600",
        [],
        {},
        [1, "a", None, [True, {"k": 2.5}]],
        {"a": {"b": [{"c": None}]}, "": "empty key is a key"},
        (1, (2, 3)),  # a tuple is an array to msgpack and json (it reads back as a list)
    ],
)
def test_json_values_pass(value: object) -> None:
    assert json_problem(value) is None


@pytest.mark.parametrize(
    ("value", "path", "fault", "message"),
    [
        (
            {"items": [{}, {}, {}, {"price": float("nan")}]},
            "payload.items[3].price",
            "number",
            "payload.items[3].price is nan, which JSON cannot represent",
        ),
        ({"x": float("inf")}, "payload.x", "number", "payload.x is inf, which JSON cannot represent"),
        ({"x": [float("-inf")]}, "payload.x[0]", "number", "payload.x[0] is -inf, which JSON cannot represent"),
        ({"n": 2**64}, "payload.n", "integer", f"payload.n is the integer {2**64}, outside the 64-bit range"),
        ({"n": MIN_INT - 1}, "payload.n", "integer", f"payload.n is the integer {MIN_INT - 1}, outside the 64-bit"),
        ({"x": {1: "one"}}, "payload.x", "key", "payload.x has the non-string key 1; JSON object keys are strings"),
        ({"x": {None: 1}}, "payload.x", "key", "payload.x has the non-string key None"),
        ({"b": [b"x"]}, "payload.b[0]", "type", "payload.b[0] is a bytes, which is not JSON"),
        ({"t": {1, 2}}, "payload.t", "type", "payload.t is a set, which is not JSON"),
        ({"d": datetime.date(2024, 1, 1)}, "payload.d", "type", "payload.d is a date, which is not JSON"),
        ({"o": object()}, "payload.o", "type", "payload.o is a object, which is not JSON"),
        ({"x": ("ok", bytearray(b"no"))}, "payload.x[1]", "type", "payload.x[1] is a bytearray"),
    ],
)
def test_non_json_values_are_found_with_their_path(value: object, path: str, fault: str, message: str) -> None:
    problem = json_problem(value, "payload")
    assert problem is not None
    assert (problem.path, problem.fault) == (path, fault)
    assert problem.message.startswith(message)


def test_the_culprit_is_the_bad_value_or_the_bad_key() -> None:
    bad = b"raw"
    assert json_problem({"a": [bad]}, "v") == JsonProblem("v.a[0]", "type", bad)
    assert json_problem({"a": {(1, 2): "x"}}, "v") == JsonProblem("v.a", "key", (1, 2))


def test_a_top_level_leaf_is_checked_too() -> None:
    problem = json_problem(float("nan"), "input")
    assert problem is not None and (problem.path, problem.fault) == ("input", "number")
    problem = json_problem(b"x", "input")
    assert problem is not None and problem.message == "input is a bytes, which is not JSON"
    assert json_problem(2**64 - 1) is None and json_problem(-(2**63)) is None


def test_the_first_problem_in_order_is_reported() -> None:
    problem = json_problem({"a": 1, "b": b"first", "c": float("nan")}, "p")
    assert problem is not None and problem.path == "p.b"


def nested(levels: int) -> object:
    value: object = []
    for _ in range(levels):
        value = [value]
    return value


def test_deep_nesting_is_refused_past_the_limit() -> None:
    assert json_problem(nested(MAX_JSON_DEPTH)) is None
    problem = json_problem({"deep": nested(MAX_JSON_DEPTH + 10)}, "payload")
    assert problem is not None and problem.fault == "depth"
    assert problem.path.startswith("payload.deep[0][0]")
    assert f"is nested more than {MAX_JSON_DEPTH} levels deep" in problem.message


def test_a_self_containing_value_is_refused_not_recursed_forever() -> None:
    loop: list[object] = []
    loop.append(loop)
    problem = json_problem(loop)
    assert problem is not None and problem.fault == "depth"


def test_str_and_int_subclasses_pass() -> None:
    class Name(str):
        pass

    class Count(int):
        pass

    assert json_problem({Name("k"): [Name("v"), Count(3)]}) is None


# -- partial_json ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "draft"),
    [
        ('{"slug": "mug", "qty"', {"slug": "mug"}),  # a dangling key is dropped
        ('{"query": "blue mu', {"query": "blue mu"}),  # cut in a string: what has arrived of it
        ('{"a": [1', {"a": [1]}),  # open arrays and objects are closed
        ('{"a": 1,', {"a": 1}),  # after a comma
        ("[1, 2, ", [1, 2]),
        ('{"a": "b", "c":', {"a": "b"}),  # after a colon
        ('{"a": 12', {"a": 12}),  # cut in a number: what has arrived of it ...
        ('{"a": 1.', {}),  # ... unless it is not a number yet
        ('{"a": -', {}),
        ('{"a": 1.5e', {}),
        ('{"a": tru', {}),  # a partial literal
        ('{"a": nul', {}),
        ('{"a": {"b": [1, {"c": "d', {"a": {"b": [1, {"c": "d"}]}}),
        ('{"a": "caf\\u00e9"', {"a": "caf\u00e9"}),  # unicode escapes
        ('{"a": "caf\\u00e', {"a": "caf"}),  # cut in a unicode escape: the escape is dropped
        ('{"a": "caf\\', {"a": "caf"}),  # cut after a backslash
        ('{"a": "say \\"', {"a": 'say "'}),  # an escape cut just after it is kept
        ('{"a": "line\\n', {"a": "line\n"}),
        ('{"a": "\\ud83d\\ude00"', {"a": "\U0001f600"}),  # a surrogate pair
        ('{"a": "\\ud83d', {"a": ""}),  # half a pair is not shown (it is not text)
        ("{", {}),
        ("[", []),
        ('"abc', "abc"),
        ("12", 12),
    ],
)
def test_partial_json_drafts(text: str, draft: object) -> None:
    assert partial_json(text) == draft


@pytest.mark.parametrize("text", ["", "   ", "nope", "}"])
def test_partial_json_is_none_when_nothing_parses(text: str) -> None:
    assert partial_json(text) is None


ARGUMENTS = {
    "query": "blue ceramic coffee mug with a wide handle",
    "filters": {"price_max": 25.5, "price_min": -12.5, "colors": ["blue", "navy"], "in_stock": True, "brand": None},
    "limit": 10,
    "note": 'caf\u00e9 "quoted" line\nbreak \\ slash \U0001f600',
    "ids": [101, 202, 303],
}


def test_every_prefix_of_real_arguments_drafts_a_prefix_of_them() -> None:
    text = json.dumps(ARGUMENTS)
    assert partial_json(text) == ARGUMENTS
    for cut in range(1, len(text)):
        draft = partial_json(text[:cut])
        assert isinstance(draft, dict), text[:cut]
        keys = list(draft)
        assert all(draft[key] == ARGUMENTS[key] for key in keys[:-1]), text[:cut]  # finished values are whole
        if keys and isinstance(draft[keys[-1]], str):  # the open one is a prefix
            assert str(ARGUMENTS[keys[-1]]).startswith(str(draft[keys[-1]])), text[:cut]


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ("\ud800", "v"),
        ({"a": ["ok", "x\udfff"]}, "v.a[1]"),
        ({"k\udc80": 1}, "v"),
        ({"a": {"b": "\udbff"}}, "v.a.b"),
    ],
)
def test_a_lone_surrogate_is_refused_in_strings_and_keys(value: object, path: str) -> None:
    problem = json_problem(value, "v")
    assert problem is not None and (problem.path, problem.fault) == (path, "string")
    assert "lone surrogate (U+D" in problem.message
    assert json_problem({"emoji \U0001f600": ["\u00e9\U0001f600"]}) is None  # a surrogate pair's character is fine
