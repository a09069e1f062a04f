"""Human-facing output: text from models, files and servers shown, never executed.

Model text, chat messages, tool descriptions and file names can hold terminal
control sequences (``ESC[2J`` clears the screen, OSC 8 forges links, OSC 52
writes the clipboard), bidi overrides that reorder what is shown, and lone
surrogates that cannot be encoded at all. Every human-facing print of the CLI
goes through :func:`visible` (plain lines via :func:`say`, Rich markup via
:func:`markup`), which turns those characters into visible escapes such as
``\\x1b``. ``--json`` output is printed exactly: JSON escapes what it must.
"""

from __future__ import annotations

import re

import click
from rich.markup import escape

# C0 controls except newline and tab, DEL, C1 controls (U+009B is a one-byte CSI),
# bidi embeddings, overrides and isolates, and lone surrogates.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape_char(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with every control character shown as an escape (newline and tab kept)."""
    return _UNSAFE.sub(_escape_char, text)


def markup(text: str) -> str:
    """``text`` made visible and escaped for Rich markup: printed as it reads."""
    return escape(visible(text))


def say(text: str, *, err: bool = False) -> None:
    """Print one human-facing line (or block) with its control characters made visible."""
    click.echo(visible(text), err=err)
