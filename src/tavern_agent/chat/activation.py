"""World info activation: which lorebook entries a run's input carries.

This follows SillyTavern's ``checkWorldInfo`` (``public/scripts/world-info.js``);
``tests/chat/test_activation_rules.py`` holds a table of cases, each citing
the rule it checks. In short:

* **Books and order.** Entries are walked in SillyTavern's order: the chat's
  bound lorebook first, then the persona's, then the character's and the
  global ones (``character_strategy``: evenly, character first or global
  first), each part sorted by ``order``, highest first.
* **Scan text.** An entry scans the newest ``scanDepth`` messages (its own or
  the global one), newest first, each ``name: mes`` (with ``include_names``),
  every one preceded by ``\\x01`` and joined by ``\\n``, so ``/^…/`` never sees
  a message's first character and no key matches across messages. Entries
  with ``matchCharacterDescription`` and its siblings scan those texts too.
  ``scanDepth: 0`` scans nothing. After the first pass the recursion buffer
  (activated entries' content) is scanned too.
* **Skipped**, in this order: disabled entries; entries whose
  ``characterFilter`` excludes the character (by card file name or tag);
  entries under ``delay`` (the chat has fewer messages) or on cooldown
  (unless sticky); ``delayUntilRecursion`` entries outside a recursion pass
  of their level; ``excludeRecursion`` entries in recursion passes.
* **Activated at once**: an ``@@activate`` first line, ``constant``, or an
  active ``sticky`` effect (from ``chat_metadata.timedWorldInfo``);
  ``@@dont_activate`` never activates by keys.
* **Keys** (``key`` must be an array): macros (``{{char}}``, ``{{user}}``…)
  are substituted and the key trimmed; a key that is empty then never
  matches, a whitespace-only key always does. ``/pattern/flags`` keys are
  JavaScript regexes (:mod:`tavern_agent.chat.js_regex`) tested on the raw
  text; other keys are plain text, lower-cased unless ``caseSensitive``, and
  with ``matchWholeWords`` a one-word key must stand between non-word
  characters (JavaScript's ASCII ``\\W``).
* **Secondary keys** only with ``selective`` set and a non-empty list: AND
  ANY, NOT ALL, NOT ANY, AND ALL.
* **Inclusion groups** (``group``, split at ``,\\s*``): sticky members win;
  with group scoring only the members matching the most keys stay; a group
  whose name equals the ``group`` of an entry activated earlier takes none;
  else the highest-``order`` ``groupOverride`` member wins, else a draw
  weighted by ``groupWeight``. SillyTavern removes losers from the pass's
  list with ``splice(indexOf(e), 1)``, which drops the *last* candidate when
  ``e`` was already removed by another group; that is kept.
* **Probability**: only with ``useProbability`` and ``probability`` not 100
  (a missing ``probability`` always fails); sticky entries do not roll.
* **Budget**: ``budget_percent`` of ``max_context`` tokens, at most
  ``budget_cap``; tokens are estimated as characters / 3.35 (SillyTavern's
  estimate without a tokenizer). The first entry that reaches the budget
  stops activation.
* **Recursion** runs while a pass adds entries (without
  ``preventRecursion``), then once per waiting ``delayUntilRecursion``
  level; ``max_recursion_steps`` caps the passes (1: no recursion; 0: no
  cap). **Minimum activations**: while fewer entries are active, the scan
  depth grows by one message per pass (up to ``min_activations_depth_max``
  or the chat's length), without the recursion buffer.
* The result is in prompt order: ``order`` ascending.

Not modelled: vector matching, generation-type triggers, extension prompts
(Author's Note) in the scan text, and writing new timed effects back.

Speed (none of it changes which entries activate): a lorebook is compiled once
and the plan kept while its entries' fields stay the same (``_plan``); a pass
looks only at entries with a key whose trigrams are all in the text (a
:class:`~tavern_agent.chat.key_match.KeyTable`), plus the entries that can
activate another way (constant, decorated, sticky, regex, short or blank
keys, extra scan texts). :mod:`tavern_agent.chat.key_match` matches the keys.
"""

