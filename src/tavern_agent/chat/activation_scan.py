"""One world info activation as it runs: the scan text, the passes' state, inclusion groups.

The rules are in :mod:`tavern_agent.chat.activation`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tavern_agent.chat.activation_inputs import ActivationSettings, ScanContext, ScanMessage
from tavern_agent.chat.activation_plan import Compiled, Plan
from tavern_agent.chat.key_match import Grams, TableState
from tavern_agent.chat.macros import substitute
from tavern_agent.chat.timed import TimedState, active_effects, entry_hash
from tavern_agent.chat.world_books import js_key_order, truthy

MATCHER = "\x01"
JOINER = "\n" + MATCHER
MAX_SCAN_DEPTH = 1000
CHARS_PER_TOKEN = 3.35
INITIAL, RECURSION, MIN_ACTIVATIONS = 1, 2, 3


def estimate_tokens(text: str) -> int:
    """SillyTavern's token estimate without a tokenizer: characters / 3.35, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


class Buffer:
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
        """Add activated content for the recursion passes to scan."""
        self.recurse.append(text)
        self._cache = {k: v for k, v in self._cache.items() if not k[2]}

    def advance(self) -> None:
        """One more message for the global depth (minimum activations)."""
        self.depth += 1


@dataclass(slots=True)
class Scan:
    """The state of one activation (SillyTavern's locals in ``checkWorldInfo``)."""

    plan: Plan
    settings: ActivationSettings
    context: ScanContext
    buffer: Buffer
    rng: random.Random
    chat_length: int
    grams: Grams = field(default_factory=lambda: Grams())
    states: dict[int, TableState] = field(default_factory=dict)
    activated: dict[int, tuple[Compiled, str, str]] = field(default_factory=dict)
    failed: set[int] = field(default_factory=set)
    timed: TimedState = field(default_factory=TimedState)
    sticky: set[int] = field(default_factory=set)
    cooldown: set[int] = field(default_factory=set)
    filtered: set[int] = field(default_factory=set)
    overflowed: bool = False  # the budget was reached: no more recursion
    all_text: str = ""  # the recursion text so far, newest first; counts against the budget

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

    def check(self, c: Compiled, state: int, level: int) -> str | None:
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

    def passes_probability(self, c: Compiled) -> bool:
        """Roll the entry's ``probability``; a failed roll keeps it out of this activation."""
        e = c.entry
        if not e.use_probability or e.probability == 100 or c.at in self.sticky:
            return True
        roll = self.rng.random() * 100
        if e.probability is not None and roll <= e.probability:
            return True
        self.failed.add(c.at)
        return False

    def run_pass(self, state: int, level: int) -> list[Compiled]:
        """One pass: its entries found, grouped, rolled and activated within the budget.

        Returns the entries activated in it that may recurse.
        """
        found: list[tuple[Compiled, str]] = []
        for at in self.candidates(state):
            c = self.plan.compiled[at]
            trigger = self.check(c, state, level)
            if trigger is not None:
                found.append((c, trigger))
        found.sort(key=lambda f: (f[0].at not in self.sticky, f[0].at))
        triggers = {id(c): t for c, t in found}
        new = [c for c, _ in found]
        _inclusion_groups(new, self, state)
        budget = self.settings.budget()
        new_content = ""
        text_tokens = estimate_tokens(self.all_text)
        for c in new:
            if not self.passes_probability(c):
                continue
            content = substitute(c.content, self.context.macros)
            new_content += content + "\n"
            if text_tokens + estimate_tokens(new_content) >= budget:
                self.overflowed = True
                break
            self.activated[c.at] = (c, triggers[id(c)], content)
        successful = [c for c in new if c.at not in self.failed]
        return [c for c in successful if not c.entry.prevent_recursion]

    def following(self, state: int, for_recursion: list[Compiled]) -> int:
        """The state of the next pass after one that activated ``for_recursion`` (0: none).

        A pass for minimum activations scans one more message.
        """
        settings = self.settings
        following = 0
        if settings.recursive and not self.overflowed and for_recursion:
            following = RECURSION
        if (
            settings.recursive
            and not self.overflowed
            and state == MIN_ACTIVATIONS
            and self.buffer.recurse
        ):
            following = RECURSION
        wanted = settings.min_activations
        if not following and not self.overflowed and wanted > 0 and len(self.activated) < wanted:
            depth_max = settings.min_activations_depth_max
            depth = self.buffer.depth
            if not ((depth_max > 0 and depth > depth_max) or depth > self.chat_length):
                following = MIN_ACTIVATIONS
                self.buffer.advance()
        return following

    def recurse_on(self, entries: list[Compiled]) -> None:
        """Add the content of ``entries`` to the text the next passes scan."""
        text = "\n".join(substitute(c.content, self.context.macros) for c in entries)
        if text:
            self.buffer.add_recursion(text)
            self.all_text = text + "\n" + self.all_text


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


def _js_remove(items: list[Compiled], item: Compiled) -> None:
    """``items.splice(items.indexOf(item), 1)``: a missing item removes the last one."""
    for at, other in enumerate(items):
        if other is item:
            del items[at]
            return
    if items:
        del items[-1]


def _inclusion_groups(new: list[Compiled], scan: Scan, state: int) -> None:
    """SillyTavern's ``filterByInclusionGroups`` on this pass's candidates, in place."""
    grouped: dict[str, list[Compiled]] = {}
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
        winner: Compiled | None = prios[0] if prios else None
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
    grouped: dict[str, list[Compiled]], new: list[Compiled], scan: Scan
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
    grouped: dict[str, list[Compiled]],
    new: list[Compiled],
    scan: Scan,
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
