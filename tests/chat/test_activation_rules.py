"""World info activation, case by case, each citing the SillyTavern rule it follows.

The rules are those of ``checkWorldInfo`` and its helpers in SillyTavern's
``public/scripts/world-info.js`` (``WorldInfoBuffer.get`` / ``matchKeys``,
``filterByInclusionGroups``, ``WorldInfoTimedEffects``, ``parseDecorators``,
``convertCharacterBook``, ``getSortedEntries``) and ``substituteParams`` for
macros. Lorebook files from SillyTavern's repository are used where they show
the rule.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tavern_agent.chat.activation import (
    ActivationSettings,
    ScanContext,
    ScanMessage,
    activate,
)
from tavern_agent.chat.cards import parse_card
from tavern_agent.chat.macros import MacroValues
from tavern_agent.chat.timed import entry_hash, string_hash
from tavern_agent.chat.world_books import parse_world

REAL = Path(__file__).resolve().parents[1] / "data" / "st-real"
SERAPHINA = MacroValues(user="Ann", char="Seraphina")


def e(uid: int, key: Any = None, **more: Any) -> dict[str, Any]:
    return {"uid": uid, "key": ["zz-never"] if key is None else key, "content": f"c{uid}", **more}


@dataclass
class Case:
    rule: str  # the SillyTavern rule, in words
    entries: list[dict[str, Any]]
    chat: list[str]
    expected: set[int]
    settings: ActivationSettings = field(default_factory=ActivationSettings)
    context: ScanContext = field(default_factory=lambda: ScanContext(macros=SERAPHINA))
    seed: int = 0


CASES = [
    # ---- macros ({{char}}, {{user}}) and key trimming
    Case(
        "keys are passed through substituteParams: {{char}} is the character",
        [e(1, ["{{char}}"])],
        ["I see Seraphina"],
        {1},
    ),
    Case("{{user}} is the user's name", [e(1, ["{{user}}'s sword"])], ["Ann's sword"], {1}),
    Case(
        "macro names are case-insensitive; <BOT> is the character too",
        [e(1, ["{{CHAR}}"]), e(2, ["<BOT>"])],
        ["seraphina"],
        {1, 2},
    ),
    Case(
        "keys are trimmed after substitution: 'ttest    ' matches 'ttest'",
        [e(1, ["test"], keysecondary=["ttest    "], selective=True)],
        ["a test ttest!"],
        {1},
    ),
    Case("an empty key never matches (substituted '' is falsy)", [e(1, [""])], ["anything"], set()),
    Case(
        "a whitespace-only key matches everything (includes(''))",
        [e(1, ["   "])],
        ["anything"],
        {1},
    ),
    # ---- key shapes
    Case(
        "key given as a string is no array: the entry has no keys",
        [e(1, "forest")],
        ["forest"],
        set(),
    ),
    Case(
        "secondary keys given as a string are ignored",
        [e(1, ["forest"], keysecondary="nope", selective=True, selectiveLogic=3)],
        ["forest"],
        {1},
    ),
    Case(
        "selective missing: secondary keys are ignored",
        [e(1, ["forest"], keysecondary=["castle"], selectiveLogic=3)],
        ["forest"],
        {1},
    ),
    Case(
        "selective true: AND ALL needs every secondary key",
        [e(1, ["forest"], keysecondary=["castle"], selective=True, selectiveLogic=3)],
        ["forest"],
        set(),
    ),
    Case(
        "NOT ANY: no secondary key may match",
        [e(1, ["forest"], keysecondary=["fire"], selective=True, selectiveLogic=2)],
        ["forest fire"],
        set(),
    ),
    # ---- scan text
    Case("scanDepth 0 scans nothing", [e(1, ["forest"], scanDepth=0)], ["forest"], set()),
    Case(
        "the scan text starts with \\x01: /^User/ never matches",
        [e(1, ["/^User/"]), e(2, ["/^\\x01User/"])],
        ["hi"],
        {2},
    ),
    Case("messages are 'name: mes' with include_names", [e(1, ["User: hi"])], ["hi"], {1}),
    Case(
        "without include_names only the text is scanned",
        [e(1, ["User: hi"])],
        ["hi"],
        set(),
        ActivationSettings(include_names=False),
    ),
    Case(
        "matchCharacterDescription scans the card's description too",
        [e(1, ["healer"], matchCharacterDescription=True), e(2, ["healer"])],
        ["hi"],
        {1},
        context=ScanContext(
            macros=SERAPHINA, texts={"matchCharacterDescription": "A gentle healer."}
        ),
    ),
    Case(
        "whole words: a one-word key needs non-word characters (ASCII \\W) around it",
        [e(1, ["cat"], matchWholeWords=True)],
        ["concatenate"],
        set(),
    ),
    Case(
        "whole words: é is a non-word character in JavaScript",
        [e(1, ["caf"], matchWholeWords=True)],
        ["café"],
        {1},
    ),
    Case(
        "whole words: a key with spaces is a plain substring",
        [e(1, ["black cat"], matchWholeWords=True)],
        ["ablack cats"],
        {1},
    ),
    # ---- probability
    Case(
        "useProbability missing: never rolls (probability 0 still activates)",
        [e(1, ["rain"], probability=0)],
        ["rain"],
        {1},
    ),
    Case(
        "useProbability true and probability 0: the roll fails",
        [e(1, ["rain"], probability=0, useProbability=True)],
        ["rain"],
        set(),
    ),
    Case(
        "useProbability true and probability missing: roll <= undefined fails",
        [e(1, ["rain"], useProbability=True)],
        ["rain"],
        set(),
    ),
    # ---- recursion
    Case(
        "max_recursion_steps 1: only the first scan",
        [e(1, ["a1"], content="b2"), e(2, ["b2"])],
        ["a1"],
        {1},
        ActivationSettings(max_recursion_steps=1),
    ),
    Case(
        "max_recursion_steps 2: one recursion step",
        [e(1, ["a1"], content="b2"), e(2, ["b2"], content="c3"), e(3, ["c3"])],
        ["a1"],
        {1, 2},
        ActivationSettings(max_recursion_steps=2),
    ),
    Case(
        "delayUntilRecursion: not in the first scan",
        [e(1, ["rain"], delayUntilRecursion=True)],
        ["rain"],
        set(),
    ),
    Case(
        "delayUntilRecursion: activates in a recursion pass",
        [e(1, ["rain"], content="storm"), e(2, ["storm"], delayUntilRecursion=True)],
        ["rain"],
        {1, 2},
    ),
    Case(
        "delayUntilRecursion levels run after the scan settles, lowest first",
        [e(1, ["rain"], delayUntilRecursion=2), e(2, ["rain"], delayUntilRecursion=1, content="x")],
        ["rain"],
        {1, 2},
    ),
    Case(
        "excludeRecursion: not activated by the recursion buffer",
        [e(1, ["rain"], content="storm"), e(2, ["storm"], excludeRecursion=True)],
        ["rain"],
        {1},
    ),
    # ---- decorators
    Case(
        "@@activate activates without keys",
        [e(1, [], content="@@activate\nAlways here.")],
        ["hi"],
        {1},
    ),
    Case(
        "@@dont_activate never activates by keys",
        [e(1, ["rain"], content="@@dont_activate\nNever.")],
        ["rain"],
        set(),
    ),
    # ---- timed effects
    Case(
        "delay: not before the chat has that many messages",
        [e(1, ["rain"], delay=3)],
        ["rain", "x"],
        set(),
    ),
    Case("delay reached", [e(1, ["rain"], delay=2)], ["rain", "x"], {1}),
    # ---- character filter
    Case(
        "characterFilter names: only for the listed card files",
        [
            e(1, ["rain"], characterFilter={"names": ["Other"], "tags": []}),
            e(2, ["rain"], characterFilter={"names": ["default_Seraphina"]}),
        ],
        ["rain"],
        {2},
        context=ScanContext(macros=SERAPHINA, character_file="default_Seraphina"),
    ),
    Case(
        "characterFilter isExclude: all but the listed",
        [e(1, ["rain"], characterFilter={"names": ["default_Seraphina"], "isExclude": True})],
        ["rain"],
        set(),
        context=ScanContext(macros=SERAPHINA, character_file="default_Seraphina"),
    ),
    Case(
        "characterFilter tags: by the character's tag ids",
        [
            e(1, ["rain"], characterFilter={"tags": ["t1"]}),
            e(2, ["rain"], characterFilter={"tags": ["t2"]}),
        ],
        ["rain"],
        {1},
        context=ScanContext(macros=SERAPHINA, character_tags=frozenset({"t1"})),
    ),
    # ---- inclusion groups
    Case(
        "groupOverride: the highest order wins",
        [
            e(1, ["rain"], group="w", groupOverride=True, order=5),
            e(2, ["rain"], group="w", groupOverride=True, order=50),
            e(3, ["rain"], group="w"),
        ],
        ["rain"],
        {2},
    ),
    Case(
        "group split at ',\\s*': 'a, b' is in groups a and b",
        [e(1, ["rain"], group="a, b", groupOverride=True), e(2, ["rain"], group="b")],
        ["rain"],
        {1},
        ActivationSettings(recursive=False),
    ),
    Case(
        "a losing member may win a later pass: 'already activated' compares the whole group "
        "field, and 'a, b' is not 'b'",
        [e(1, ["rain"], group="a, b", groupOverride=True), e(2, ["rain"], group="b")],
        ["rain"],
        {1, 2},
    ),
    Case(
        "group scoring: the member matching more keys wins",
        [e(1, ["rain", "storm"], group="w"), e(2, ["rain"], group="w")],
        ["rain storm"],
        {1},
        ActivationSettings(use_group_scoring=True),
    ),
    Case(
        "useGroupScoring on one member is enough",
        [
            e(1, ["rain", "storm"], group="w", useGroupScoring=True),
            e(2, ["rain"], group="w", useGroupScoring=True),
        ],
        ["rain storm"],
        {1},
    ),
    Case(
        "group scoring counts secondary keys only with selectiveLogic AND ANY or AND ALL "
        "(a missing selectiveLogic counts primary keys only)",
        [
            e(1, ["rain"], keysecondary=["storm", "wind"], group="w", selectiveLogic=0),
            e(2, ["rain", "storm"], group="w"),
            e(3, ["rain"], keysecondary=["storm", "wind"], group="v", selective=True),
            e(4, ["rain", "storm"], group="v"),
        ],
        ["rain storm wind"],
        {1, 4},
        ActivationSettings(use_group_scoring=True),
    ),
    Case(
        "group scoring counts keys as written: an empty key is found, {{char}} is not",
        [e(1, ["rain", ""], group="w"), e(2, ["rain", "{{char}}"], group="w")],
        ["rain, said Seraphina"],
        {1},
        ActivationSettings(use_group_scoring=True),
    ),
    Case(
        "a group named like an activated entry's group field takes no more",
        [e(1, ["rain"], group="w", content="snow"), e(2, ["snow"], group="w")],
        ["rain"],
        {1},
    ),
    Case(
        "several groups: removing an entry another group removed already drops the last "
        "candidate (splice(indexOf(e), 1) with indexOf -1), here the ungrouped entry 4",
        [
            e(1, ["rain"], group="a,b", groupOverride=True, order=1),
            e(2, ["rain"], group="a", groupOverride=True, order=9),
            e(3, ["rain"], group="b", groupOverride=True, order=9),
            e(4, ["rain"], order=0),
        ],
        ["rain"],
        {2, 3},
    ),
    # ---- budget and minimum activations
    Case(
        "budget: round(percent * context / 100) tokens, capped; the entry reaching it stops "
        "activation",
        [e(1, ["rain"], content="a" * 30, order=9), e(2, ["rain"], content="b" * 30, order=5)],
        ["rain"],
        {1},
        ActivationSettings(max_context=100, budget_percent=50, budget_cap=15),
    ),
    Case(
        "min activations: the scan depth grows until enough entries activate",
        [e(1, ["old"]), e(2, ["older"])],
        ["older", "old", "x", "y"],
        {1, 2},
        ActivationSettings(min_activations=2),
    ),
    Case(
        "min activations stop at min_activations_depth_max",
        [e(1, ["old"]), e(2, ["older"])],
        ["older", "old", "x", "y"],
        {1},
        ActivationSettings(min_activations=2, min_activations_depth_max=2),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.rule for c in CASES])
def test_rule(case: Case) -> None:
    book = parse_world({"entries": {str(x["uid"]): x for x in case.entries}}, "rules")
    messages = [
        ScanMessage("User" if i % 2 == 0 else "Seraphina", t) for i, t in enumerate(case.chat)
    ]
    result = activate([book], messages, case.settings, random.Random(case.seed), case.context)
    assert {a.uid for a in result} == case.expected


def test_content_macros_are_substituted_for_the_model() -> None:
    # Eldoria (SillyTavern's sample lorebook): entry content uses {{user}} and {{char}}.
    eldoria = parse_world((REAL / "worlds" / "Eldoria.json").read_bytes(), "Eldoria")
    messages = [ScanMessage("Ann", "Tell me about the forest")]
    result = activate([eldoria], messages, context=ScanContext(macros=SERAPHINA))
    forest = next(a for a in result if a.uid == 0)
    assert forest.content.startswith('Ann: "What is Eldoria?"')
    assert "{{" not in forest.content and "Seraphina:" in forest.content


def test_koboldai_sample_trailing_space_secondary_key() -> None:
    sample = parse_world((REAL / "worlds" / "KoboldAI_Sample.json").read_bytes(), "Sample")
    hit = activate([sample], [ScanMessage("U", "Test of ttest")])
    miss = activate([sample], [ScanMessage("U", "Test alone")])
    assert [a.uid for a in hit] == [0] and miss == []


def test_toaru_2023_entries_activate_without_probability_fields() -> None:
    toaru = parse_world((REAL / "worlds" / "Toaru.json").read_bytes(), "Toaru")
    result = activate([toaru], [ScanMessage("U", "Off to Tokiwadai today")], rng=random.Random(0))
    assert 0 in {a.uid for a in result}


def test_embedded_lorebook_converts_like_sillytavern() -> None:
    card = parse_card((REAL / "cards" / "contest_Assistant_Sakana.png").read_bytes())
    book = card.book()
    assert book is not None and book.name == "Sakana-WI" and len(book.entries) == 14
    first = book.entries["0"]
    assert first.position_name == "after_char" and not first.disabled
    assert first.exclude_recursion is False and book.entries["3"].exclude_recursion is True
    converted = parse_world(
        {
            "name": "b",
            "entries": [
                {"keys": ["a"], "content": "no enabled field"},
                {"keys": ["a"], "content": "x", "enabled": True},
                {"keys": ["a"], "content": "x", "enabled": True, "position": "before_char"},
                {"keys": ["a"], "content": "x", "enabled": True, "case_sensitive": True},
            ],
        },
        "b",
    )
    entries = list(converted.entries.values())
    assert entries[0].disabled and not entries[1].disabled
    assert entries[1].position_name == "after_char" and entries[2].position_name == "before_char"
    assert entries[3].case_sensitive is None  # a top-level case_sensitive is ignored
    result = activate([converted], [ScanMessage("U", "a")])
    assert {a.uid for a in result} == {1, 2, 3}


def test_seraphina_card_book_uses_macros_too() -> None:
    card = parse_card((REAL / "cards" / "default_Seraphina.png").read_bytes())
    book = card.book()
    assert book is not None
    result = activate(
        [book], [ScanMessage("Ann", "the glade")], context=ScanContext(macros=SERAPHINA)
    )
    assert result and all("{{char}}" not in a.content for a in result)


def test_string_hash_is_sillytavern_cyrb53() -> None:
    # Reference values computed with SillyTavern's getStringHash in a JavaScript engine.
    from quickjs_rs import Runtime

    context = Runtime().new_context()
    context.eval(
        "globalThis.h = (str, seed = 0) => { let h1 = 0xdeadbeef ^ seed, h2 = 0x41c6ce57 ^ seed;"
        " for (let i = 0, ch; i < str.length; i++) { ch = str.charCodeAt(i);"
        " h1 = Math.imul(h1 ^ ch, 2654435761); h2 = Math.imul(h2 ^ ch, 1597334677); }"
        " h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);"
        " h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);"
        " return 4294967296 * (2097151 & h2) + (h1 >>> 0); }; null;"
    )
    for text in ["", "abc", '{"uid":1,"world":"Eldoria"}', "森林 🌲 é"]:
        assert string_hash(text) == context.eval(f"h({json.dumps(text)})")


def test_entry_hash_matches_sillytavern_on_eldoria() -> None:
    # getSortedEntries: {uid, world, ...rest}, then {...entry, decorators, content}, hashed
    # with getStringHash(JSON.stringify(entry)): computed here in a JavaScript engine.
    from quickjs_rs import Runtime

    context = Runtime().new_context()
    context.eval(
        "globalThis.h = (str, seed = 0) => { let h1 = 0xdeadbeef ^ seed, h2 = 0x41c6ce57 ^ seed;"
        " for (let i = 0, ch; i < str.length; i++) { ch = str.charCodeAt(i);"
        " h1 = Math.imul(h1 ^ ch, 2654435761); h2 = Math.imul(h2 ^ ch, 1597334677); }"
        " h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);"
        " h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);"
        " return 4294967296 * (2097151 & h2) + (h1 >>> 0); };"
        " globalThis.entryHash = (raw, world) => { const { uid, ...rest } = raw;"
        " const entry = { uid, world, ...rest };"
        " return h(JSON.stringify({ ...entry, decorators: [], content: entry.content || '' })); };"
        " null;"
    )
    data = json.loads((REAL / "worlds" / "Eldoria.json").read_bytes())
    for raw in data["entries"].values():
        ours = entry_hash(raw, "Eldoria", [], raw["content"])
        assert ours == context.eval(f"entryHash({json.dumps(raw)}, 'Eldoria')")


def test_sticky_and_cooldown_from_chat_metadata() -> None:
    raw = {"uid": 1, "key": ["rain"], "content": "c1", "sticky": 3, "cooldown": 2}
    book = parse_world({"entries": {"1": raw}}, "W")
    digest = entry_hash(book.entries["1"].raw, "W", [], "c1")
    chat = [ScanMessage("U", t) for t in ["x", "y", "z", "w"]]  # 4 messages, no "rain"

    def effects(kind: str, start: int, end: int, protected: bool = False) -> ScanContext:
        stored = {
            kind: {"W.1": {"hash": digest, "start": start, "end": end, "protected": protected}}
        }
        return ScanContext(timed=stored)

    sticky = activate([book], chat, context=effects("sticky", 2, 5))
    assert [(a.uid, a.trigger) for a in sticky] == [(1, "sticky")]  # active: 2 < 4 < 5
    assert activate([book], chat, context=effects("sticky", 4, 7)) == []  # chat not advanced
    rain = [*chat, ScanMessage("U", "rain")]
    assert activate([book], rain, context=effects("cooldown", 2, 9)) == []  # on cooldown
    # a sticky that ended starts the cooldown at once
    assert activate([book], rain, context=effects("sticky", 1, 5)) == []


def test_a_lone_surrogate_in_entry_text_reaches_the_model_as_a_replacement_character() -> None:
    book = parse_world(b'{"entries":{"1":{"uid":1,"key":["rain"],"content":"cut \\ud83d"}}}', "W")
    (entry,) = activate([book], [ScanMessage("U", "rain")])
    assert entry.content == "cut \ufffd"
    entry.content.encode("utf-8")  # printable and storable
