"""Matching one world info key, and the indexes that let a scan pass skip entries.

A key is compiled once (:func:`compiled_key`): a JavaScript regex
(:mod:`tavern_agent.chat.js_regex`), or plain text matched as a substring or,
with whole words, between non-word characters as SillyTavern's
``/(?:^|\\W)(key)(?:$|\\W)/`` does. None of the speed-ups here changes what
matches:

* a plain key can only occur where its first, middle and last trigrams do,
  so a text's trigram set (:class:`Grams`) rules most keys out at once, and a
  :class:`KeyTable` finds, for all keys together, those whose trigrams are all
  present;
* a regex key that only looks at the characters it matches (:func:`reach`)
  resumes its search near the end of a text it already failed on, since the
  recursion buffer only grows by appending.
"""

from __future__ import annotations

import functools
import importlib
import logging
import re
import string
from collections import Counter
from collections.abc import Sequence
from itertools import chain
from typing import Any

from tavern_agent.chat.js_regex import JsRegex, Untranslatable, compile_key
from tavern_agent.chat.macros import MacroValues, substitute

log = logging.getLogger(__name__)
JS_SPACE = re.compile(  # JavaScript's \s
    "[\t\n\x0b\x0c\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]+"
)


class Grams:
    """Per activation: character trigram sets of the texts scanned (once per text), and
    for each regex key the last text it was searched in without a match."""

    def __init__(self) -> None:
        self._sets: dict[int, tuple[str, set[str]]] = {}
        self.misses: dict[int, str] = {}

    def of(self, text: str) -> set[str]:
        """The character trigrams of ``text``, computed once per text (and
        only the new part of a text that grew from one already seen)."""
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


def reach(pattern: str, flags: int) -> int | None:
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


def has_word(text: str, key: str) -> bool:
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


class Key:
    """One compiled key (macros substituted, trimmed): a regex, or plain text with options."""

    __slots__ = ("always", "grams", "never", "reach", "regex", "text", "word")

    def __init__(self, key: str, case_sensitive: bool, whole_words: bool) -> None:
        self.regex: JsRegex | None = None
        self.always = key == ""  # a blank key: ``includes("")`` is always true
        self.never = False
        self.word = False  # a plain key matched as a whole word
        self.text = key if case_sensitive else key.lower()
        self.grams: frozenset[str] | None = None  # trigrams every match holds (plain keys)
        self.reach: int | None = None  # see ``reach`` (regex keys)
        try:
            self.regex = compile_key(key)
        except Untranslatable as exc:  # valid in JavaScript, not expressible here
            log.warning("world info key %r cannot be evaluated: %s", key, exc)
            self.never = True
            return
        if self.regex is not None:
            if not self.regex.sticky:
                self.reach = reach(self.regex.regex.pattern, self.regex.regex.flags)
            return
        if whole_words and len(JS_SPACE.split(self.text)) <= 1:
            self.word = True  # SillyTavern's /(?:^|\W)(key)(?:$|\W)/: see ``has_word``
        if len(self.text) >= 3:
            t, mid = self.text, len(self.text) // 2
            self.grams = frozenset((t[:3], t[mid - 1 : mid + 2], t[-3:]))

    def matches(self, raw: str, folded: str, case_sensitive: bool, grams: Grams) -> bool:
        """Whether the key occurs in a scanned text (``raw``, or ``folded``
        to lower case), with a trigram pre-check before the real match."""
        if self.always or self.never:
            return self.always
        # A plain key can only occur if its trigrams do: a cheap, exact pre-check.
        if self.grams is not None and not self.grams <= grams.of(raw if case_sensitive else folded):
            return False
        if self.word:
            return has_word(raw if case_sensitive else folded, self.text)
        if self.regex is not None:
            if self.regex.sticky:
                return self.regex.test(raw)
            start = 0
            missed = grams.misses.get(id(self))
            if self.reach is not None and missed is not None and raw.startswith(missed):
                start = max(len(missed) - self.reach + 1, 0)
            if self.regex.regex.search(raw, start) is not None:
                return True
            grams.misses[id(self)] = raw
            return False
        return self.text in (raw if case_sensitive else folded)


@functools.lru_cache(maxsize=1 << 16)
def compiled_key(key: str, case_sensitive: bool, whole_words: bool) -> Key:
    """Compiled keys are shared between entries and calls (a key never changes)."""
    return Key(key, case_sensitive, whole_words)


def compile_keys(
    value: Any, macros: MacroValues, case_sensitive: bool, whole_words: bool
) -> list[Key | None] | None:
    """A key list: ``None`` when it is no array; ``None`` items never match (empty keys)."""
    if not isinstance(value, list):
        return None
    keys: list[Key | None] = []
    for raw in value:
        text = "" if raw is None or isinstance(raw, bool | dict | list) else str(raw)
        substituted = substitute(text, macros)
        if not substituted:
            keys.append(None)  # an empty key never matches
        else:
            keys.append(compiled_key(substituted.strip(), case_sensitive, whole_words))
    return keys


class KeyTable:
    """Trigram → the keys holding it, for the entries that scan one text."""

    def __init__(self) -> None:
        self.slots: dict[str, list[int]] = {}
        self.need: list[int] = []  # per key: how many trigrams it has
        self.owner: list[int] = []  # per key: its entry's place in the sorted list

    def add(self, at: int, keys: Sequence[Key | None]) -> None:
        """The keys of the entry at place ``at`` (``None``: an empty key, never matching)."""
        for key in keys:
            if key is None:
                continue  # an empty key matches nothing
            assert key.grams is not None
            slot = len(self.need)
            self.need.append(len(key.grams))
            self.owner.append(at)
            for gram in key.grams:
                self.slots.setdefault(gram, []).append(slot)

    def candidates(self, seen: set[str], state: TableState) -> set[int]:
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


class TableState:
    """One activation's progress through a ``KeyTable``."""

    def __init__(self) -> None:
        self.grams: set[str] = set()
        self.counts: Counter[int] = Counter()
        self.found: set[int] = set()
