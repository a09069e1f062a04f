"""Activation's shortcuts (compiled plans, trigram tables, resumed regex searches) change
nothing: the same entries activate as when every entry is checked against every text."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tavern_agent.chat import activation, key_match
from tavern_agent.chat.activation import ActivatedEntry, ActivationSettings, ScanMessage, activate
from tavern_agent.chat.world_books import WorldBook, parse_world

WORDS = ["dragon", "Dragon", "egg", "forest", "glade", "tower", "ash", "k", "ox", "moon-gate"]
KEYS = [*WORDS, "  ", "", "{{char}}", "{{user}}'s egg"]  # blank, empty and macro keys too
REGEXES = [
    "/dragon.{0,3}egg/s",  # can match across the join of two texts
    "/^egg/m",
    "/tower$/",
    "/\\bash\\b/",
    "/(?<=the )forest/i",
    "/gl[a-z]+e/i",
    "/o+x/",
    "/[(/",  # not a valid regex: a plain key
]


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice([*WORDS, "the", "of", "and", "\u00e9gg"]) for _ in range(words))


def random_book(rng: random.Random, name: str, size: int) -> WorldBook:
    entries: dict[str, Any] = {}
    for uid in range(size):
        keys = [rng.choice(KEYS + REGEXES) for _ in range(rng.randint(0, 3))]
        entry: dict[str, Any] = {
            "uid": uid,
            "key": keys,
            "keysecondary": [rng.choice(WORDS) for _ in range(rng.randint(0, 2))],
            "selective": rng.random() < 0.5,
            "selectiveLogic": rng.randint(0, 3),
            "content": _text(rng, rng.randint(1, 8)),
            "order": rng.randint(1, 20),
            "constant": rng.random() < 0.05,
            "disable": rng.random() < 0.05,
            "excludeRecursion": rng.random() < 0.2,
            "preventRecursion": rng.random() < 0.2,
            "delayUntilRecursion": rng.choice([False, False, True, 2]),
            "group": rng.choice(["", "", "g1", "g1,g2"]),
            "groupOverride": rng.random() < 0.3,
            "useProbability": rng.random() < 0.3,
            "probability": rng.choice([0, 50, 100]),
        }
        for field, values in [
            ("caseSensitive", [None, True, False]),
            ("matchWholeWords", [None, True, False]),
            ("scanDepth", [None, 1, 2, 4]),
        ]:
            value = rng.choice(values)
            if value is not None:
                entry[field] = value
        entries[str(uid)] = entry
    return parse_world({"entries": entries}, name)


def plain_activate(
    books: list[WorldBook], messages: list[ScanMessage], options: ActivationSettings, seed: int
) -> list[ActivatedEntry]:
    """Activation with every shortcut off: all entries checked, regexes on whole texts."""
    mp = pytest.MonkeyPatch()
    original = activation._plan

    def every_entry(books: Any, options: Any, macros: Any) -> Any:
        plan = original(books, options, macros)
        return activation._Plan(
            plan.compiled, list(range(len(plan.compiled))), {}, plan.levels, plan.timed
        )

    try:
        mp.setattr(activation, "_plan", every_entry)
        mp.setattr(key_match, "reach", lambda pattern, flags: None)
        key_match.compiled_key.cache_clear()
        activation._PLANS.clear()
        return activate(books, messages, options, random.Random(seed))
    finally:
        mp.undo()
        key_match.compiled_key.cache_clear()
        activation._PLANS.clear()


def test_shortcuts_activate_the_same_entries() -> None:
    rng = random.Random(11)
    for round_ in range(60):
        books = [random_book(rng, f"book{b}", rng.randint(1, 40)) for b in range(rng.randint(1, 2))]
        messages = [
            ScanMessage(rng.choice(["User", "Ash"]), _text(rng, rng.randint(0, 12)))
            for _ in range(rng.randint(0, 5))
        ]
        options = ActivationSettings(
            scan_depth=rng.randint(1, 4),
            case_sensitive=rng.random() < 0.3,
            match_whole_words=rng.random() < 0.3,
            max_recursion_steps=rng.choice([0, 1, 3]),
            min_activations=rng.choice([0, 0, 3]),
            use_group_scoring=rng.random() < 0.3,
        )
        expected = plain_activate(books, messages, options, round_)
        assert activate(books, messages, options, random.Random(round_)) == expected
        # Twice: the second call runs on the kept plan.
        assert activate(books, messages, options, random.Random(round_)) == expected


def test_a_regex_matching_across_the_recursion_join_is_found() -> None:
    book = parse_world(
        {
            "entries": {
                "1": {"uid": 1, "key": ["hatch"], "content": "egg hatching", "order": 10},
                "2": {"uid": 2, "key": ["/dragon.{0,3}egg/s"], "content": "found", "order": 5},
            }
        },
        "w",
    )
    messages = [ScanMessage("A", "the dragon"), ScanMessage("B", "will it hatch")]
    result = activate([book], messages, ActivationSettings(include_names=False))
    assert [(a.uid, a.trigger) for a in result] == [(2, "recursion"), (1, "key")]


def test_a_changed_lorebook_is_compiled_again() -> None:
    book = parse_world(
        {"entries": {"1": {"uid": 1, "key": ["forest"], "content": "trees", "order": 1}}}, "w"
    )
    messages = [ScanMessage("A", "a tower by the sea")]
    assert activate([book], messages) == []
    book.entries["1"].raw["key"].append("tower")  # changed in place
    assert [a.uid for a in activate([book], messages)] == [1]
    book.entries["1"].raw["key"] = ["sea"]
    book.entries["1"].raw["matchWholeWords"] = True
    assert [a.uid for a in activate([book], messages)] == [1]
    book.entries["1"].raw["disable"] = True
    assert activate([book], messages) == []
    book.entries["1"].raw["disable"] = False
    assert activate([book], messages, ActivationSettings(scan_depth=0)) == []


_WORD_TEXT = st.text(st.sampled_from([*"ab_ -\n\x01é1"]), max_size=12)


@settings(max_examples=500, deadline=None)
@given(_WORD_TEXT, st.text(st.sampled_from([*"ab_ -é1"]), min_size=0, max_size=3))
def test_whole_word_check_matches_sillytaverns_regex(text: str, key: str) -> None:
    regex = re.compile(rf"(?:^|\W)({re.escape(key)})(?:$|\W)", re.ASCII)
    assert key_match.has_word(text, key) == (regex.search(text) is not None)


def test_reach_is_only_given_for_local_bounded_regexes() -> None:
    assert key_match.reach("dragon.{0,3}egg", re.S) == 12
    assert key_match.reach("gl[a-z]+e", re.I) is None  # unbounded
    for pattern in ["^egg", "tower$", r"\bash", "(?<=the )forest", "(a)\\1", "(?=x)y"]:
        assert key_match.reach(pattern, 0) is None
    assert key_match.reach("o{1,3}x", 0) == 4