from __future__ import annotations

import copy
import logging
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tavern_agent.chat.formats import well_formed
from tavern_agent.chat.key_match import Grams, KeyTable, TableState, compile_keys, compiled_key
from tavern_agent.chat.macros import MacroValues, substitute
from tavern_agent.chat.timed import TimedState, active_effects, entry_hash
from tavern_agent.chat.world_books import (
    AND_ALL,
    AND_ANY,
    NOT_ALL,
    NOT_ANY,
    WorldBook,
    WorldEntry,
    js_key_order,
    truthy,
)

log = logging.getLogger(__name__)

MATCHER = "\x01"
JOINER = "\n" + MATCHER
MAX_SCAN_DEPTH = 1000
CHARS_PER_TOKEN = 3.35
RECURSION_HARD_CAP = 100  # passes, when max_recursion_steps is 0 (a cycle must end)
KNOWN_DECORATORS = ("@@activate", "@@dont_activate")

# Entry flags that add a text to what the entry scans, and the ScanContext text each adds.
EXTRA_TEXTS = (
    "matchPersonaDescription",
    "matchCharacterDescription",
    "matchCharacterPersonality",
    "matchCharacterDepthPrompt",
    "matchScenario",
    "matchCreatorNotes",
)
INITIAL, RECURSION, MIN_ACTIVATIONS = 1, 2, 3
STRATEGY_EVENLY, STRATEGY_CHARACTER_FIRST, STRATEGY_GLOBAL_FIRST = 0, 1, 2


@dataclass(frozen=True, slots=True)
class ActivationSettings:
    """SillyTavern's global world info settings (``world_info_*`` in ``settings.json``)."""

    scan_depth: int = 2
    case_sensitive: bool = False
    match_whole_words: bool = False
    include_names: bool = True
    recursive: bool = True
    max_recursion_steps: int = 0  # 0: until nothing new activates
    min_activations: int = 0
    min_activations_depth_max: int = 0
    budget_percent: float = 25
    budget_cap: int = 0  # tokens; 0: no cap
    max_context: int | None = None  # the model's context in tokens; None: no budget
    use_group_scoring: bool = False
    character_strategy: int = STRATEGY_CHARACTER_FIRST

    def budget(self) -> float:
        """The budget in tokens (infinite without ``max_context``)."""
        if self.max_context is None:
            return math.inf
        budget = round(self.budget_percent * self.max_context / 100) or 1
        return self.budget_cap if 0 < self.budget_cap < budget else budget


@dataclass(frozen=True, slots=True)
class ScanContext:
    """What one activation knows about the chat beyond its messages.

    ``character_file`` is the card's file name without ``.png`` (what
    ``characterFilter.names`` lists); ``character_tags`` the tag ids the
    character has (``None``: unknown, tag filters do not apply). ``texts``
    maps an ``EXTRA_TEXTS`` flag to its text (the card's description…).
    ``timed`` is the chat's ``chat_metadata.timedWorldInfo``.
    """

    macros: MacroValues = field(default_factory=MacroValues)
    character_file: str = ""
    character_tags: frozenset[str] | None = None
    texts: Mapping[str, str] = field(default_factory=dict)
    timed: Any = None


