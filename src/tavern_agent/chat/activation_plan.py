"""A world info activation's plan: the books' entries compiled, in processing order.

A plan is made once for the same books while their entries' fields stay the same;
see "Speed" in :mod:`tavern_agent.chat.activation`.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tavern_agent.chat.activation_inputs import (
    EXTRA_TEXTS,
    STRATEGY_CHARACTER_FIRST,
    STRATEGY_GLOBAL_FIRST,
    ActivationSettings,
)
from tavern_agent.chat.key_match import Grams, KeyTable, compile_keys, compiled_key
from tavern_agent.chat.macros import MacroValues
from tavern_agent.chat.world_books import AND_ALL, AND_ANY, NOT_ALL, NOT_ANY, WorldBook, WorldEntry

KNOWN_DECORATORS = ("@@activate", "@@dont_activate")


def _decorators(content: str) -> tuple[list[str], str]:
    """SillyTavern's ``parseDecorators``: leading ``@@`` lines, and the content after them."""
    if not content.startswith("@@"):
        return [], content
    found: list[str] = []
    fallback = False
    lines = content.split("\n")
    for at, line in enumerate(lines):
        if not line.startswith("@@"):
            return found, "\n".join(lines[at:])
        if line.startswith("@@@") and not fallback:
            continue
        name = line[1:] if line.startswith("@@@") else line
        if any(name.startswith(d) for d in KNOWN_DECORATORS):
            found.append(name)
            fallback = False
        else:
            fallback = True
    return found, content


class Compiled:
    """An entry as one activation uses it: keys compiled, content parsed."""

    __slots__ = (
        "at",
        "case_sensitive",
        "content",
        "decorators",
        "entry",
        "extras",
        "keyed",
        "keys",
        "scan_depth",
        "secondary",
    )

    def __init__(self, entry: WorldEntry, settings: ActivationSettings, macros: MacroValues):
        self.entry = entry
        self.at = 0  # place in the processing order
        case = entry.case_sensitive
        self.case_sensitive = settings.case_sensitive if case is None else case
        whole = entry.match_whole_words
        whole = settings.match_whole_words if whole is None else whole
        self.keys = compile_keys(entry.raw.get("key"), macros, self.case_sensitive, whole)
        secondary = compile_keys(entry.raw.get("keysecondary"), macros, self.case_sensitive, whole)
        self.secondary = secondary if entry.selective and secondary else None
        self.scan_depth = entry.scan_depth  # None: the global depth (which min activations grows)
        self.extras = tuple(f for f in EXTRA_TEXTS if entry.matches_extra(f))
        decorators, content = _decorators(entry.content)
        self.decorators = decorators
        self.content = content
        # True when every primary key has trigrams: the entry can only match a text that holds
        # all the trigrams of one of its keys (and nothing else can activate it).
        self.keyed = (
            bool(self.keys)
            and all(k is None or k.grams is not None for k in self.keys or ())
            and not entry.constant
            and not decorators
            and not self.extras
        )

    def primary(self, raw: str, folded: str, grams: Grams) -> bool:
        """Whether one of the primary keys matches the text."""
        case = self.case_sensitive
        return any(k is not None and k.matches(raw, folded, case, grams) for k in self.keys or ())

    def secondary_ok(self, raw: str, folded: str, grams: Grams) -> bool:
        """Whether the secondary keys agree, by the entry's ``selectiveLogic``."""
        if not self.secondary:
            return True
        case = self.case_sensitive
        logic = self.entry.selective_logic
        hits = (k is not None and k.matches(raw, folded, case, grams) for k in self.secondary)
        if logic == AND_ANY:
            return any(hits)
        if logic == NOT_ALL:
            return not all(hits)
        if logic == NOT_ANY:
            return not any(hits)
        if logic == AND_ALL:
            return all(hits)
        return False

    def score(self, raw: str, folded: str, grams: Grams, whole_words: bool) -> int:
        """Group scoring (``getScore``): how many keys match, counted on the keys as written
        (no macros, not trimmed: an empty key counts as found). Secondary keys count
        with ``selectiveLogic`` AND ANY, or AND ALL when all of them match; any other
        value (a missing one too) counts the primary keys only."""
        primary = _count_raw(self.entry.raw.get("key"), raw, folded, grams, self, whole_words)
        if primary is None or primary[1] == 0:
            return 0
        secondary = _count_raw(
            self.entry.raw.get("keysecondary"), raw, folded, grams, self, whole_words
        )
        found, total = secondary if secondary is not None else (0, 0)
        logic = self.entry.raw.get("selectiveLogic")
        if total and logic == AND_ANY and not isinstance(logic, bool):
            return primary[0] + found
        if total and logic == AND_ALL and found == total:
            return primary[0] + found
        return primary[0]


