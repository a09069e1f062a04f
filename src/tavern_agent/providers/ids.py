"""Call ids each protocol accepts in history, and a stable, reversible map to them.

A transcript keeps every call id exactly as its provider sent it. Replaying to
another protocol may need a different spelling: OpenAI Chat rejects ids over
40 characters, Anthropic anything outside ``[a-zA-Z0-9_-]`` (both say so in
their API references). :class:`CallIdMap` rewrites only those,
deterministically (a readable prefix plus a hash of the original), so the same
history always encodes to the same ids and provider prompt caches stay valid.
Every wire id maps back to the call it stands for.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from tavern_agent.core.naming import ModelProtocol


@dataclass(frozen=True, slots=True)
class IdRule:
    """What one protocol accepts as a call id: a character class and a length cap."""

    allowed: str | None  # regex character class without brackets; None: any character
    max_chars: int | None
    source: str

    def accepts(self, call_id: str) -> bool:
        """Whether the protocol accepts ``call_id`` as it is."""
        if not call_id or (self.max_chars is not None and len(call_id) > self.max_chars):
            return False
        return self.allowed is None or _full(self.allowed).fullmatch(call_id) is not None


ID_RULES: dict[ModelProtocol, IdRule] = {
    ModelProtocol.OPENAI_CHAT: IdRule(
        None, 40, "API error: string_above_max_length, maximum length 40 (tool_call_id)"
    ),
    ModelProtocol.OPENAI_RESPONSES: IdRule(None, None, "call_id: any non-empty string"),
    ModelProtocol.ANTHROPIC: IdRule(
        "A-Za-z0-9_-", None, "API error: tool_use.id should match ^[a-zA-Z0-9_-]+$"
    ),
    ModelProtocol.GEMINI: IdRule(None, None, "FunctionCall.id: optional string"),
}

_HASH_CHARS = 10
_UNSAFE = re.compile("[^A-Za-z0-9_-]")
_compiled: dict[str, re.Pattern[str]] = {}


def _full(allowed: str) -> re.Pattern[str]:
    pattern = _compiled.get(allowed)
    if pattern is None:
        pattern = _compiled[allowed] = re.compile(f"[{allowed}]+")
    return pattern


def _hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]


def rewrite_id(call_id: str, rule: IdRule) -> str:
    """A valid id for ``rule`` derived from ``call_id``: safe prefix + hash of the original."""
    cleaned = _UNSAFE.sub("_", call_id).strip("_")
    limit = rule.max_chars if rule.max_chars is not None else 64
    room = limit - _HASH_CHARS - 1
    prefix = cleaned[:room] if cleaned else "call"
    return f"{prefix}_{_hash(call_id)}"


@dataclass
class CallIdMap:
    """Wire ids for one encoding of a transcript under one protocol.

    Ask in transcript order: :meth:`wire` hands out an id for each call
    (a repeated original id gets a distinct wire id), and :meth:`original`
    maps a wire id back. The result depends only on the ids seen so far, so a
    longer history never changes the ids of its beginning.
    """

    protocol: ModelProtocol
    _to_wire: dict[tuple[str, int], str] = field(default_factory=dict)
    _from_wire: dict[str, tuple[str, int]] = field(default_factory=dict)
    _seen: dict[str, int] = field(default_factory=dict)

    @property
    def rule(self) -> IdRule:
        """The call id rule of this map's protocol."""
        return ID_RULES[self.protocol]

    def wire(self, call_id: str) -> str:
        """The wire id for the next call carrying ``call_id``."""
        occurrence = self._seen.get(call_id, 0)
        self._seen[call_id] = occurrence + 1
        rule = self.rule
        candidate = call_id if rule.accepts(call_id) else rewrite_id(call_id, rule)
        n = 1
        base = candidate
        while candidate in self._from_wire:
            n += 1
            suffix = f"_{n}"
            if rule.accepts(base + suffix):
                candidate = base + suffix
            else:
                candidate = rewrite_id(f"{call_id}#{occurrence}#{n}", rule)
        self._to_wire[(call_id, occurrence)] = candidate
        self._from_wire[candidate] = (call_id, occurrence)
        return candidate

    def copy(self) -> CallIdMap:
        """An independent map that has seen the same ids (to go on from here twice)."""
        to_wire, from_wire, seen = dict(self._to_wire), dict(self._from_wire), dict(self._seen)
        return CallIdMap(self.protocol, to_wire, from_wire, seen)

    def original(self, wire_id: str) -> str | None:
        """The transcript call id a wire id stands for, if this map issued it."""
        found = self._from_wire.get(wire_id)
        return None if found is None else found[0]

    def lookup(self, call_id: str, occurrence: int = 0) -> str | None:
        """The wire id already issued for the ``occurrence``-th call with ``call_id``."""
        return self._to_wire.get((call_id, occurrence))

    def items(self) -> dict[str, str]:
        """Wire id → original id, for the record."""
        return {w: o for w, (o, _) in self._from_wire.items()}
