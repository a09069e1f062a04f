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

Speed (none of it changes which entries activate): a lorebook is compiled once
and the plan kept while its entries' key fields stay the same (``_plan``); a
plain key can only occur where its first, middle and last trigrams do, so a
pass looks only at entries with a key whose trigrams are all in the text
(found for all keys at once through a trigram table), plus constant entries
and those with regex or short keys; regex keys that only look at the
characters they match resume their search near the end of a text they already
failed on, since the recursion buffer only grows by appending.
"""

from __future__ import annotations

import copy
import functools
import importlib
import random
import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
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
    """Per activation: character trigram sets of the texts scanned (once per text), and
    for each regex key the last text it was searched in without a match."""

    def __init__(self) -> None:
        self._sets: dict[int, tuple[str, set[str]]] = {}
        self.misses: dict[int, str] = {}

    def of(self, text: str) -> set[str]:
        found = self._sets.get(id(text))
        if found is None or found[0] is not text:
            start, grams = 0, set()
            for before, known in self._sets.values():  # a text the buffer has grown from
                if len(before) > start and text.startswith(before):
                    start, grams = len(before), known
            grams = grams | {text[i : i + 3] for i in range(max(start - 2, 0), len(text) - 2)}
            found = self._sets[id(text)] = (text, grams)
        return found[1]


_LOCAL_OPS = frozenset(
    {"LITERAL", "NOT_LITERAL", "ANY", "IN", "SUBPATTERN", "BRANCH", "MAX_REPEAT"}
    | {"MIN_REPEAT", "POSSESSIVE_REPEAT", "ATOMIC_GROUP"}
)


def _local(tree: Any) -> bool:
    """No anchors, word boundaries, lookarounds or back references anywhere in the tree."""
    for op, av in tree:
        name = str(op)
        if name not in _LOCAL_OPS:
            return False
        if name == "SUBPATTERN" and not _local(av[3]):
            return False
        if name == "BRANCH" and not all(_local(branch) for branch in av[1]):
            return False
        if name.endswith("_REPEAT") and not _local(av[2]):
            return False
        if name == "ATOMIC_GROUP" and not _local(av):
            return False
    return True


def _reach(pattern: str, flags: int) -> int | None:
    """The longest text a regex can match, if it is bounded and the regex is local.

    A local regex matches at a position or not by the characters it matches alone, so
    once it found nothing in a text, it can only find something in a longer text with
    that prefix in a match ending past the old end: the search can start ``reach - 1``
    characters before it. (The recursion buffer only ever grows that way.)
    """
    try:
        parser: Any = importlib.import_module("re._parser")
        tree = parser.parse(pattern, flags)
        if not _local(tree):
            return None
        high = int(tree.getwidth()[1])
    except Exception:  # another Python's parser: just search whole texts
        return None
    return high if high <= 4096 else None


_ASCII_WORD = frozenset(string.ascii_letters + string.digits + "_")


def _has_word(text: str, key: str) -> bool:
    r"""``re.search(rf"(?:^|\W)({re.escape(key)})(?:$|\W)", text, re.ASCII)``, faster.

    The regex matches where ``key`` occurs with a non-word character or the start of the
    text before it, and a non-word character or the end after it (a final newline is a
    non-word character too, so ``$`` before one adds nothing).
    """
    end = len(key)
    at = text.find(key)
    while at >= 0:
        if (at == 0 or text[at - 1] not in _ASCII_WORD) and (
            at + end == len(text) or text[at + end] not in _ASCII_WORD
        ):
            return True
        at = text.find(key, at + 1)
    return False


class _Key:
    """One compiled key: a regex, or plain text with its matching options."""

    __slots__ = ("grams", "reach", "regex", "text", "word")

    def __init__(self, key: str, case_sensitive: bool, whole_words: bool) -> None:
        self.regex: re.Pattern[str] | None = None
        self.word = False  # a plain key matched as a whole word
        self.text = key if case_sensitive else key.lower()
        self.grams: frozenset[str] | None = None  # trigrams every match holds (plain keys)
        self.reach: int | None = None  # see ``_reach`` (regex keys)
        found = _REGEX_KEY.match(key)
        if found:
            flags = 0
            for flag in found.group(2):
                flags |= {"i": re.IGNORECASE, "s": re.DOTALL, "m": re.MULTILINE}.get(flag, 0)
            try:
                self.regex = re.compile(found.group(1), flags)
                self.reach = _reach(found.group(1), flags)
                return
            except re.error:
                self.regex = None  # SillyTavern falls back to a plain key
        if whole_words and len(self.text.split()) <= 1:
            self.word = True  # SillyTavern's /(?:^|\W)(key)(?:$|\W)/: see ``_has_word``
        if len(self.text) >= 3:
            t, mid = self.text, len(self.text) // 2
            self.grams = frozenset((t[:3], t[mid - 1 : mid + 2], t[-3:]))

    def matches(self, raw: str, folded: str, case_sensitive: bool, grams: _Grams) -> bool:
        # A plain key can only occur if its trigrams do: a cheap, exact pre-check.
        if self.grams is not None and not self.grams <= grams.of(raw if case_sensitive else folded):
            return False
        if self.word:
            return _has_word(raw if case_sensitive else folded, self.text)
        if self.regex is not None:
            start = 0
            missed = grams.misses.get(id(self))
            if self.reach is not None and missed is not None and raw.startswith(missed):
                start = max(len(missed) - self.reach + 1, 0)
            if self.regex.search(raw, start) is not None:
                return True
            grams.misses[id(self)] = raw
            return False
        return self.text in (raw if case_sensitive else folded)


@functools.lru_cache(maxsize=1 << 16)
def _key(key: str, case_sensitive: bool, whole_words: bool) -> _Key:
    """Compiled keys are shared between entries and calls (a key never changes)."""
    return _Key(key, case_sensitive, whole_words)


class _Compiled:
    __slots__ = ("case_sensitive", "entry", "keyed", "keys", "scan_depth", "secondary")

    def __init__(self, entry: WorldEntry, settings: ActivationSettings) -> None:
        self.entry = entry
        case = entry.case_sensitive
        self.case_sensitive = settings.case_sensitive if case is None else case
        whole = entry.match_whole_words
        whole = settings.match_whole_words if whole is None else whole
        keys = [_key(k, self.case_sensitive, whole) for k in entry.keys]
        # Keys with trigrams first: they are cheap to rule out, and ``any`` is order-free.
        self.keys = sorted(keys, key=lambda k: k.grams is None)
        self.secondary = [_key(k, self.case_sensitive, whole) for k in entry.secondary_keys]
        # True when every primary key has trigrams: the entry can only match a text that holds
        # all the trigrams of one of its keys.
        self.keyed = all(k.grams is not None for k in keys)
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


class _Table:
    """Trigram → the keys holding it, for the entries that scan one text."""

    def __init__(self) -> None:
        self.slots: dict[str, list[int]] = {}
        self.need: list[int] = []  # per key: how many trigrams it has
        self.owner: list[int] = []  # per key: its entry's place in the sorted list

    def add(self, at: int, compiled: _Compiled) -> None:
        for key in compiled.keys:
            assert key.grams is not None
            slot = len(self.need)
            self.need.append(len(key.grams))
            self.owner.append(at)
            for gram in key.grams:
                self.slots.setdefault(gram, []).append(slot)

    def candidates(self, seen: set[str], state: _TableState) -> set[int]:
        """The entries with a key all of whose trigrams are in ``seen``.

        ``state`` holds the answer for an earlier, smaller trigram set (the recursion
        buffer only grows), so only trigrams new since then are looked up.
        """
        if not state.grams <= seen:
            state.grams, state.counts, state.found = set(), Counter(), set()
        present = (seen - state.grams).intersection(self.slots)
        state.grams = seen
        hits = Counter(chain.from_iterable(map(self.slots.__getitem__, present)))
        need, owner, counts = self.need, self.owner, state.counts
        for slot, count in hits.items():
            counts[slot] += count
            if counts[slot] == need[slot]:
                state.found.add(owner[slot])
        return state.found


class _TableState:
    """One activation's progress through a ``_Table``."""

    def __init__(self) -> None:
        self.grams: set[str] = set()
        self.counts: Counter[int] = Counter()
        self.found: set[int] = set()


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