def estimate_tokens(text: str) -> int:
    """SillyTavern's token estimate without a tokenizer: characters / 3.35, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


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
    trigger: str  # "constant", "key", "recursion", "sticky", "decorator" or "host"

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
    def of(cls, entry: WorldEntry, trigger: str, content: str | None = None) -> ActivatedEntry:
        """``content``: the text as it goes to the model (macros substituted)."""
        return cls(
            ref=f"worldinfo:{entry.world}#{entry.uid}",
            world=entry.world,
            uid=entry.uid,
            label=entry.label,
            content=well_formed(entry.content if content is None else content),
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


class _Compiled:
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
        case = self.case_sensitive
        return any(k is not None and k.matches(raw, folded, case, grams) for k in self.keys or ())

    def secondary_ok(self, raw: str, folded: str, grams: Grams) -> bool:
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
    value: Any, raw: str, folded: str, grams: Grams, c: _Compiled, whole_words: bool
) -> tuple[int, int] | None:
    """``(matching, all)`` keys of a key list as written; ``None`` when it is no array."""
    if not isinstance(value, list):
        return None
    keys = [compiled_key(str(k), c.case_sensitive, whole_words) for k in value]
    return sum(k.matches(raw, folded, c.case_sensitive, grams) for k in keys), len(keys)


class _Buffer:
    """SillyTavern's ``WorldInfoBuffer``: the chat lines, extra texts and recursion buffer."""

    def __init__(
        self,
        messages: Sequence[ScanMessage],
        settings: ActivationSettings,
        texts: Mapping[str, str],
    ) -> None:
        newest_first = list(reversed(messages))[:MAX_SCAN_DEPTH]
        named = settings.include_names
        self._lines = [(f"{m.name}: {m.mes}" if named else m.mes).strip() for m in newest_first]
        self._texts = texts
        self.depth = settings.scan_depth
        self.recurse: list[str] = []
        self._cache: dict[tuple[int, tuple[str, ...], bool], tuple[str, str]] = {}

    def text(self, depth: int | None, extras: tuple[str, ...], state: int) -> tuple[str, str]:
        """``(raw, lower-cased)`` text an entry with this depth and extra texts scans."""
        depth = self.depth if depth is None else depth
        recursion = bool(self.recurse) and state != MIN_ACTIVATIONS
        key = (depth, extras, recursion)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._build(depth, extras, recursion)
        return found

    def _build(self, depth: int, extras: tuple[str, ...], recursion: bool) -> tuple[str, str]:
        if depth <= 0:
            return "", ""
        parts = [MATCHER + JOINER.join(self._lines[: min(depth, MAX_SCAN_DEPTH)])]
        parts.extend(self._texts[f] for f in extras if self._texts.get(f))
        if recursion:
            parts.extend(self.recurse)
        text = JOINER.join(parts)
        return text, text.lower()

    def add_recursion(self, text: str) -> None:
        self.recurse.append(text)
        self._cache = {k: v for k, v in self._cache.items() if not k[2]}

    def advance(self) -> None:
        """One more message for the global depth (minimum activations)."""
        self.depth += 1


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
class _Plan:
    compiled: list[_Compiled]  # enabled entries, in processing order
    always: list[int]  # looked at in every pass
    tables: dict[tuple[int | None, bool], KeyTable]  # (own scan depth, case) → keyed entries
    levels: list[int]  # delayUntilRecursion levels, ascending
    timed: list[int]  # entries with sticky or cooldown


_PLANS: dict[tuple[Any, ...], tuple[Any, Any, _Plan]] = {}
_PLANS_KEPT = 8
_SOURCE_RANK = {"chat": 0, "persona": 1}


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


