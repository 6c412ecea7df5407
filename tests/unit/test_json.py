"""The one JSON-value check (``json_problem``)."""

from __future__ import annotations

import datetime

import pytest

from orchestrator.core._json import MAX_INT, MAX_JSON_DEPTH, MIN_INT, JsonProblem, json_problem

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