# Fields of an entry that its compiled form and its place in a plan depend on; the others
# (content, probability, groups…) are read from the entry on every activation.
_PLANNED = (
    "uid",
    "key",
    "keysecondary",
    "caseSensitive",
    "matchWholeWords",
    "scanDepth",
    "disable",
    "constant",
    "excludeRecursion",
    "order",
)
_Plan = tuple[list[_Compiled], list[int], dict[tuple[int, bool, bool], _Table]]
_PLANS: dict[tuple[tuple[int, ...], ActivationSettings], tuple[Any, Any, _Plan]] = {}
_PLANS_KEPT = 8


def _stamp(books: Sequence[WorldBook]) -> list[tuple[Any, ...]]:
    """What the plan of ``books`` depends on; compared (not hashed) with a deep copy."""
    return [
        (entry.world, *map(entry.raw.get, _PLANNED))
        for book in books
        for entry in book.entries.values()
    ]


def _plan(books: Sequence[WorldBook], settings: ActivationSettings) -> _Plan:
    """The books' enabled entries compiled, in processing order, with the trigram tables.

    Entries whose primary keys all have trigrams are looked at only when the text they
    scan holds every trigram of one of those keys (the exact pre-check of ``_Key.matches``,
    done for all keys at once); the others (constant entries, regex or short keys) are
    looked at in every pass. A plan is kept for the same book objects and settings while
    the entry fields it was made from stay the same, so a lorebook is compiled once.
    """
    cache_key = (tuple(map(id, books)), settings)
    stamp = _stamp(books)
    kept = _PLANS.get(cache_key)
    same_books = kept is not None and all(a is b for a, b in zip(kept[0], books, strict=True))
    if kept is not None and same_books and kept[1] == stamp:
        return kept[2]
    compiled = [
        _Compiled(e, settings) for book in books for e in book.entries.values() if not e.disabled
    ]
    compiled.sort(key=lambda c: (-c.entry.order, c.entry.world, c.entry.uid))
    always: list[int] = []
    by_text: dict[tuple[int, bool, bool], _Table] = {}
    for at, c in enumerate(compiled):
        if c.entry.constant or not c.keyed:
            always.append(at)
            continue
        where = (c.scan_depth, not c.entry.exclude_recursion, c.case_sensitive)
        by_text.setdefault(where, _Table()).add(at, c)
    plan = (compiled, always, by_text)
    _PLANS.pop(cache_key, None)
    while len(_PLANS) >= _PLANS_KEPT:
        del _PLANS[next(iter(_PLANS))]
    _PLANS[cache_key] = (tuple(books), copy.deepcopy(stamp), plan)
    return plan