def _plan(books: Sequence[WorldBook], settings: ActivationSettings, macros: MacroValues) -> _Plan:
    """The books' enabled entries compiled, in processing order, with the trigram tables.

    Entries that can only activate through plain keys with trigrams are looked at only
    when the text they scan holds every trigram of one of those keys (the exact
    pre-check of ``Key.matches``, done for all keys at once); the others are looked at
    in every pass. A plan is kept for the same book objects, settings and names while
    the entry fields it was made from stay the same, so a lorebook is compiled once.
    """
    cache_key = (tuple(map(id, books)), settings, macros)
    stamp = _stamp(books)
    kept = _PLANS.get(cache_key)
    same_books = kept is not None and all(a is b for a, b in zip(kept[0], books, strict=True))
    if kept is not None and same_books and kept[1] == stamp:
        return kept[2]
    entries = _ordered(books, settings.character_strategy)
    levels = sorted({e.delay_until_recursion for e in entries if e.delay_until_recursion})
    compiled = [_Compiled(e, settings, macros) for e in entries if not e.disabled]
    plan = _Plan(compiled, [], {}, levels, [])
    for at, c in enumerate(compiled):
        c.at = at
        if c.entry.timed("sticky") or c.entry.timed("cooldown"):
            plan.timed.append(at)
        if not c.keyed:
            plan.always.append(at)
            continue
        plan.tables.setdefault((c.scan_depth, c.case_sensitive), KeyTable()).add(at, c.keys or ())
    _PLANS.pop(cache_key, None)
    while len(_PLANS) >= _PLANS_KEPT:
        del _PLANS[next(iter(_PLANS))]
    _PLANS[cache_key] = (tuple(books), copy.deepcopy(stamp), plan)
    return plan


@dataclass(slots=True)
class _Scan:
    """The state of one activation (SillyTavern's locals in ``checkWorldInfo``)."""

    plan: _Plan
    settings: ActivationSettings
    context: ScanContext
    buffer: _Buffer
    rng: random.Random
    chat_length: int
    grams: Grams = field(default_factory=lambda: Grams())
    states: dict[int, TableState] = field(default_factory=dict)
    activated: dict[int, tuple[_Compiled, str, str]] = field(default_factory=dict)
    failed: set[int] = field(default_factory=set)
    timed: TimedState = field(default_factory=TimedState)
    sticky: set[int] = field(default_factory=set)
    cooldown: set[int] = field(default_factory=set)
    filtered: set[int] = field(default_factory=set)

    def prepare(self) -> None:
        """Timed effects and character filters, fixed for the whole activation."""
        compiled = self.plan.compiled
        if self.context.timed and self.plan.timed:
            hashes = {}
            for at in self.plan.timed:
                c = compiled[at]
                digest = entry_hash(c.entry.raw, c.entry.world, c.decorators, c.content)
                hashes[digest] = at
            raws = {digest: compiled[at].entry.raw for digest, at in hashes.items()}
            state = active_effects(self.context.timed, self.chat_length, raws)
            self.sticky = {hashes[d] for d in state.sticky}
            self.cooldown = {hashes[d] for d in state.cooldown}
        for c in compiled:
            if c.entry.character_filter and _filtered_out(c.entry.character_filter, self.context):
                self.filtered.add(c.at)

    def candidates(self, state: int) -> list[int]:
        """The entries that may activate in this pass, in processing order."""
        todo = set(self.plan.always) | self.sticky
        for (depth, case), table in self.plan.tables.items():
            raw, folded = self.buffer.text(depth, (), state)
            if not raw:
                continue
            progress = self.states.setdefault(id(table), TableState())
            todo.update(table.candidates(self.grams.of(raw if case else folded), progress))
        return sorted(todo)

    def check(self, c: _Compiled, state: int, level: int) -> str | None:
        """Why ``c`` activates in this pass (its trigger), or ``None``."""
        at, e = c.at, c.entry
        if at in self.failed or at in self.activated or at in self.filtered:
            return None
        sticky = at in self.sticky
        delay = e.timed("delay")
        if delay and self.chat_length < delay:
            return None
        if at in self.cooldown and not sticky:
            return None
        dur = e.delay_until_recursion
        if dur and not sticky and (state != RECURSION or dur > level):
            return None
        if state == RECURSION and self.settings.recursive and e.exclude_recursion and not sticky:
            return None
        if "@@activate" in c.decorators:
            return "decorator"
        if "@@dont_activate" in c.decorators:
            return None
        if e.constant:
            return "constant"
        if sticky:
            return "sticky"
        if not c.keys:
            return None
        raw, folded = self.buffer.text(c.scan_depth, c.extras, state)
        if not c.primary(raw, folded, self.grams) or not c.secondary_ok(raw, folded, self.grams):
            return None
        return "recursion" if state == RECURSION else "key"

    def passes_probability(self, c: _Compiled) -> bool:
        e = c.entry
        if not e.use_probability or e.probability == 100 or c.at in self.sticky:
            return True
        roll = self.rng.random() * 100
        if e.probability is not None and roll <= e.probability:
            return True
        self.failed.add(c.at)
        return False


