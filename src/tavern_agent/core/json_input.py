"""Parsing JSON from files a user hands us, with every failure a one-line reason.

``json.loads`` fails on hostile input in ways that are not ``JSONDecodeError``:
``RecursionError`` for deep nesting (``[[[[…``), a plain ``ValueError`` for an
integer of more than 4,300 digits, ``UnicodeDecodeError`` for bytes that are
not UTF-8. :func:`loads` turns each into :class:`JsonInputError` with a short
message; callers put the file name (and line) in front of it.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from typing import Any

import msgspec


class JsonInputError(ValueError):
    """The bytes are not JSON we can read; the message says why in one line."""


def describe(exc: BaseException) -> str:
    """A one-line reason for a failure of ``json.loads`` (or of decoding its input)."""
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply to read"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text (bad byte at offset {exc.start})"
    if isinstance(exc, json.JSONDecodeError):
        return f"not JSON: {exc.msg.removesuffix(' at')} at line {exc.lineno} column {exc.colno}"
    if isinstance(exc, ValueError) and "digits" in str(exc):
        return f"a number has more than {sys.get_int_max_str_digits()} digits"
    return " ".join(str(exc).split()) or type(exc).__name__


_FAST_DECODE = msgspec.json.Decoder().decode
# Deeper than any document we read (a chat line, a request, a tool call), and far
# below the interpreter's recursion limit, so decoding never meets it.
MAX_DEPTH = 512
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def too_deep(data: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether arrays and objects in ``data`` nest more than ``limit`` levels.

    Counted without recursion, before any decoder sees the bytes: brackets
    inside strings do not count. A document with no more brackets than the
    limit is not scanned at all.
    """
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    depth = 0
    for byte in _STRING.sub(b"", data).translate(None, _NOT_BRACKETS):
        if byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def loads(data: bytes | str) -> Any:
    """``json.loads``, raising only :class:`JsonInputError` for bad input.

    Bytes go through msgspec's decoder first, which reads a large chat several
    times faster. The two agree on everything msgspec accepts (integers of any
    size stay integers, which is why it is msgspec and not orjson); whatever
    msgspec refuses (lone surrogates, ``NaN``, numbers out of range, deep
    nesting, bad JSON) goes to ``json.loads``, so every value and every error
    is the standard library's. Nesting deeper than :data:`MAX_DEPTH` is
    refused before decoding.
    """
    raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
    if too_deep(raw):
        raise JsonInputError(describe(RecursionError()))
    if isinstance(data, bytes):
        try:
            return _FAST_DECODE(data)
        except (ValueError, RecursionError):  # msgspec's errors are ValueErrors
            pass
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise JsonInputError(describe(exc)) from None


def load_object(
    data: bytes | str, error: Callable[[str], Exception], not_object: str
) -> dict[str, Any]:
    """The JSON object in ``data``: ``error(reason)`` is raised for bad JSON, and
    ``error(not_object)`` for a value that is not an object."""
    try:
        value = loads(data)
    except JsonInputError as exc:
        raise error(str(exc)) from None
    if not isinstance(value, dict):
        raise error(not_object)
    return value
