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
        """The message for the model, with the hint when there is one."""
        return self.message if self.hint is None else f"{self.message} {self.hint}"


def check_arguments(schema: Mapping[str, Any], value: Any) -> SchemaViolation | None:
    """Return the first violation of ``schema`` by ``value``, or ``None``."""
    entry = _FAST.get(id(schema))
    if entry is None or entry[0] is not schema:
        entry = (schema, _compile_flat(schema))
        _FAST[id(schema)] = entry
        if len(_FAST) > _FAST_SIZE:
            _FAST.pop(next(iter(_FAST)))
    fast = entry[1]
    if fast is not None and type(value) is dict and fast(value):
        return None
    return _check(schema, value, "")


def drop_null_optionals(schema: Mapping[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """``values`` without top-level ``null`` values of optional parameters.

    Models often spell "not given" as ``null``, and OpenAI's strict mode makes
    them do so for every optional parameter. Where the parameter's own schema
    does not allow null, a null means absent; required parameters keep it, so
    the check reports it.
    """
    if None not in values.values():
        return values
    props = schema.get("properties")
    if not isinstance(props, Mapping):
        return values
    required = set(schema.get("required") or ())
    return {
        k: v
        for k, v in values.items()
        if v is not None or k in required or k not in props or _allows_null(props[k])
    }


def _allows_null(schema: Any) -> bool:
    if not isinstance(schema, Mapping):
        return True
    declared = schema.get("type")
    if declared is None and not any(k in schema for k in ("anyOf", "oneOf", "enum", "const")):
        return True
    if declared == "null" or (isinstance(declared, list) and "null" in declared):
        return True
    if schema.get("nullable") is True:
        return True
    branches = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(branches, list) and any(_allows_null(b) for b in branches):
        return True
    enum = schema.get("enum")
    return isinstance(enum, list) and None in enum


# Most tool schemas are a flat object of typed scalars. For those a checker is
# built once per schema object; it only says "valid" quickly, and anything it
# doubts goes through the full check, which finds and words the violation.
_FAST_SIZE = 8192
_FAST: dict[int, tuple[Mapping[str, Any], Callable[[dict[str, Any]], bool] | None]] = {}
_FLAT_ROOT_KEYS = frozenset(
    {"type", "properties", "required", "additionalProperties", "description", "title", "$schema"}
)
_FLAT_PROP_KEYS = frozenset({"type", "description", "title", "default", "examples"})


def _compile_flat(schema: Mapping[str, Any]) -> Callable[[dict[str, Any]], bool] | None:
    if schema.get("type") != "object" or not _FLAT_ROOT_KEYS.issuperset(schema):
        return None
    props = schema.get("properties") or {}
    if not isinstance(props, Mapping):
        return None
    tests: dict[str, Callable[[Any], bool]] = {}
    for key, sub in props.items():
        kind = sub.get("type") if isinstance(sub, Mapping) else None
        if not isinstance(kind, str) or kind in ("object", "array") or kind not in _TYPE_TESTS:
            return None
        if not _FLAT_PROP_KEYS.issuperset(sub):
            return None
        tests[key] = _TYPE_TESTS[kind]
    extra = schema.get("additionalProperties", True)
    if extra is not True and extra is not False:
        return None
    closed = extra is False
    required = tuple(schema.get("required") or ())

    def valid(value: dict[str, Any]) -> bool:
        for key in required:
            if key not in value:
                return False
        for key, item in value.items():
            test = tests.get(key)
            if test is None:
                if closed:
                    return False
            elif not test(item):
                return False
        return True

    return valid


_TYPE_NAMES = {
    "object": "an object",
    "array": "an array",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "null": "null",
}


def _is_int(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_TYPE_TESTS: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": _is_int,
    "number": _is_number,
}


def _is_type(value: Any, type_name: str) -> bool:
    test = _TYPE_TESTS.get(type_name)
    return True if test is None else test(value)  # an unknown type name is not ours to judge


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
    if type(schema) is not dict:  # the fast path: schemas are plain dicts
        if not isinstance(schema, Mapping):
            return None
        schema = dict(schema)
    if "anyOf" in schema or "oneOf" in schema:
        violation = _check_branches(schema.get("anyOf") or schema.get("oneOf"), value, path)
        if violation is not None:
            return violation
    declared = schema.get("type")
    if declared is not None:
        if type(declared) is str:
            ok = _is_type(value, declared)
            types = [declared]
        else:
            listed = declared if isinstance(declared, list) else []
            types = [t for t in listed if isinstance(t, str)]
            ok = not types or any(_is_type(value, t) for t in types)
        if not ok:
            return _mismatch(path, value, " or ".join(_TYPE_NAMES.get(t, t) for t in types))
    if "const" in schema and not _same(value, schema["const"]):
        return SchemaViolation(path, f"{_at(path)} must be {_preview(schema['const'])}.")
    enum = schema.get("enum")
    if isinstance(enum, list) and not any(_same(value, e) for e in enum):
        allowed = ", ".join(_preview(e) for e in enum)
        return SchemaViolation(
            path, f"{_at(path)} must be one of {allowed}; got {_preview(value)}.", "enum"
        )
    kind = type(value)
    if kind is dict:
        return _check_object(schema, value, path)
    if kind is str:
        return _check_string(schema, value, path) if _STRING_KEYS & schema.keys() else None
    if kind is list:
        return _check_array(schema, value, path)
    if kind is int or kind is float:
        return _check_number(schema, value, path) if _NUMBER_KEYS & schema.keys() else None
    return None


_STRING_KEYS = frozenset({"minLength", "maxLength"})
_NUMBER_KEYS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})


