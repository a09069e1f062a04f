"""The files a user names on the command line, read with errors that name them.

Every refusal is one :class:`InputError` line, ``<file>: <what is wrong>``
(with the line number where the format has lines), so with several
``--world`` files the user knows which one to fix. Nothing here writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tavern_agent.chat.cards import CharacterCard, parse_card
from tavern_agent.chat.formats import ChatFormatError
from tavern_agent.chat.world_books import WorldBook, parse_world
from tavern_agent.core import json_input


class InputError(ValueError):
    """An input file cannot be used; the message names it."""


def read_bytes(path: Path) -> bytes:
    """The file's bytes, or :class:`InputError` saying why it cannot be read."""
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None


def load_json(path: Path) -> Any:
    """The JSON value in ``path``."""
    try:
        return json_input.loads(read_bytes(path))
    except json_input.JsonInputError as exc:
        raise InputError(f"{path}: {exc}") from None


def load_world(path: Path) -> WorldBook:
    """A world info (lorebook) file, named after its file stem."""
    try:
        return parse_world(read_bytes(path), path.stem)
    except (ChatFormatError, RecursionError) as exc:
        raise InputError(f"{path}: {json_input.describe(exc)}") from None


def load_card(path: Path) -> CharacterCard:
    """A character card, JSON or PNG."""
    try:
        return parse_card(read_bytes(path))
    except (ChatFormatError, RecursionError) as exc:
        raise InputError(f"{path}: {json_input.describe(exc)}") from None