def _filtered_out(rule: Mapping[str, Any], context: ScanContext) -> bool:
    """SillyTavern's ``characterFilter``: by card file name, then by tag."""
    exclude = truthy(rule.get("isExclude"))
    names = rule.get("names")
    if isinstance(names, list) and names:
        included = context.character_file in names
        if included if exclude else not included:
            return True
    tags = rule.get("tags")
    if isinstance(tags, list) and tags and context.character_tags is not None:
        has = any(t in tags for t in context.character_tags)
        if has if exclude else not has:
            return True
    return False


def activate(
    books: Iterable[WorldBook],
    messages: Sequence[ScanMessage],
    settings: ActivationSettings | None = None,
    rng: random.Random | None = None,
    context: ScanContext | None = None,
) -> list[ActivatedEntry]:
    """The entries of ``books`` that the newest ``messages`` activate (rules above).

    ``messages`` are the chat's visible messages, oldest first.
    """
    settings = settings or ActivationSettings()
    context = context or ScanContext()
    plan = _plan(list(books), settings, context.macros)
    scan = _Scan(
        plan,
        settings,
        context,
        _Buffer(messages, settings, context.texts),
        rng or random.Random(),
        len(messages),
    )
    scan.prepare()
    levels = list(plan.levels)
    level = levels.pop(0) if levels else 0
    budget = settings.budget()
    overflowed = False
    all_text = ""
    state, count = INITIAL, 0
    while state:
        steps = settings.max_recursion_steps
        if (steps and steps <= count) or count >= RECURSION_HARD_CAP:
            break
        count += 1
        following = 0
        found: list[tuple[_Compiled, str]] = []
        for at in scan.candidates(state):
            c = plan.compiled[at]
            trigger = scan.check(c, state, level)
            if trigger is not None:
                found.append((c, trigger))
        found.sort(key=lambda f: (f[0].at not in scan.sticky, f[0].at))
        triggers = {id(c): t for c, t in found}
        new = [c for c, _ in found]
        _inclusion_groups(new, scan, state)
        new_content = ""
        text_tokens = estimate_tokens(all_text)
        for c in new:
            if not scan.passes_probability(c):
                continue
            content = substitute(c.content, context.macros)
            new_content += content + "\n"
            if text_tokens + estimate_tokens(new_content) >= budget:
                overflowed = True
                break
            scan.activated[c.at] = (c, triggers[id(c)], content)
        successful = [c for c in new if c.at not in scan.failed]
        for_recursion = [c for c in successful if not c.entry.prevent_recursion]
        if settings.recursive and not overflowed and for_recursion:
            following = RECURSION
        if (
            settings.recursive
            and not overflowed
            and state == MIN_ACTIVATIONS
            and scan.buffer.recurse
        ):
            following = RECURSION
        wanted = settings.min_activations
        if not following and not overflowed and wanted > 0 and len(scan.activated) < wanted:
            depth_max = settings.min_activations_depth_max
            depth = scan.buffer.depth
            if not ((depth_max > 0 and depth > depth_max) or depth > len(messages)):
                following = MIN_ACTIVATIONS
                scan.buffer.advance()
        if not following and levels:
            following = RECURSION
            level = levels.pop(0)
        state = following
        if state:
            text = "\n".join(substitute(c.content, context.macros) for c in for_recursion)
            if text:
                scan.buffer.add_recursion(text)
                all_text = text + "\n" + all_text
    chosen = sorted(scan.activated.values(), key=lambda a: -a[0].entry.order)
    chosen.reverse()  # SillyTavern builds the prompt with unshift over order, highest first
    return [ActivatedEntry.of(c.entry, trigger, content) for c, trigger, content in chosen]