def activate(
    books: Iterable[WorldBook],
    messages: Sequence[ScanMessage],
    settings: ActivationSettings | None = None,
    rng: random.Random | None = None,
) -> list[ActivatedEntry]:
    """The entries of ``books`` that the newest ``messages`` activate (rules above)."""
    settings = settings or ActivationSettings()
    rng = rng or random.Random()
    compiled, always, by_text = _plan(list(books), settings)
    buffer = _Buffer(messages, settings.include_names)
    grams = _Grams()
    states: dict[int, _TableState] = {}
    chosen: dict[int, tuple[_Compiled, str]] = {}  # id(compiled) → (entry, trigger)
    group_done: set[str] = set()
    budget_used = 0
    passes = 0
    limit = settings.max_recursion_steps or RECURSION_HARD_CAP
    while True:
        recursing = passes > 0
        todo = set(always)
        for (depth, with_recursion, case), table in by_text.items():
            if recursing and not with_recursion:
                continue  # excludeRecursion entries only take part in the first pass
            raw, folded = buffer.text(depth, with_recursion)
            state = states.setdefault(id(table), _TableState())
            todo.update(table.candidates(grams.of(raw if case else folded), state))
        found: list[_Compiled] = []
        for at in sorted(todo):
            c = compiled[at]
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
