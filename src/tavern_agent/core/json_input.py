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


def loads(data: bytes | str) -> Any:
    """``json.loads``, raising only :class:`JsonInputError` for bad input."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise JsonInputError(describe(exc)) from None
