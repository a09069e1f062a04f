"""World info activation: SillyTavern's rules on the real Eldoria lorebook and small books."""

from __future__ import annotations

import random
from typing import Any

from tavern_agent.chat.activation import ActivatedEntry, ActivationSettings, ScanMessage, activate
from tavern_agent.chat.world_books import AND_ALL, AND_ANY, NOT_ALL, NOT_ANY, WorldBook, parse_world
from tests.chat.helpers import eldoria


def chat(*texts: str) -> list[ScanMessage]:
    return [ScanMessage("User" if i % 2 == 0 else "Seraphina", t) for i, t in enumerate(texts)]


def book(*entries: dict[str, Any]) -> WorldBook:
    return parse_world({"entries": {str(e["uid"]): e for e in entries}}, "test")


def uids(result: list[ActivatedEntry]) -> list[int | None]:
    return [a.uid for a in result]


def entry(uid: int, keys: list[str], **more: Any) -> dict[str, Any]:
    return {"uid": uid, "key": keys, "content": f"content {uid}", "order": 100, **more}


# ---------------------------------------------------------------- Eldoria


def test_forest_chat_activates_the_forest_entry() -> None:
    messages = chat("Where are we?", "We walk beneath the old trees of the forest.")
    flat = activate([eldoria()], messages, ActivationSettings(recursive=False))
    assert uids(flat) == [0]
    assert flat[0].ref == "worldinfo:Eldoria#0" and flat[0].trigger == "key"
    # With recursion, entries the forest text mentions follow, marked as such.
    deep = activate([eldoria()], messages)
    assert deep[0].uid == 0 or 0 in uids(deep)
    assert all(a.trigger == "recursion" for a in deep if a.uid != 0)


def test_unrelated_chat_activates_only_constant_entries() -> None:
    messages = chat("Let's talk about taxes.", "Spreadsheets are due on Tuesday.")
    assert activate([eldoria()], messages) == []
    world = eldoria()
    world.entries["2"].raw["constant"] = True
    result = activate([world], messages, ActivationSettings(recursive=False))
    assert uids(result) == [2] and result[0].constant and result[0].trigger == "constant"
    # With recursion on, the constant entry's own text (it names the forest) can pull in more.
    assert all(a.trigger == "recursion" for a in activate([world], messages) if a.uid != 2)


# ---------------------------------------------------------------- keys


def test_case_and_whole_words() -> None:
    b = book(entry(1, ["Dragon"]), entry(2, ["wood"], matchWholeWords=True))
    assert uids(activate([b], chat("a DRAGON in the woodland"))) == [1]
    assert uids(activate([b], chat("into the wood."))) == [2]
    sensitive = book(entry(1, ["Dragon"], caseSensitive=True))
    assert activate([sensitive], chat("a dragon")) == []
    assert uids(activate([sensitive], chat("a Dragon"))) == [1]
    globally = ActivationSettings(match_whole_words=True)
    assert activate([book(entry(1, ["cat"]))], chat("concatenate"), globally) == []
    assert uids(activate([book(entry(1, ["black cat"]))], chat("a black cat!"), globally)) == [1]


def test_regex_keys() -> None:
    b = book(entry(1, [r"/\bsilver (sword|blade)\b/i"]), entry(2, ["/[/"]))
    assert uids(activate([b], chat("She drew a SILVER BLADE."))) == [1]
    assert activate([b], chat("a silverblade")) == []


def test_scan_depth_window() -> None:
    b = book(entry(1, ["forest"]), entry(2, ["forest"], scanDepth=5))
    old = chat("the forest", "x", "y", "z")
    assert uids(activate([b], old)) == [2]  # global depth 2 misses the oldest message
    # equal orders: SillyTavern's prompt lists the later-processed entry first
    assert uids(activate([b], old, ActivationSettings(scan_depth=4))) == [2, 1]


def test_no_match_across_messages() -> None:
    b = book(entry(1, ["dark forest"]))
    assert activate([b], chat("it was dark", "forest paths")) == []


def test_secondary_logics() -> None:
    def run(logic: int, text: str) -> bool:
        e = entry(1, ["sword"], keysecondary=["fire", "ice"], selective=True, selectiveLogic=logic)
        return bool(activate([book(e)], chat(text)))

    assert run(AND_ANY, "sword of fire") and not run(AND_ANY, "a sword")
    assert run(AND_ALL, "sword of fire and ice") and not run(AND_ALL, "sword of fire")
    assert run(NOT_ANY, "a sword") and not run(NOT_ANY, "sword of ice")
    assert run(NOT_ALL, "sword of ice") and not run(NOT_ALL, "sword of fire and ice")
    unselective = entry(1, ["sword"], keysecondary=["fire"], selective=False)
    assert activate([book(unselective)], chat("a sword"))


