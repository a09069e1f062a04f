"""World info activation: which lorebook entries a run's input carries.

This follows SillyTavern's ``checkWorldInfo`` (``public/scripts/world-info.js``).
The rules kept, in the order they apply:

* **Scan text.** An entry scans the newest ``scanDepth`` messages (its own
  ``scanDepth`` or the global one, default 2), newest first, each written
  ``name: mes`` and joined by ``\\n\\x01`` so no key matches across messages.
  After the first pass the recursion buffer (activated entries' content) is
  appended, except for entries with ``excludeRecursion``.
* **Disabled** entries never activate; **constant** entries always do (still
  subject to probability, groups and the budget, as in SillyTavern).
* **Primary keys**: any one matching activates. A key written ``/pattern/flags``
  is a regular expression tested on the raw text (JS flags ``i``, ``s``, ``m``;
  ``g``, ``u``, ``y`` are ignored). Other keys are plain text, lower-cased
  on both sides unless ``caseSensitive``; with ``matchWholeWords`` a one-word
  key must stand between non-word characters (JS ``\\W``, ASCII), while a key
  with spaces is a plain substring, exactly as SillyTavern does it. An entry
  without primary keys only activates when constant.
* **Secondary keys** apply when ``selective`` is set and the list is not
  empty: AND ANY (one matches), NOT ALL (not all match), NOT ANY (none
  matches), AND ALL (all match).
* **Recursion**: when a pass activates entries, their content (unless
  ``preventRecursion``) joins the recursion buffer and another pass runs, up
  to ``max_recursion_steps`` passes (SillyTavern's 0 = unlimited is kept, with
  a hard cap of 100 so a cycle cannot loop forever).
* **Inclusion groups** (``group``, comma-separated), per pass: if a member of
  a group was activated in an earlier pass, the new members drop out; else the
  entry with ``groupOverride`` and the highest ``order`` wins; else one member
  is drawn with ``groupWeight`` (default 100) as its weight.
* **Probability**: with ``useProbability`` and ``probability`` < 100, an entry
  survives when ``rng.random() * 100 <= probability`` (the caller seeds rng).
* **Order and budget**: entries are processed by ``order`` descending (uid
  ascending on ties); content is counted in characters (SillyTavern counts
  tokens) and the first entry that would overflow the budget stops activation,
  as SillyTavern's overflow does. The result is listed in prompt order:
  ``order`` ascending, the way SillyTavern inserts entries.

Not modelled: timed effects (sticky, cooldown, delay), ``delayUntilRecursion``,
min-activations, group scoring, vector matching, character filters and
generation-type triggers.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tavern_agent.chat.formats import AND_ALL, AND_ANY, NOT_ALL, NOT_ANY, WorldBook, WorldEntry

MATCHER = "\x01"
JOINER = "\n" + MATCHER
RECURSION_HARD_CAP = 100
_REGEX_KEY = re.compile(r"^/(.+)/([a-z]*)$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class ActivationSettings:
    """SillyTavern's global world info settings that activation uses."""

    scan_depth: int = 2
    case_sensitive: bool = False
    match_whole_words: bool = False
    include_names: bool = True
    recursive: bool = True
    max_recursion_steps: int = 0  # 0: until nothing new activates
    budget_chars: int | None = None  # None: no budget


@dataclass(frozen=True, slots=True)
class ActivatedEntry:
    """One activated entry as the run's input records it."""

    ref: str
    world: str
    uid: int | None
    label: str
    content: str
    position: str
    order: int
    depth: int
    constant: bool
    trigger: str  # "constant", "key", "recursion" or "host"

    def to_json(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "world": self.world,
            "uid": self.uid,
            "label": self.label,
            "content": self.content,
            "position": self.position,
            "order": self.order,
            "depth": self.depth,
            "constant": self.constant,
            "trigger": self.trigger,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], index: int = 0) -> ActivatedEntry:
        """An entry from our JSON or from a host's list (``world``, ``uid``, ``content``…).

        Without a world and uid the ref is ``worldinfo:activated#<index>``.
        """
        world = str(obj.get("world") or "")
        uid_value = obj.get("uid")
        uid = uid_value if isinstance(uid_value, int) and not isinstance(uid_value, bool) else None
        ref = obj.get("ref")
        if not isinstance(ref, str) or not ref:
            ref = f"worldinfo:{world}#{uid}" if world and uid is not None else None
            ref = ref or f"worldinfo:activated#{index}"
        content = obj.get("content")
        order = obj.get("order")
        depth = obj.get("depth")
        return cls(
            ref=ref,
            world=world,
            uid=uid,
            label=str(obj.get("label") or obj.get("comment") or ref),
            content=content if isinstance(content, str) else "",
            position=str(obj.get("position", "before_char")),
            order=order if isinstance(order, int) else 100,
            depth=depth if isinstance(depth, int) else 4,
            constant=obj.get("constant") is True,
            trigger=str(obj.get("trigger") or "host"),
        )

    @classmethod
    def of(cls, entry: WorldEntry, trigger: str) -> ActivatedEntry:
        return cls(
            ref=f"worldinfo:{entry.world}#{entry.uid}",
            world=entry.world,
            uid=entry.uid,
            label=entry.label,
            content=entry.content,
            position=entry.position_name,
            order=entry.order,
            depth=entry.depth,
            constant=entry.constant,
            trigger=trigger,
        )


