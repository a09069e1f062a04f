"""``ToolId``: the stable key of every tool.

Three forms exist::

    builtin:<name>                     builtin:workspace.read_file
    mcp/<registration-id>:<name>       mcp/0f3c…:read.file
    extension/<extensionId>:<name>     extension/weather:forecast

The provider is everything before the first ``:``; the native name is the
rest and may itself hold ``:`` or dots. Dispatch goes by provider kind, never
by name, so ``mcp/x:workspace.finish`` can never reach the built-in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum

MAX_TOOL_ID_CHARS = 1024
_BUILTIN_NAME = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*")
# Registration and extension ids: printable, no whitespace, no ':'.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SOURCE_ID = re.compile(r"[^\s:\x00-\x1f\x7f]+")


class ToolKind(StrEnum):
    """Where a tool lives; decides the dispatch lane."""

    BUILTIN = "builtin"
    MCP = "mcp"
    EXTENSION = "extension"


# Profiles, snapshots and records parse the same ids again and again; ToolIds
# are immutable, so one parse per distinct string is enough.
_PARSED: dict[str, ToolId] = {}
_PARSED_MAX = 65_536


class InvalidToolId(ValueError):
    """A ToolId string that does not follow one of the three forms."""


@dataclass(frozen=True, slots=True, order=True)
class ToolId:
    """A parsed, validated tool identity. ``str(tool_id)`` gives the wire form."""

    kind: ToolKind
    source: str  # registration id for MCP, extension id for extensions, "" for builtins
    name: str
    # ToolIds key every lookup on the hot path; compute text and hash once.
    _text: str = field(init=False, repr=False, compare=False)
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        provider = (
            self.kind.value if self.kind is ToolKind.BUILTIN else f"{self.kind}/{self.source}"
        )
        text = f"{provider}:{self.name}"
        _validate(self.kind, self.source, self.name, text)
        object.__setattr__(self, "_text", text)
        object.__setattr__(self, "_hash", hash(text))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ToolId) and self._text == other._text

    @classmethod
    def parse(cls, text: str) -> ToolId:
        """Parse ``text``; raise :class:`InvalidToolId` naming the bad part."""
        found = _PARSED.get(text) if isinstance(text, str) else None
        if found is None:
            found = cls._parse(text)
            if len(_PARSED) >= _PARSED_MAX:
                _PARSED.clear()
            _PARSED[text] = found
        return found

    @classmethod
    def _parse(cls, text: str) -> ToolId:
        if not isinstance(text, str):
            raise InvalidToolId(f"ToolId must be a string, got {type(text).__name__}")
        provider, sep, name = text.partition(":")
        if not sep:
            raise InvalidToolId(
                f"invalid ToolId {text!r}: missing ':' between provider and name "
                "(expected builtin:<name>, mcp/<registration-id>:<name> "
                "or extension/<extensionId>:<name>)"
            )
        kind_text, slash, source = provider.partition("/")
        try:
            kind = ToolKind(kind_text)
        except ValueError:
            raise InvalidToolId(
                f"invalid ToolId {text!r}: unknown provider {provider!r} "
                "(expected builtin, mcp/<registration-id> or extension/<extensionId>)"
            ) from None
        if kind is ToolKind.BUILTIN and slash:
            raise InvalidToolId(f"invalid ToolId {text!r}: builtin takes no '/<source>' part")
        if kind is not ToolKind.BUILTIN and not slash:
            raise InvalidToolId(
                f"invalid ToolId {text!r}: provider {kind.value!r} needs "
                f"'{kind.value}/<{_source_label(kind)}>'"
            )
        return cls(kind, source, name)

    @classmethod
    def builtin(cls, name: str) -> ToolId:
        """The id of a built-in tool, e.g. ``builtin:dice.roll``."""
        return cls(ToolKind.BUILTIN, "", name)

    @classmethod
    def mcp(cls, registration_id: str, name: str) -> ToolId:
        """The id of a tool of the MCP server registered as ``registration_id``."""
        return cls(ToolKind.MCP, registration_id, name)

    @classmethod
    def extension(cls, extension_id: str, name: str) -> ToolId:
        """The id of a tool of an extension (a Python module's or a page's)."""
        return cls(ToolKind.EXTENSION, extension_id, name)

    @property
    def provider(self) -> str:
        """Who provides the tool: ``builtin``, ``mcp/<registration>`` or ``extension/<id>``."""
        return self.kind.value if self.kind is ToolKind.BUILTIN else f"{self.kind}/{self.source}"

    def __str__(self) -> str:
        return self._text


def _source_label(kind: ToolKind) -> str:
    return "registration-id" if kind is ToolKind.MCP else "extensionId"


def _validate(kind: ToolKind, source: str, name: str, text: str) -> None:
    if len(text) > MAX_TOOL_ID_CHARS:
        raise InvalidToolId(f"invalid ToolId: longer than {MAX_TOOL_ID_CHARS} characters")
    if kind is ToolKind.BUILTIN:
        if source:
            raise InvalidToolId(f"invalid ToolId {text!r}: builtin takes no source")
        if not _BUILTIN_NAME.fullmatch(name):
            raise InvalidToolId(
                f"invalid ToolId {text!r}: bad builtin name {name!r} "
                "(lower-case words joined by '.', e.g. workspace.read_file)"
            )
        return
    if not source:
        raise InvalidToolId(f"invalid ToolId {text!r}: empty {_source_label(kind)}")
    if not _SOURCE_ID.fullmatch(source):
        raise InvalidToolId(
            f"invalid ToolId {text!r}: bad {_source_label(kind)} {source!r} "
            "(no whitespace, control characters or ':')"
        )
    if not name:
        raise InvalidToolId(f"invalid ToolId {text!r}: empty tool name")
    if name != name.strip() or _CONTROL.search(name):
        raise InvalidToolId(
            f"invalid ToolId {text!r}: tool name {name!r} has control characters "
            "or surrounding whitespace"
        )
