"""The closed-schema check of an argument object (gate step 4).

A small, fast validator for the JSON Schema subset tool parameters use:
``type``, ``properties``, ``required``, ``additionalProperties``, ``items``,
``enum``, ``const``, ``anyOf``/``oneOf``, string length, number bounds and
array length. Keywords it does not know are ignored, so an external tool's
richer schema is checked as far as this subset reaches and the rest is left to
the tool. It reports the first violation with its path (``floors[1].index``)
and, for a misnamed key, a hint from :data:`RENAMES`.
"""

from __future__ import annotations

import difflib
import json
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# Old or commonly guessed parameter names → the names our tools use.
RENAMES: dict[str, str] = {
    "path": "file_path",
    "filepath": "file_path",
    "filename": "file_path",
    "start_line": "offset",
    "line": "offset",
    "line_count": "limit",
    "lines": "limit",
    "index": "floor",
    "messages": "floors",
    "query": "pattern",
    "regex": "pattern",
    "cmd": "command",
    "text": "content",
}


@dataclass(frozen=True, slots=True)
class SchemaViolation:
    """The first way an argument object breaks its schema."""

    path: str
    message: str
    expected: str | None = None
    hint: str | None = None

    def describe(self) -> str:
        return self.message if self.hint is None else f"{self.message} {self.hint}"


def check_arguments(schema: Mapping[str, Any], value: Any) -> SchemaViolation | None:
    """Return the first violation of ``schema`` by ``value``, or ``None``."""
    return _check(schema, value, "")


_TYPE_NAMES = {
    "object": "an object",
    "array": "an array",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "null": "null",
}


def _is_type(value: Any, type_name: str) -> bool:
    if type_name == "object":
        return isinstance(value, dict)
    if type_name == "array":
        return isinstance(value, list)
    if type_name == "string":
        return isinstance(value, str)
    if type_name == "boolean":
        return isinstance(value, bool)
    if type_name == "null":
        return value is None
    if isinstance(value, bool):
        return False
    if type_name == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if type_name == "number":
        return isinstance(value, int | float)
    return True  # an unknown type name is not ours to judge


def _json_type(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _is_type(value, name):
            return name
    return type(value).__name__


def _at(path: str) -> str:
    return f"`{path}`" if path else "The arguments"


def _preview(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (ValueError, TypeError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= 40 else text[:40] + "…"


def _same(a: Any, b: Any) -> bool:
    # 1 == True in Python; JSON keeps them apart.
    return bool(type(a) is type(b) and a == b) or (
        _json_type(a) == _json_type(b) in ("integer", "number") and a == b
    )


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _check(schema: Any, value: Any, path: str) -> SchemaViolation | None:
    if not isinstance(schema, Mapping):
        return None
    branches = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(branches, list) and branches:
        results = [_check(b, value, path) for b in branches]
        if all(r is not None for r in results):
            first = next(r for r in results if r is not None)
            return (
                first if len(branches) == 1 else _mismatch(path, value, "one of the allowed forms")
            )
    declared = schema.get("type")
    if declared is not None:
        types = declared if isinstance(declared, list) else [declared]
        if not any(_is_type(value, t) for t in types if isinstance(t, str)):
            expected = " or ".join(_TYPE_NAMES.get(t, str(t)) for t in types)
            return _mismatch(path, value, expected)
    if "const" in schema and not _same(value, schema["const"]):
        return SchemaViolation(path, f"{_at(path)} must be {_preview(schema['const'])}.")
    enum = schema.get("enum")
    if isinstance(enum, list) and not any(_same(value, e) for e in enum):
        allowed = ", ".join(_preview(e) for e in enum)
        return SchemaViolation(
            path, f"{_at(path)} must be one of {allowed}; got {_preview(value)}.", "enum"
        )
    if isinstance(value, str):
        return _check_string(schema, value, path)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _check_number(schema, value, path)
    if isinstance(value, list):
        return _check_array(schema, value, path)
    if isinstance(value, dict):
        return _check_object(schema, value, path)
    return None


def _mismatch(path: str, value: Any, expected: str) -> SchemaViolation:
    got = _TYPE_NAMES.get(_json_type(value), _json_type(value))
    return SchemaViolation(
        path, f"{_at(path)} must be {expected}, got {got} {_preview(value)}.", expected
    )


def _check_string(schema: Mapping[str, Any], value: str, path: str) -> SchemaViolation | None:
    low, high = schema.get("minLength"), schema.get("maxLength")
    if isinstance(low, int) and len(value) < low:
        return SchemaViolation(path, f"{_at(path)} must have at least {low} characters.")
    if isinstance(high, int) and len(value) > high:
        return SchemaViolation(
            path, f"{_at(path)} must have at most {high} characters (got {len(value)})."
        )
    return None


_BOUNDS: tuple[tuple[str, Callable[[Any, Any], bool], str], ...] = (
    ("minimum", operator.ge, "at least"),
    ("maximum", operator.le, "at most"),
    ("exclusiveMinimum", operator.gt, "more than"),
    ("exclusiveMaximum", operator.lt, "less than"),
)


def _check_number(schema: Mapping[str, Any], value: float, path: str) -> SchemaViolation | None:
    for key, ok, words in _BOUNDS:
        bound = schema.get(key)
        if isinstance(bound, int | float) and not isinstance(bound, bool) and not ok(value, bound):
            return SchemaViolation(path, f"{_at(path)} must be {words} {bound}; got {value}.")
    return None


def _check_array(schema: Mapping[str, Any], value: list[Any], path: str) -> SchemaViolation | None:
    low, high = schema.get("minItems"), schema.get("maxItems")
    if isinstance(low, int) and len(value) < low:
        return SchemaViolation(path, f"{_at(path)} must have at least {low} item(s).")
    if isinstance(high, int) and len(value) > high:
        return SchemaViolation(
            path, f"{_at(path)} must have at most {high} items (got {len(value)})."
        )
    items = schema.get("items")
    if isinstance(items, Mapping):
        for i, item in enumerate(value):
            violation = _check(items, item, f"{path}[{i}]")
            if violation is not None:
                return violation
    return None


def _check_object(
    schema: Mapping[str, Any], value: dict[str, Any], path: str
) -> SchemaViolation | None:
    props = schema.get("properties")
    props = props if isinstance(props, Mapping) else {}
    extra = schema.get("additionalProperties", True)
    if extra is False:
        for key in value:
            if key not in props:
                return _unknown_key(path, key, props)
    for key in schema.get("required") or ():
        if key not in value:
            where = f" in `{path}`" if path else ""
            return SchemaViolation(
                _join(path, key), f"Missing required parameter `{key}`{where}.", "required"
            )
    for key, item in value.items():
        sub = props.get(key, extra if isinstance(extra, Mapping) else None)
        if sub is not None:
            violation = _check(sub, item, _join(path, key))
            if violation is not None:
                return violation
    return None


def _unknown_key(path: str, key: str, props: Mapping[str, Any]) -> SchemaViolation:
    where = _join(path, key)
    renamed = RENAMES.get(key.lower())
    if renamed is not None and renamed in props:
        hint = f"Use `{_join(path, renamed)}`."
    else:
        close = difflib.get_close_matches(key, list(props), n=1, cutoff=0.6)
        if close:
            hint = f"Did you mean `{_join(path, close[0])}`?"
        elif props:
            hint = "Allowed: " + ", ".join(f"`{p}`" for p in props) + "."
        else:
            hint = "This tool takes no parameters here."
    return SchemaViolation(where, f"`{where}` is not a parameter.", None, hint)
