"""Parsing JSON from files a user hands us, with every failure a one-line reason.

``json.loads`` fails on hostile input in ways that are not ``JSONDecodeError``:
``RecursionError`` for deep nesting (``[[[[…``), a plain ``ValueError`` for an
integer of more than 4,300 digits, ``UnicodeDecodeError`` for bytes that are
not UTF-8. :func:`loads` turns each into :class:`JsonInputError` with a short
message; callers put the file name (and line) in front of it.
"""

from __future__ import annotations

import json
import sys
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


def loads(data: bytes | str) -> Any:
    """``json.loads``, raising only :class:`JsonInputError` for bad input.

    Bytes go through msgspec's decoder first, which reads a large chat several
    times faster. The two agree on everything msgspec accepts (integers of any
    size stay integers, which is why it is msgspec and not orjson); whatever
    msgspec refuses (lone surrogates, ``NaN``, numbers out of range, deep
    nesting, bad JSON) goes to ``json.loads``, so every value and every error
    is the standard library's.
    """
    if isinstance(data, bytes):
        try:
            return _FAST_DECODE(data)
        except (ValueError, RecursionError):  # msgspec's errors are ValueErrors
            pass
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise JsonInputError(describe(exc)) from None