def _js_remove(items: list[_Compiled], item: _Compiled) -> None:
    """``items.splice(items.indexOf(item), 1)``: a missing item removes the last one."""
    for at, other in enumerate(items):
        if other is item:
            del items[at]
            return
    if items:
        del items[-1]


def _inclusion_groups(new: list[_Compiled], scan: _Scan, state: int) -> None:
    """SillyTavern's ``filterByInclusionGroups`` on this pass's candidates, in place."""
    grouped: dict[str, list[_Compiled]] = {}
    for c in new:
        if c.entry.group:
            for name in c.entry.groups:
                grouped.setdefault(name, []).append(c)
    if not grouped:
        return
    grouped = {k: grouped[k] for k in js_key_order(grouped)}
    sticky_groups = _groups_by_timed_effects(grouped, new, scan)
    _groups_by_score(grouped, new, scan, state, sticky_groups)
    activated_groups = {c.entry.group for c, _, _ in scan.activated.values()}
    for name, group in grouped.items():
        if name in sticky_groups:
            continue
        if name in activated_groups:
            for c in group:
                _js_remove(new, c)
            continue
        if len(group) <= 1:
            continue
        prios = sorted((c for c in group if c.entry.group_override), key=lambda c: -c.entry.order)
        winner: _Compiled | None = prios[0] if prios else None
        if winner is None:
            total = sum(c.entry.group_weight for c in group)
            roll, current = scan.rng.random() * total, 0.0
            for c in group:
                current += c.entry.group_weight
                if roll <= current:
                    winner = c
                    break
            if winner is None:
                continue
        for c in group:
            if c is not winner:
                _js_remove(new, c)


def _groups_by_timed_effects(
    grouped: dict[str, list[_Compiled]], new: list[_Compiled], scan: _Scan
) -> set[str]:
    """Sticky members win their group; members on cooldown or delay drop out."""
    with_sticky: set[str] = set()
    for name, group in grouped.items():
        sticky = [c for c in group if c.at in scan.sticky]
        if sticky:
            for c in group:
                if c not in sticky:
                    _js_remove(new, c)
            with_sticky.add(name)
        for c in [c for c in group if c.at in scan.cooldown]:
            _js_remove(new, c)
        delayed = [c for c in group if c.entry.timed("delay") > scan.chat_length]
        for c in delayed:
            _js_remove(new, c)
    return with_sticky


def _groups_by_score(
    grouped: dict[str, list[_Compiled]],
    new: list[_Compiled],
    scan: _Scan,
    state: int,
    sticky_groups: set[str],
) -> None:
    """With group scoring, only the members matching the most keys stay."""
    default = scan.settings.use_group_scoring
    for name, group in grouped.items():
        if not default and not any(c.entry.use_group_scoring for c in group):
            continue
        if name in sticky_groups:
            continue
        scores = []
        for c in group:
            raw, folded = scan.buffer.text(c.scan_depth, c.extras, state)
            whole = c.entry.match_whole_words
            whole = scan.settings.match_whole_words if whole is None else whole
            scores.append(c.score(raw, folded, scan.grams, whole))
        best = max(scores)
        at = 0
        while at < len(group):
            scored = group[at].entry.use_group_scoring
            if (default if scored is None else scored) and scores[at] < best:
                _js_remove(new, group[at])
                del group[at], scores[at]
                continue
            at += 1


__all__ = [
    "AND_ALL",
    "AND_ANY",
    "NOT_ALL",
    "NOT_ANY",
    "ActivatedEntry",
    "ActivationSettings",
    "ScanContext",
    "ScanMessage",
    "activate",
    "estimate_tokens",
]