def _count_raw(
    value: Any, raw: str, folded: str, grams: Grams, c: Compiled, whole_words: bool
) -> tuple[int, int] | None:
    """``(matching, all)`` keys of a key list as written; ``None`` when it is no array."""
    if not isinstance(value, list):
        return None
    keys = [compiled_key(str(k), c.case_sensitive, whole_words) for k in value]
    return sum(k.matches(raw, folded, c.case_sensitive, grams) for k in keys), len(keys)


# Fields of an entry that its compiled form and its place in a plan depend on; the others
# (probability, groups, timed effects…) are read from the entry on every activation.
_PLANNED = (
    "uid",
    "key",
    "keysecondary",
    "selective",
    "caseSensitive",
    "matchWholeWords",
    "scanDepth",
    "disable",
    "constant",
    "order",
    "content",
    "delayUntilRecursion",
    *EXTRA_TEXTS,
)


@dataclass(slots=True)
class Plan:
    """The compiled entries of some books and where each pass looks for them."""

    compiled: list[Compiled]  # enabled entries, in processing order
    always: list[int]  # looked at in every pass
    tables: dict[tuple[int | None, bool], KeyTable]  # (own scan depth, case) → keyed entries
    levels: list[int]  # delayUntilRecursion levels, ascending
    timed: list[int]  # entries with sticky or cooldown


# (ids of the books, settings, macros) -> (the books, their stamp, the plan made of them)
Plans = dict[tuple[Any, ...], tuple[Any, Any, Plan]]
PLANS_KEPT = 8


def _stamp(books: Sequence[WorldBook]) -> list[tuple[Any, ...]]:
    """What the plan of ``books`` depends on; compared (not hashed) with a deep copy."""
    return [
        (book.source, entry.world, *map(entry.raw.get, _PLANNED))
        for book in books
        for entry in book.entries.values()
    ]


def _ordered(books: Sequence[WorldBook], strategy: int) -> list[WorldEntry]:
    """All entries in SillyTavern's processing order (``getSortedEntries``)."""

    def by_order(entries: list[WorldEntry]) -> list[WorldEntry]:
        return sorted(entries, key=lambda e: -e.order)  # stable, like Array.prototype.sort

    def of(*sources: str) -> list[WorldEntry]:
        return [e for b in books if b.source in sources for e in b.in_scan_order()]

    lore_global, lore_character = of("global"), of("character")
    if strategy == STRATEGY_CHARACTER_FIRST:
        rest = by_order(lore_character) + by_order(lore_global)
    elif strategy == STRATEGY_GLOBAL_FIRST:
        rest = by_order(lore_global) + by_order(lore_character)
    else:
        rest = by_order(lore_global + lore_character)
    return by_order(of("chat")) + by_order(of("persona")) + rest


def plan_for(
    plans: Plans, books: Sequence[WorldBook], settings: ActivationSettings, macros: MacroValues
) -> Plan:
    """The books' enabled entries compiled, in processing order, with the trigram tables.

    Entries that can only activate through plain keys with trigrams are looked at only
    when the text they scan holds every trigram of one of those keys (the exact
    pre-check of ``Key.matches``, done for all keys at once); the others are looked at
    in every pass. A plan is kept for the same book objects, settings and names while
    the entry fields it was made from stay the same, so a lorebook is compiled once;
    ``plans`` keeps the last ``PLANS_KEPT`` of them.
    """
    cache_key = (tuple(map(id, books)), settings, macros)
    stamp = _stamp(books)
    kept = plans.get(cache_key)
    same_books = kept is not None and all(a is b for a, b in zip(kept[0], books, strict=True))
    if kept is not None and same_books and kept[1] == stamp:
        return kept[2]
    entries = _ordered(books, settings.character_strategy)
    levels = sorted({e.delay_until_recursion for e in entries if e.delay_until_recursion})
    compiled = [Compiled(e, settings, macros) for e in entries if not e.disabled]
    plan = Plan(compiled, [], {}, levels, [])
    for at, c in enumerate(compiled):
        c.at = at
        if c.entry.timed("sticky") or c.entry.timed("cooldown"):
            plan.timed.append(at)
        if not c.keyed:
            plan.always.append(at)
            continue
        plan.tables.setdefault((c.scan_depth, c.case_sensitive), KeyTable()).add(at, c.keys or ())
    plans.pop(cache_key, None)
    while len(plans) >= PLANS_KEPT:
        del plans[next(iter(plans))]
    plans[cache_key] = (tuple(books), copy.deepcopy(stamp), plan)
    return plan
