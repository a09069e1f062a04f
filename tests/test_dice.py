"""dice.roll: formula rules, texts and structured results."""

from __future__ import annotations

import random

import pytest

from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.results import ToolFailure
from tavern_agent.tools.builtin.dice import ROLL, Formula, describe_roll, parse_formula


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("20", "1d20"),
        ("d20", "1d20"),
        ("D20", "1d20"),
        ("3d6+4", "3d6+4"),
        ("1d6-2", "1d6-2"),
        ("2d8+0", "2d8"),
        ("100d1000000", "100d1000000"),
        ("1d1-1000000", "1d1-1000000"),
    ],
)
def test_allowed_formulas(text: str, normalized: str) -> None:
    assert str(parse_formula(text)) == normalized


@pytest.mark.parametrize(
    "text",
    [
        "",
        "d",
        "0d6",
        "03d6",
        "3d06",
        "1d0",
        "3 d6",
        "3d6 + 4",
        "1d6+",
        "2d6d6",
        "101d6",
        "1d1000001",
        "1d6+1000001",
        "1d6*2",
        "-3",
        "1d6+04",
        "x",
        "1" * 30,
        "1d" + "9" * 5000,
    ],
)
def test_refused_formulas_say_what_is_allowed(text: str) -> None:
    with pytest.raises(ToolFailure) as info:
        parse_formula(text)
    assert info.value.code is ErrorCode.DICE_INVALID_FORMULA
    assert "e.g. d20, 3d6+4" in info.value.message


def test_texts() -> None:
    assert describe_roll(Formula(1, 20, 0), [14]) == "Rolled 1d20: 14."
    assert describe_roll(Formula(3, 6, 4), [2, 5, 6]) == "Rolled 3d6+4: 2 + 5 + 6 + 4 = 17."
    assert describe_roll(Formula(1, 6, -2), [4]) == "Rolled 1d6-2: 4 - 2 = 2."
    assert describe_roll(Formula(2, 6, 0), [3, 4]) == "Rolled 2d6: 3 + 4 = 7."


async def test_structured_result_and_bounds() -> None:
    from tavern_agent.tools.context import CallContext

    ctx = CallContext("r", "i", "c", 1, None, None, rng=random.Random(1))  # type: ignore[arg-type]
    seen = set()
    for _ in range(300):
        outcome = await ROLL.run({"formula": "2d3-1"}, ctx)
        s = outcome.structured
        assert s["formula"] == "2d3-1" and s["modifier"] == -1
        assert (s["min"], s["max"]) == (1, 5)
        assert all(1 <= r <= 3 for r in s["rolls"]) and len(s["rolls"]) == 2
        assert s["total"] == sum(s["rolls"]) - 1
        seen.add(s["total"])
    assert seen == {1, 2, 3, 4, 5}


async def test_seeded_rolls_repeat() -> None:
    from tavern_agent.tools.context import CallContext

    def ctx() -> CallContext:
        return CallContext("r", "i", "c", 1, None, None, rng=random.Random(42))  # type: ignore[arg-type]

    a = await ROLL.run({"formula": "10d20"}, ctx())
    b = await ROLL.run({"formula": "10d20"}, ctx())
    assert a.structured == b.structured
