"""``ToolArguments``: the one place where wire arguments become an argument set.

Providers send arguments as a JSON object, as a JSON string encoding one, and
sometimes as a string of a string (double encoded). "No arguments" has many
spellings. The rule, applied in this order:

1. missing, ``None``, ``""``, whitespace, ``"null"`` → the empty object;
2. a ``dict`` → that object;
3. a string (``bytes`` must be UTF-8) → strip a BOM and whitespace, decode JSON,
   then judge the decoded value with rules 1–2; a decoded string is judged once
   more (double encoding) but never a third time;
4. anything else → :class:`InvalidArguments` keeping the raw wire value
   verbatim, byte for byte, for the audit and the error text.

:func:`parse_arguments` never raises.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

MISSING: Final = object()
"""Marker for an arguments field that was absent from the wire."""

ECHO_CHARS: Final = 200
_BOM: Final = "\ufeff"
_EMPTY_TEXTS: Final = frozenset({"", "null"})


@dataclass(frozen=True, slots=True)
class ToolArguments:
    """A confirmed argument object. Tools only ever receive one of these."""

    values: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InvalidArguments:
    """Wire arguments that are not an object; ``raw`` is exactly what was sent."""

    raw: str | bytes
    reason: str

    def echo(self, limit: int = ECHO_CHARS) -> str:
        """The beginning of the raw text, for the model to see what it sent."""
        text = (
            self.raw.decode("utf-8", errors="backslashreplace")
            if isinstance(self.raw, bytes)
            else self.raw
        )
        return text if len(text) <= limit else text[:limit] + "…"


def _reject_constant(name: str) -> Any:
    # Python's json accepts NaN and Infinity; JSON does not.
    raise ValueError(f"{name} is not valid JSON")


# Built once: json.loads(text, parse_constant=…) would build a decoder per call.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _decode(text: str) -> tuple[Any, str | None]:
    try:
        return _DECODER.decode(text), None
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}, char {exc.pos}"
        return None, f"not valid JSON: {exc.msg} ({where})"
    except ValueError as exc:
        return None, f"not valid JSON: {exc}"
    except RecursionError:
        return None, "not valid JSON: nested too deep"


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    return f"a {type(value).__name__}"


# The decoder's own scanner (NaN refused as above); typeshed does not list the attribute.
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


def _from_text(text: str, raw: str | bytes, depth: int) -> ToolArguments | InvalidArguments:
    if text[:1] == "{":  # the common case, an object and nothing around it: one scan
        try:
            value, end = _SCAN(text, 0)
        except (StopIteration, ValueError, RecursionError):
            pass  # the full path below words the error
        else:
            if end == len(text):
                return ToolArguments(value)
    unbommed = text.removeprefix(_BOM)
    if unbommed.strip() in _EMPTY_TEXTS:
        return ToolArguments()
    # json.loads skips surrounding whitespace itself, so error positions stay
    # those of the text the model sent.
    value, error = _decode(unbommed)
    if error is not None:
        return InvalidArguments(raw, error)
    if value is None:
        return ToolArguments()
    if isinstance(value, dict):
        return ToolArguments(value)
    if isinstance(value, str) and depth == 0:
        return _from_text(value, raw, depth + 1)
    return InvalidArguments(raw, f"arguments must be a JSON object, got {_kind(value)}")


def parse_arguments(wire: Any = MISSING) -> ToolArguments | InvalidArguments:
    """Turn a wire arguments value into an argument set; never raises."""
    if wire is MISSING or wire is None:
        return ToolArguments()
    if isinstance(wire, dict):
        if all(isinstance(k, str) for k in wire):
            return ToolArguments(wire)
        return InvalidArguments(repr(wire), "argument names must be strings")
    if isinstance(wire, str):
        return _from_text(wire, wire, 0)
    if isinstance(wire, bytes | bytearray):
        raw = bytes(wire)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return InvalidArguments(raw, f"not valid UTF-8 at byte {exc.start}")
        return _from_text(text, raw, 0)
    try:
        raw_text = json.dumps(wire, ensure_ascii=False)
    except (TypeError, ValueError):
        raw_text = repr(wire)
    return InvalidArguments(raw_text, f"arguments must be a JSON object, got {_kind(wire)}")


def replay_arguments(parsed: ToolArguments | InvalidArguments) -> dict[str, Any]:
    """Arguments to send back in history: the object, or ``{}`` when invalid."""
    return parsed.values if isinstance(parsed, ToolArguments) else {}
