"""The closed-schema check and the per-protocol schema adaptation."""

from __future__ import annotations

from typing import Any

import pytest

from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.schema_adapt import adapt_parameters
from tavern_agent.core.schema_check import check_arguments

READ = {
    "type": "object",
    "properties": {
        "file_path": {"type": "string"},
        "offset": {"type": "integer", "minimum": 1},
        "limit": {"type": "integer", "minimum": 1, "maximum": 1200},
        "mode": {"enum": ["replace", "append"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
    },
    "required": ["file_path"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("args", "path", "text"),
    [
        ({"path": "a.md"}, "path", "`path` is not a parameter. Use `file_path`."),
        ({"file_path": "a", "start_line": 2}, "start_line", "Use `offset`."),
        ({"file_path": "a", "ofset": 2}, "ofset", "Did you mean `offset`?"),
        ({"file_path": "a", "zzz": 2}, "zzz", "Allowed: `file_path`, `offset`"),
        ({}, "file_path", "Missing required parameter `file_path`."),
        ({"file_path": 3}, "file_path", "`file_path` must be a string, got an integer 3."),
        ({"file_path": "a", "offset": 0}, "offset", "`offset` must be at least 1; got 0."),
        ({"file_path": "a", "offset": True}, "offset", "must be an integer, got a boolean"),
        ({"file_path": "a", "offset": 2.5}, "offset", "must be an integer"),
        ({"file_path": "a", "limit": 5000}, "limit", "at most 1200"),
        ({"file_path": "a", "mode": "prepend"}, "mode", 'one of "replace", "append"'),
        ({"file_path": "a", "tags": ["x", 1]}, "tags[1]", "`tags[1]` must be a string"),
        ({"file_path": "a", "tags": ["x", "y", "z"]}, "tags", "at most 2 items"),
    ],
)
def test_violations_name_the_path(args: dict[str, Any], path: str, text: str) -> None:
    violation = check_arguments(READ, args)
    assert violation is not None
    assert violation.path == path
    assert text in violation.describe()


def test_valid_arguments_pass() -> None:
    assert check_arguments(READ, {"file_path": "a", "offset": 3, "limit": 3.0}) is None


def test_open_schema_allows_extra_keys_and_unknown_keywords_are_ignored() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string", "format": "uri"}}}
    assert check_arguments(schema, {"q": "x", "extra": [1]}) is None


def test_any_of_accepts_any_branch() -> None:
    schema = {
        "type": "object",
        "properties": {"v": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
    }
    assert check_arguments(schema, {"v": 1}) is None
    violation = check_arguments(schema, {"v": [1]})
    assert violation is not None and "one of the allowed forms" in violation.message


def test_adapters_leave_openai_and_anthropic_schemas_alone() -> None:
    for protocol in (
        ModelProtocol.OPENAI_CHAT,
        ModelProtocol.OPENAI_RESPONSES,
        ModelProtocol.ANTHROPIC,
    ):
        assert adapt_parameters(READ, protocol) is READ


def _keys(schema: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(schema, dict):
        for key, value in schema.items():
            found.add(key)
            if key == "properties":
                for sub in value.values():
                    found |= _keys(sub)
            elif isinstance(value, dict | list):
                found |= _keys(value)
    elif isinstance(schema, list):
        for item in schema:
            found |= _keys(item)
    return found


def test_gemini_gets_its_subset() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "kind": {"const": "a"},
            "maybe": {"type": ["string", "null"]},
            "either": {"type": ["string", "integer"]},
            "level": {"type": "integer", "enum": [1, 2]},
            "pick": {"oneOf": [{"type": "string"}, {"$ref": "#/$defs/Point"}]},
            "items": {"type": "array", "items": {"type": "object", "additionalProperties": False}},
        },
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "number"}}}},
        "additionalProperties": False,
    }
    adapted = adapt_parameters(schema, ModelProtocol.GEMINI)
    assert not _keys(adapted) & {
        "$schema",
        "additionalProperties",
        "const",
        "$defs",
        "$ref",
        "oneOf",
    }
    props = adapted["properties"]
    assert props["kind"] == {"enum": ["a"]}
    assert props["maybe"] == {"type": "string", "nullable": True}
    assert props["either"] == {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    assert "enum" not in props["level"] and "Allowed: 1, 2." in props["level"]["description"]
    assert props["pick"]["anyOf"][1] == {"type": "object", "properties": {"x": {"type": "number"}}}
    assert "additionalProperties" in schema  # the input is never changed


def test_gemini_copies_only_what_changes() -> None:
    ready = {"type": "object", "properties": {"q": {"type": "string", "description": "Text."}}}
    assert adapt_parameters(ready, ModelProtocol.GEMINI) is ready
    plain = {"type": "integer", "minimum": 1, "default": 20}
    listed = {"type": "array", "items": {"type": "string"}, "maxItems": 3}
    schema = {
        "type": "object",
        "properties": {"plain": plain, "listed": listed, "maybe": {"type": ["string", "null"]}},
        "additionalProperties": False,
    }
    adapted = adapt_parameters(schema, ModelProtocol.GEMINI)
    props = adapted["properties"]
    assert props["plain"] is plain and props["listed"] is listed
    assert props["maybe"] == {"type": "string", "nullable": True}
    assert "additionalProperties" not in adapted and "additionalProperties" in schema


def test_gemini_recursive_ref_is_cut() -> None:
    schema = {
        "type": "object",
        "properties": {"node": {"$ref": "#/$defs/Node"}},
        "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
    }
    adapted = adapt_parameters(schema, ModelProtocol.GEMINI)
    depth, node = 0, adapted["properties"]["node"]
    while "properties" in node:
        node, depth = node["properties"]["next"], depth + 1
    assert depth <= 16 and node["type"] == "object"


def test_null_for_an_optional_parameter_means_absent() -> None:
    from tavern_agent.core.schema_check import drop_null_optionals

    schema = {
        "type": "object",
        "properties": {
            "file_path": {"type": "string"},
            "limit": {"type": "integer"},
            "note": {"type": ["string", "null"]},
            "free": {},
        },
        "required": ["file_path"],
        "additionalProperties": False,
    }
    values = {"file_path": "a", "limit": None, "note": None, "free": None}
    assert drop_null_optionals(schema, values) == {"file_path": "a", "note": None, "free": None}
    # A required parameter keeps its null, so the check names it.
    kept = drop_null_optionals(schema, {"file_path": None})
    violation = check_arguments(schema, kept)
    assert violation is not None and violation.path == "file_path"
