"""The ToolArguments table of issue 2, one row per test case, plus properties."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tavern_agent.core.arguments import (
    MISSING,
    InvalidArguments,
    ToolArguments,
    parse_arguments,
    replay_arguments,
)

EMPTY_SPELLINGS: list[Any] = [MISSING, None, "", "   \n\t", "null", " null ", "{}", {}, "\ufeff{}"]


def spelling_id(wire: Any) -> str:
    # MISSING's repr holds its address, which differs between xdist workers
    return "MISSING" if wire is MISSING else repr(wire)


@pytest.mark.parametrize("wire", EMPTY_SPELLINGS, ids=spelling_id)
def test_empty_spellings_give_the_empty_object(wire: Any) -> None:
    parsed = parse_arguments(wire)
    assert parsed == ToolArguments({})


def test_field_missing_is_the_default() -> None:
    assert parse_arguments() == ToolArguments({})


def test_a_dict_is_that_object() -> None:
    assert parse_arguments({"formula": "d20", "n": [1, {"a": None}]}).values == {
        "formula": "d20",
        "n": [1, {"a": None}],
    }


@pytest.mark.parametrize(
    "wire",
    [
        '{"formula":"3d6+4"}',
        '  \n{"formula":"3d6+4"}\t ',
        '\ufeff{"formula":"3d6+4"}',
        b'\xef\xbb\xbf{"formula":"3d6+4"}',
        b'{"formula":"3d6+4"}',
        json.dumps(json.dumps({"formula": "3d6+4"})),
        " " + json.dumps(json.dumps({"formula": "3d6+4"})) + " ",
    ],
    ids=["plain", "whitespace", "bom", "bom-bytes", "bytes", "double-encoded", "double-ws"],
)
def test_string_encodings_give_the_object(wire: Any) -> None:
    assert parse_arguments(wire) == ToolArguments({"formula": "3d6+4"})


@pytest.mark.parametrize(
    ("wire", "reason"),
    [
        ("[1,2]", "got an array"),
        ([1, 2], "got an array"),
        ("[]", "got an array"),
        ("42", "got a number"),
        (42, "got a number"),
        (True, "got a boolean"),
        ('"just text"', "not valid JSON"),
        ('{"formula": "3d6', "not valid JSON"),
        ('{"a": 1} trailing', "Extra data"),
        ('{"a": 1}}', "Extra data"),
        ("NaN", "not valid JSON"),
        ('{"a": NaN}', "not valid JSON"),
        (json.dumps(json.dumps(json.dumps({"a": 1}))), "got a string"),
        (json.dumps(json.dumps([1])), "got an array"),
        pytest.param("[" * 100_000, "nested too deep", id="deep-nesting"),
    ],
    ids=repr,
)
def test_everything_else_is_invalid(wire: Any, reason: str) -> None:
    parsed = parse_arguments(wire)
    assert isinstance(parsed, InvalidArguments)
    assert reason in parsed.reason


@pytest.mark.parametrize(
    "wire", ["[1,2]", '{"formula": "3d6', "  42 ", b"\xff\xfe{bad", "\ufeff[1]"], ids=repr
)
def test_invalid_keeps_raw_byte_for_byte(wire: str | bytes) -> None:
    parsed = parse_arguments(wire)
    assert isinstance(parsed, InvalidArguments)
    assert parsed.raw == wire
    assert type(parsed.raw) is type(wire)


def test_invalid_utf8_names_the_byte() -> None:
    parsed = parse_arguments(b'{"a": "\xff"}')
    assert isinstance(parsed, InvalidArguments)
    assert "UTF-8 at byte 7" in parsed.reason
    assert parsed.echo() == '{"a": "\\xff"}'


def test_error_position_is_reported() -> None:
    parsed = parse_arguments('{"a": 1 "b": 2}')
    assert isinstance(parsed, InvalidArguments)
    assert "line 1, column 9, char 8" in parsed.reason


def test_echo_is_capped_at_200_characters() -> None:
    parsed = parse_arguments("[" + "1," * 500)
    assert isinstance(parsed, InvalidArguments)
    assert parsed.echo() == ("[" + "1," * 500)[:200] + "…"


def test_replay_sends_an_object_either_way() -> None:
    assert replay_arguments(parse_arguments('{"a":1}')) == {"a": 1}
    assert replay_arguments(parse_arguments("[1]")) == {}


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
json_objects = st.dictionaries(st.text(), json_values, max_size=6)


@given(json_objects)
@settings(max_examples=300)
def test_object_string_and_double_string_agree(obj: dict[str, Any]) -> None:
    direct = parse_arguments(obj)
    once = parse_arguments(json.dumps(obj))
    twice = parse_arguments(json.dumps(json.dumps(obj)))
    assert isinstance(direct, ToolArguments)
    assert direct == once == twice
    assert direct.values == obj


@given(st.one_of(st.text(), st.binary(), json_values))
@settings(max_examples=500)
def test_parsing_never_raises(wire: Any) -> None:
    parsed = parse_arguments(wire)
    assert isinstance(parsed, ToolArguments | InvalidArguments)