def _check_branches(branches: Any, value: Any, path: str) -> SchemaViolation | None:
    if not isinstance(branches, list) or not branches:
        return None
    results = [_check(b, value, path) for b in branches]
    if any(r is None for r in results):
        return None
    if len(branches) == 1:
        return results[0]
    return _mismatch(path, value, "one of the allowed forms")


def _mismatch(path: str, value: Any, expected: str) -> SchemaViolation:
    got = _TYPE_NAMES.get(_json_type(value), _json_type(value))
    return SchemaViolation(
        path, f"{_at(path)} must be {expected}, got {got} {_preview(value)}.", expected
    )


def _check_size(
    schema: Mapping[str, Any], keys: tuple[str, str], size: int, units: tuple[str, str], path: str
) -> SchemaViolation | None:
    """``size`` against the schema's lower and upper bound ``keys``; ``units`` name what
    is counted after "at least" and after "at most"."""
    low, high = schema.get(keys[0]), schema.get(keys[1])
    if isinstance(low, int) and size < low:
        return SchemaViolation(path, f"{_at(path)} must have at least {low} {units[0]}.")
    if isinstance(high, int) and size > high:
        return SchemaViolation(
            path, f"{_at(path)} must have at most {high} {units[1]} (got {size})."
        )
    return None


def _check_string(schema: Mapping[str, Any], value: str, path: str) -> SchemaViolation | None:
    keys, units = ("minLength", "maxLength"), ("characters", "characters")
    return _check_size(schema, keys, len(value), units, path)


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
    size = _check_size(schema, ("minItems", "maxItems"), len(value), ("item(s)", "items"), path)
    if size is not None:
        return size
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
    if not isinstance(props, Mapping):
        props = {}
    extra = schema.get("additionalProperties", True)
    if extra is False:
        for key in value:
            if key not in props:
                return _unknown_key(path, key, props)
    required = schema.get("required")
    if required:
        missing = [key for key in required if key not in value]
        if missing:  # all of them at once, so one retry can fix the call
            where = f" in `{path}`" if path else ""
            names = ", ".join(f"`{key}`" for key in missing)
            noun = "parameter" if len(missing) == 1 else "parameters"
            return SchemaViolation(
                _join(path, missing[0]), f"Missing required {noun} {names}{where}.", "required"
            )
    fallback = extra if isinstance(extra, Mapping) else None
    for key, item in value.items():
        sub = props.get(key, fallback)
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
