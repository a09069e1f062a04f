"""Model-facing tool names: each protocol's rule, in one table, and name assignment.

Built-in tools keep fixed names (``builtin:workspace.read_file`` →
``workspace_read_file``). Extension tools use their registered name and MCP
tools ``mcp__<server>__<tool>``; both are normalised to what the protocol
allows. Names are assigned in ToolId order and a collision gets ``__2``,
``__3``…, so the same tool set always yields the same names.
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from tavern_agent.core.descriptors import ToolDescriptor
from tavern_agent.core.ids import ToolId, ToolKind


class ModelProtocol(StrEnum):
    """The wire protocols a snapshot can be built for."""

    OPENAI_CHAT = "openai_chat"
    OPENAI_RESPONSES = "openai_responses"
    ANTHROPIC = "anthropic"
    GEMINI = "gemini"


@dataclass(frozen=True, slots=True)
class NameRule:
    """What one protocol accepts as a function name.

    ``allowed`` and ``first`` are regex character classes (without brackets).
    """

    allowed: str
    first: str
    max_chars: int
    source: str

    @property
    def pattern(self) -> re.Pattern[str]:
        """The compiled pattern a whole name must match (cached per rule)."""
        return _compiled(self)

    def accepts(self, name: str) -> bool:
        """Whether the protocol accepts ``name`` as a function name."""
        return self.pattern.fullmatch(name) is not None


# Each row cites where the rule comes from (the provider's API reference for tool names).
NAME_RULES: dict[ModelProtocol, NameRule] = {
    ModelProtocol.OPENAI_CHAT: NameRule(
        "A-Za-z0-9_-",
        "A-Za-z0-9_-",
        64,
        "openai-python FunctionDefinition.name: a-zA-Z0-9_-, max 64",
    ),
    ModelProtocol.OPENAI_RESPONSES: NameRule(
        "A-Za-z0-9_-", "A-Za-z0-9_-", 64, "API error text: ^[a-zA-Z0-9_-]+$; length as Chat"
    ),
    # The API accepts 128 since mid-2025; claude.ai remote MCP still enforces 64.
    ModelProtocol.ANTHROPIC: NameRule(
        "A-Za-z0-9_-", "A-Za-z0-9_-", 64, "Anthropic docs: ^[a-zA-Z0-9_-]{1,64}$"
    ),
    ModelProtocol.GEMINI: NameRule(
        "A-Za-z0-9_.:-", "A-Za-z_", 64, "python-genai FunctionDeclaration.name, max 64"
    ),
}

# Names models often reach for (TauriTavern's later short aliases, common agent
# tool names) → the built-in they mean. Used only to suggest the right name.
ALIASES: dict[str, str] = {
    "read": "workspace.read_file",
    "cat": "workspace.read_file",
    "write": "workspace.write_file",
    "edit": "workspace.apply_patch",
    "str_replace": "workspace.apply_patch",
    "grep": "workspace.search_files",
    "search": "workspace.search_files",
    "ls": "workspace.list_files",
    "list": "workspace.list_files",
    "glob": "workspace.list_files",
    "bash": "workspace.shell",
    "shell": "workspace.shell",
    "commit": "workspace.commit",
    "finish": "workspace.finish",
    "chat_read": "chat.read_messages",
    "chat_search": "chat.search",
    "roll": "dice.roll",
    "dice": "dice.roll",
}

MCP_SERVER_SEGMENT_CHARS = 20
_HASH_CHARS = 8
_patterns: dict[NameRule, re.Pattern[str]] = {}
_bad_chars: dict[str, re.Pattern[str]] = {}


_first_chars: dict[str, re.Pattern[str]] = {}
_ALNUM = re.compile("[A-Za-z0-9]")


def _compiled(rule: NameRule) -> re.Pattern[str]:
    pattern = _patterns.get(rule)
    if pattern is None:
        pattern = re.compile(f"[{rule.first}][{rule.allowed}]{{0,{rule.max_chars - 1}}}")
        _patterns[rule] = pattern
    return pattern


def _short_hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]


def builtin_model_name(tool_id: ToolId) -> str:
    """The fixed model name of a built-in tool: dots become underscores."""
    return tool_id.name.replace(".", "_")


@functools.lru_cache(maxsize=16_384)
def normalize_segment(text: str, rule: NameRule) -> str:
    """Map ``text`` onto the rule's characters; unreadable text becomes a short hash."""
    if not text.isascii():
        decomposed = unicodedata.normalize("NFKD", text)
        text_ascii = "".join(c for c in decomposed if not unicodedata.combining(c))
    else:
        text_ascii = text
    bad = _bad_chars.get(rule.allowed)
    if bad is None:
        bad = _bad_chars[rule.allowed] = re.compile(f"[^{rule.allowed}]")
    cleaned = bad.sub("_", text_ascii)
    if _ALNUM.search(cleaned) is None:  # (ASCII now: every rule allows only ASCII)
        return "t" + _short_hash(text)
    return cleaned


def base_model_name(descriptor: ToolDescriptor, rule: NameRule) -> str:
    """The name a tool asks for under ``rule``, before collisions are settled."""
    tool_id = descriptor.tool_id
    if tool_id.kind is ToolKind.BUILTIN:
        return builtin_model_name(tool_id)
    tool = normalize_segment(descriptor.name_hint or tool_id.name, rule)
    if tool_id.kind is ToolKind.MCP:
        server = normalize_segment(descriptor.label or tool_id.source, rule)
        name = f"mcp__{server}__{tool}"
        if len(name) > rule.max_chars:
            name = f"mcp__{server[:MCP_SERVER_SEGMENT_CHARS]}__{tool}"
    else:
        name = tool
    return fit_name(name, rule, str(tool_id))


def fit_name(name: str, rule: NameRule, key: str) -> str:
    """``name`` with a first character ``rule`` allows, shortened to its length limit.

    A shortened name ends in ``_`` and a short hash of ``key``, so two long
    names that share a prefix stay apart.
    """
    first = _first_chars.get(rule.first)
    if first is None:
        first = _first_chars[rule.first] = re.compile(f"[{rule.first}]")
    if not first.match(name):
        name = "_" + name
    if len(name) > rule.max_chars:
        name = name[: rule.max_chars - _HASH_CHARS - 1] + "_" + _short_hash(key)
    return name


def assign_model_names(
    descriptors: Iterable[ToolDescriptor], protocol: ModelProtocol
) -> dict[ToolId, str]:
    """Unique, valid model names for ``descriptors`` under ``protocol``.

    Deterministic: the tool whose ToolId sorts first keeps the base name, the
    next gets ``__2`` and so on, whatever order the descriptors come in.
    """
    rule = NAME_RULES[protocol]
    names: dict[ToolId, str] = {}
    taken: set[str] = set()
    for descriptor in sorted(descriptors, key=lambda d: str(d.tool_id)):
        base = base_model_name(descriptor, rule)
        name, n = base, 1
        while name in taken:
            n += 1
            suffix = f"__{n}"
            name = base[: rule.max_chars - len(suffix)] + suffix
        taken.add(name)
        names[descriptor.tool_id] = name
    return names