@dataclass(frozen=True, slots=True)
class ScanMessage:
    name: str
    mes: str


class _Grams:
    """Character trigram sets of the texts scanned, computed once per text."""

    def __init__(self) -> None:
        self._sets: dict[int, tuple[str, set[str]]] = {}

    def of(self, text: str) -> set[str]:
        found = self._sets.get(id(text))
        if found is None or found[0] is not text:
            grams = {text[i : i + 3] for i in range(len(text) - 2)}
            found = self._sets[id(text)] = (text, grams)
        return found[1]


class _Key:
    """One compiled key: a regex, or plain text with its matching options."""

    __slots__ = ("regex", "text", "word")

    def __init__(self, key: str, case_sensitive: bool, whole_words: bool) -> None:
        self.regex: re.Pattern[str] | None = None
        self.word = False  # regex is the whole-word form of a plain key
        self.text = key if case_sensitive else key.lower()
        found = _REGEX_KEY.match(key)
        if found:
            flags = 0
            for flag in found.group(2):
                flags |= {"i": re.IGNORECASE, "s": re.DOTALL, "m": re.MULTILINE}.get(flag, 0)
            try:
                self.regex = re.compile(found.group(1), flags)
                return
            except re.error:
                self.regex = None  # SillyTavern falls back to a plain key
        if whole_words and len(self.text.split()) <= 1:
            self.regex = re.compile(rf"(?:^|\W)({re.escape(self.text)})(?:$|\W)", re.ASCII)
            self.word = True

    def matches(self, raw: str, folded: str, case_sensitive: bool, grams: _Grams) -> bool:
        if (self.regex is None or self.word) and len(self.text) >= 3:
            # A plain key can only occur if its trigrams do: a cheap, exact pre-check.
            seen = grams.of(raw if case_sensitive else folded)
            t, mid = self.text, len(self.text) // 2
            if t[:3] not in seen or t[-3:] not in seen or t[mid - 1 : mid + 2] not in seen:
                return False
        if self.word and self.regex is not None:
            return self.regex.search(raw if case_sensitive else folded) is not None
        if self.regex is not None:
            return self.regex.search(raw) is not None
        return self.text in (raw if case_sensitive else folded)


class _Compiled:
    __slots__ = ("case_sensitive", "entry", "keys", "scan_depth", "secondary")

    def __init__(self, entry: WorldEntry, settings: ActivationSettings) -> None:
        self.entry = entry
        case = entry.case_sensitive
        self.case_sensitive = settings.case_sensitive if case is None else case
        whole = entry.match_whole_words
        whole = settings.match_whole_words if whole is None else whole
        self.keys = [_Key(k, self.case_sensitive, whole) for k in entry.keys]
        self.secondary = [_Key(k, self.case_sensitive, whole) for k in entry.secondary_keys]
        depth = entry.scan_depth
        self.scan_depth = settings.scan_depth if depth is None else max(depth, 0)

    def matches(self, raw: str, folded: str, grams: _Grams) -> bool:
        case = self.case_sensitive
        if not any(k.matches(raw, folded, case, grams) for k in self.keys):
            return False
        if not (self.entry.selective and self.secondary):
            return True
        hits = [k.matches(raw, folded, case, grams) for k in self.secondary]
        logic = self.entry.selective_logic
        if logic == AND_ANY:
            return any(hits)
        if logic == NOT_ALL:
            return not all(hits)
        if logic == NOT_ANY:
            return not any(hits)
        if logic == AND_ALL:
            return all(hits)
        return False


