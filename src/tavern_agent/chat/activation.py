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

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tavern_agent.chat.activation_inputs import ActivationSettings, ScanContext, ScanMessage
from tavern_agent.chat.activation_plan import Plan as _Plan
from tavern_agent.chat.activation_plan import Plans, plan_for
from tavern_agent.chat.activation_scan import INITIAL, RECURSION, Buffer, Scan, estimate_tokens
from tavern_agent.chat.formats import well_formed
from tavern_agent.chat.macros import MacroValues
from tavern_agent.chat.world_books import WorldBook, WorldEntry

RECURSION_HARD_CAP = 100  # passes, when max_recursion_steps is 0 (a cycle must end)


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
        """The entry's JSON form, as the frozen chat input stores it."""
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


# Plans kept across activations (see ``plan_for``). ``activate`` plans through ``_plan``,
# and ``_Plan`` is the plan's type here, so a test can swap in a plan of its own.
_PLANS: Plans = {}


def _plan(books: Sequence[WorldBook], settings: ActivationSettings, macros: MacroValues) -> _Plan:
    return plan_for(_PLANS, books, settings, macros)


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
    scan = Scan(
        plan,
        settings,
        context,
        Buffer(messages, settings, context.texts),
        rng or random.Random(),
        len(messages),
    )
    scan.prepare()
    levels = list(plan.levels)
    level = levels.pop(0) if levels else 0
    state, count = INITIAL, 0
    while state:
        steps = settings.max_recursion_steps
        if (steps and steps <= count) or count >= RECURSION_HARD_CAP:
            break
        count += 1
        for_recursion = scan.run_pass(state, level)
        following = scan.following(state, for_recursion)
        if not following and levels:
            following = RECURSION
            level = levels.pop(0)
        state = following
        if state:
            scan.recurse_on(for_recursion)
    chosen = sorted(scan.activated.values(), key=lambda a: -a[0].entry.order)
    chosen.reverse()  # SillyTavern builds the prompt with unshift over order, highest first
    return [ActivatedEntry.of(c.entry, trigger, content) for c, trigger, content in chosen]


__all__ = [
    "ActivatedEntry",
    "ActivationSettings",
    "ScanContext",
    "ScanMessage",
    "activate",
    "estimate_tokens",
]
