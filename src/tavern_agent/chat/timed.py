"""World info timed effects (sticky, cooldown, delay) as SillyTavern keeps them.

SillyTavern stores running effects in the chat's ``chat_metadata.timedWorldInfo``
as ``{"sticky": {key: effect}, "cooldown": {key: effect}}`` with
``effect = {hash, start, end, protected}``; ``start`` and ``end`` count chat
messages. It finds an effect's entry by ``hash``: a 53-bit string hash
(``getStringHash``, the cyrb53 function) of ``JSON.stringify`` of the entry as
loaded: ``uid`` and ``world`` first, then the entry's other fields in file
order, then ``decorators``, with the content stripped of its decorator lines.

When a scan starts (``WorldInfoTimedEffects.checkTimedEffects``), for each
stored effect: one whose ``start`` the chat has not passed (and that is not
``protected``) is void; one whose entry is missing or no longer has that effect
is ignored; one whose ``end`` the chat reached has ended (an ended ``sticky``
starts the entry's ``cooldown`` at once); the others are active. ``delay`` is
not stored: an entry with ``delay: N`` is delayed while the chat has fewer
than N messages. This module only reads the stored effects; SillyTavern
records new ones when it generates.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_MASK = 0xFFFFFFFF


def _imul(a: int, b: int) -> int:
    return (a * b) & _MASK


def string_hash(text: str, seed: int = 0) -> int:
    """SillyTavern's ``getStringHash`` (cyrb53) over the UTF-16 code units of ``text``."""
    h1 = (0xDEADBEEF ^ seed) & _MASK
    h2 = (0x41C6CE57 ^ seed) & _MASK
    units = text.encode("utf-16-le", "surrogatepass")
    for at in range(0, len(units), 2):
        ch = units[at] | (units[at + 1] << 8)
        h1 = _imul(h1 ^ ch, 2654435761)
        h2 = _imul(h2 ^ ch, 1597334677)
    h1 = _imul(h1 ^ (h1 >> 16), 2246822507) ^ _imul(h2 ^ (h2 >> 13), 3266489909)
    h2 = _imul(h2 ^ (h2 >> 16), 2246822507) ^ _imul(h1 ^ (h1 >> 13), 3266489909)
    return 4294967296 * (0x1FFFFF & h2) + (h1 & _MASK)


def _js_numbers(value: Any) -> Any:
    """Floats with integral values as ints, so ``json.dumps`` prints them like JavaScript."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _js_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_js_numbers(v) for v in value]
    return value


def entry_hash(raw: Mapping[str, Any], world: str, decorators: list[str], content: str) -> int:
    """The hash SillyTavern gives a loaded entry (see the module docstring)."""
    obj: dict[str, Any] = {"uid": raw.get("uid"), "world": world}
    obj.update((k, v) for k, v in raw.items() if k != "uid")
    # {...entry, decorators, content}: content keeps its place, decorators go last
    # (after them comes content only when the entry had none).
    if "content" in obj:
        obj["content"] = content
        obj["decorators"] = decorators
    else:
        obj["decorators"] = decorators
        obj["content"] = content
    text = json.dumps(_js_numbers(obj), ensure_ascii=False, separators=(",", ":"))
    return string_hash(text)


@dataclass(slots=True)
class TimedState:
    """Which entries (by hash) are sticky or on cooldown at a scan."""

    sticky: set[int] = field(default_factory=set)
    cooldown: set[int] = field(default_factory=set)


def active_effects(
    stored: Any, chat_length: int, entries: Mapping[int, Mapping[str, Any]]
) -> TimedState:
    """The effects of ``chat_metadata.timedWorldInfo`` active now.

    ``entries`` maps each loaded entry's hash to its raw fields.
    """
    state = TimedState()
    if not isinstance(stored, Mapping):
        return state
    for kind in ("sticky", "cooldown"):
        effects = stored.get(kind)
        if not isinstance(effects, Mapping):
            continue
        for effect in effects.values():
            if not isinstance(effect, Mapping):
                continue
            found = _effect_entry(effect, kind, chat_length, entries)
            if found is None:
                continue
            digest, ended = found
            if not ended:
                (state.sticky if kind == "sticky" else state.cooldown).add(digest)
            elif kind == "sticky" and entries[digest].get("cooldown"):
                state.cooldown.add(digest)  # a sticky that ends starts the cooldown
    return state


def _effect_entry(
    effect: Mapping[str, Any], kind: str, chat_length: int, entries: Mapping[int, Mapping[str, Any]]
) -> tuple[int, bool] | None:
    """``(hash, ended)`` of an effect that still applies to a loaded entry, else ``None``."""
    try:
        start, end = float(effect.get("start", 0)), float(effect.get("end", 0))
        digest = int(str(effect.get("hash")))
    except (TypeError, ValueError):
        return None
    if chat_length <= start and not effect.get("protected"):
        return None  # the chat has not moved on since (a swipe or a regeneration)
    raw = entries.get(digest)
    if raw is None or not raw.get(kind):
        return None
    return digest, chat_length >= end