def test_constant_disabled_and_keyless() -> None:
    b = book(
        entry(1, [], constant=True),
        entry(2, ["sword"], disable=True),
        entry(3, []),
        entry(4, ["sword"], constant=True, disable=True),
    )
    assert uids(activate([b], chat("a sword"))) == [1]


# ---------------------------------------------------------------- recursion


def test_recursion_exclude_prevent_and_depth_cap() -> None:
    b = book(
        {**entry(1, ["castle"]), "content": "The castle keeps a dragon."},
        {**entry(2, ["dragon"]), "content": "The dragon guards a relic."},
        {**entry(3, ["relic"]), "content": "The relic is old."},
        {**entry(4, ["dragon"], excludeRecursion=True)},
    )
    result = activate([b], chat("we reach the castle"))
    assert uids(result) == [3, 2, 1]
    assert [a.trigger for a in result] == ["recursion", "recursion", "key"]
    # max_recursion_steps counts passes: 1 is the first scan only, 2 one recursion step
    one = activate([b], chat("we reach the castle"), ActivationSettings(max_recursion_steps=1))
    assert uids(one) == [1]
    capped = activate([b], chat("we reach the castle"), ActivationSettings(max_recursion_steps=2))
    assert uids(capped) == [2, 1]
    off = activate([b], chat("we reach the castle"), ActivationSettings(recursive=False))
    assert uids(off) == [1]
    b.entries["1"].raw["preventRecursion"] = True
    assert uids(activate([b], chat("we reach the castle"))) == [1]
    # an excluded entry still activates from the chat itself
    assert 4 in uids(activate([b], chat("a dragon!")))


def test_recursion_cycle_ends() -> None:
    b = book(
        {**entry(1, ["a1"]), "content": "b2"},
        {**entry(2, ["b2"]), "content": "a1"},
    )
    assert uids(activate([b], chat("a1"))) == [2, 1]


# ---------------------------------------------------------------- probability, groups, budget


def test_probability_is_seedable() -> None:
    b = book(*[entry(i, ["rain"], probability=50, useProbability=True) for i in range(40)])
    first = uids(activate([b], chat("rain"), rng=random.Random(5)))
    again = uids(activate([b], chat("rain"), rng=random.Random(5)))
    assert first == again and 5 < len(first) < 35
    sure = book(entry(1, ["rain"], probability=50, useProbability=False))
    assert all(activate([sure], chat("rain"), rng=random.Random(s)) for s in range(10))


def test_inclusion_groups() -> None:
    members = [entry(i, ["rain"], group="weather", groupWeight=1 + i) for i in range(1, 4)]
    picks = {
        tuple(uids(activate([book(*members)], chat("rain"), rng=random.Random(s))))
        for s in range(30)
    }
    assert all(len(p) == 1 for p in picks) and len(picks) > 1
    override = [*members, entry(9, ["rain"], group="weather", groupOverride=True, order=5)]
    override.append(entry(8, ["rain"], group="weather", groupOverride=True, order=50))
    assert uids(activate([book(*override)], chat("rain"))) == [8]
    # a group already filled in an earlier pass takes no more members
    chain = book(
        {**entry(1, ["rain"], group="weather"), "content": "snow"},
        entry(2, ["snow"], group="weather"),
    )
    assert uids(activate([chain], chat("rain"))) == [1]


def test_order_and_budget() -> None:
    b = book(
        {**entry(1, ["x"], order=10), "content": "a" * 40},
        {**entry(2, ["x"], order=300), "content": "b" * 40},
        {**entry(3, ["x"], order=200), "content": "c" * 40},
    )
    assert uids(activate([b], chat("x"))) == [1, 3, 2]  # prompt order: ascending
    # the budget (tokens ~ characters / 3.35) keeps the highest orders first and stops at
    # the first entry that reaches it: 41 characters each with the line break, 13 tokens
    budget = ActivationSettings(max_context=100, budget_percent=27)  # 27 tokens
    assert uids(activate([b], chat("x"), budget)) == [3, 2]


def test_precomputed_list_round_trip() -> None:
    host = ActivatedEntry.from_json({"content": "Rain falls.", "comment": "Weather"}, 3)
    assert host.ref == "worldinfo:activated#3" and host.trigger == "host"
    named = ActivatedEntry.from_json({"world": "W", "uid": 7, "content": "x"})
    assert named.ref == "worldinfo:W#7"
    assert ActivatedEntry.from_json(named.to_json()) == named