class _Buffer:
    """The chat text per scan depth (cached) plus the recursion buffer."""

    def __init__(self, messages: Sequence[ScanMessage], include_names: bool) -> None:
        newest_first = list(reversed(messages))
        self._lines = [f"{m.name}: {m.mes}" if include_names else m.mes for m in newest_first]
        self._chat: dict[int, tuple[str, str]] = {}
        self.recursion: list[str] = []
        self._with_recursion: dict[int, tuple[str, str]] = {}

    def chat(self, depth: int) -> tuple[str, str]:
        if depth not in self._chat:
            text = JOINER.join(self._lines[:depth])
            self._chat[depth] = (text, text.lower())
        return self._chat[depth]

    def text(self, depth: int, with_recursion: bool) -> tuple[str, str]:
        if not with_recursion or not self.recursion:
            return self.chat(depth)
        if depth not in self._with_recursion:
            text = self.chat(depth)[0] + JOINER + JOINER.join(self.recursion)
            self._with_recursion[depth] = (text, text.lower())
        return self._with_recursion[depth]

    def add_recursion(self, texts: Iterable[str]) -> None:
        self.recursion.extend(texts)
        self._with_recursion.clear()


def activate(
    books: Iterable[WorldBook],
    messages: Sequence[ScanMessage],
    settings: ActivationSettings | None = None,
    rng: random.Random | None = None,
) -> list[ActivatedEntry]:
    """The entries of ``books`` that the newest ``messages`` activate (rules above)."""
    settings = settings or ActivationSettings()
    rng = rng or random.Random()
    compiled = [
        _Compiled(e, settings) for book in books for e in book.entries.values() if not e.disabled
    ]
    compiled.sort(key=lambda c: (-c.entry.order, c.entry.world, c.entry.uid))
    buffer = _Buffer(messages, settings.include_names)
    grams = _Grams()
    chosen: dict[int, tuple[_Compiled, str]] = {}  # id(compiled) → (entry, trigger)
    group_done: set[str] = set()
    budget_used = 0
    passes = 0
    limit = settings.max_recursion_steps or RECURSION_HARD_CAP
    while True:
        recursing = passes > 0
        found: list[_Compiled] = []
        for c in compiled:
            if id(c) in chosen:
                continue
            if c.entry.constant:
                found.append(c)
                continue
            if recursing and c.entry.exclude_recursion:
                continue
            raw, folded = buffer.text(c.scan_depth, not c.entry.exclude_recursion)
            if c.matches(raw, folded, grams):
                found.append(c)
        found = _inclusion_groups(found, group_done, rng)
        added: list[_Compiled] = []
        overflow = False
        for c in found:
            e = c.entry
            if e.use_probability and e.probability < 100 and rng.random() * 100 > e.probability:
                chosen[id(c)] = (c, "")  # failed its roll: not retried this activation
                continue
            size = len(e.content)
            if settings.budget_chars is not None and budget_used + size > settings.budget_chars:
                overflow = True
                break
            budget_used += size
            trigger = "constant" if e.constant else ("recursion" if recursing else "key")
            chosen[id(c)] = (c, trigger)
            added.append(c)
            group_done.update(e.groups)
        passes += 1
        if overflow or not added or not settings.recursive or passes >= limit + 1:
            break
        new_text = [c.entry.content for c in added if not c.entry.prevent_recursion]
        if not new_text:
            break
        buffer.add_recursion(new_text)
    result = [ActivatedEntry.of(c.entry, t) for c, t in chosen.values() if t]
    result.sort(key=lambda a: (a.order, a.world, a.uid if a.uid is not None else 0))
    return result


def _inclusion_groups(
    found: list[_Compiled], done: set[str], rng: random.Random
) -> list[_Compiled]:
    """Keep one winner per inclusion group (SillyTavern's ``filterByInclusionGroups``)."""
    groups: dict[str, list[_Compiled]] = {}
    for c in found:
        for g in c.entry.groups:
            groups.setdefault(g, []).append(c)
    if not groups:
        return found
    losers: set[int] = set()
    for name, members in groups.items():
        if name in done:
            losers.update(id(c) for c in members)
            continue
        if len(members) < 2:
            continue
        overrides = [c for c in members if c.entry.group_override]
        if overrides:
            winner = max(overrides, key=lambda c: c.entry.order)
        else:
            total = sum(c.entry.group_weight for c in members)
            roll = rng.random() * total
            winner, acc = members[-1], 0
            for c in members:
                acc += c.entry.group_weight
                if roll <= acc:
                    winner = c
                    break
        losers.update(id(c) for c in members if c is not winner)
    return [c for c in found if id(c) not in losers]


__all__ = [
    "AND_ALL",
    "AND_ANY",
    "NOT_ALL",
    "NOT_ANY",
    "ActivatedEntry",
    "ActivationSettings",
    "ScanMessage",
    "activate",
]
