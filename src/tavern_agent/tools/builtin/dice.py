"""``dice.roll``: roll dice from a formula like ``3d6+4``."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

from tavern_agent.core.descriptors import object_schema
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.results import ToolFailure, ToolOutcome
from tavern_agent.tools.builtin.registry import builtin_tool
from tavern_agent.tools.context import CallContext

MAX_COUNT = 100
MAX_SIDES = 1_000_000
MAX_MODIFIER = 1_000_000
_MAX_FORMULA_CHARS = 24

_NUMBER = r"[1-9][0-9]*"
_FORMULA = re.compile(
    rf"(?:(?P<count>{_NUMBER})?d(?P<sides>{_NUMBER})(?P<mod>[+-](?:0|{_NUMBER}))?|(?P<bare>{_NUMBER}))",
    re.IGNORECASE,
)
_ALLOWED = (
    "Use [count]d<sides>[+|-modifier] with no spaces, e.g. d20, 3d6+4, 2d8-1, "
    f"or a bare number N for 1dN (count 1-{MAX_COUNT}, sides 1-{MAX_SIDES}, "
    f"modifier up to ±{MAX_MODIFIER})."
)


@dataclass(frozen=True, slots=True)
class Formula:
    """A parsed dice formula: ``count`` dice of ``sides`` sides, plus ``modifier``."""

    count: int
    sides: int
    modifier: int

    def __str__(self) -> str:
        if self.modifier > 0:
            return f"{self.count}d{self.sides}+{self.modifier}"
        if self.modifier < 0:
            return f"{self.count}d{self.sides}-{-self.modifier}"
        return f"{self.count}d{self.sides}"


def parse_formula(text: str) -> Formula:
    """Parse a dice formula or raise ``ToolFailure(dice.invalid_formula)``."""
    # The length cap keeps int() away from huge digit strings.
    match = _FORMULA.fullmatch(text) if len(text) <= _MAX_FORMULA_CHARS else None
    if match is None:
        raise ToolFailure(ErrorCode.DICE_INVALID_FORMULA, f"Invalid formula {text!r}. {_ALLOWED}")
    if match["bare"]:
        count, sides, modifier = 1, int(match["bare"]), 0
    else:
        count = int(match["count"] or 1)
        sides = int(match["sides"])
        modifier = int(match["mod"] or 0)
    problem = None
    if count > MAX_COUNT:
        problem = f"at most {MAX_COUNT} dice"
    elif sides > MAX_SIDES:
        problem = f"at most {MAX_SIDES} sides"
    elif abs(modifier) > MAX_MODIFIER:
        problem = f"a modifier of at most ±{MAX_MODIFIER}"
    if problem:
        raise ToolFailure(
            ErrorCode.DICE_INVALID_FORMULA, f"Invalid formula {text!r}: {problem}. {_ALLOWED}"
        )
    return Formula(count, sides, modifier)


def describe_roll(formula: Formula, rolls: list[int], text: str | None = None) -> str:
    """The model's text for a roll: each die, the modifier and the total."""
    total = sum(rolls) + formula.modifier
    text = text or str(formula)
    if len(rolls) == 1 and formula.modifier == 0:
        return f"Rolled {text}: {total}."
    terms = " + ".join(map(str, rolls))
    if formula.modifier > 0:
        terms += f" + {formula.modifier}"
    elif formula.modifier < 0:
        terms += f" - {-formula.modifier}"
    return f"Rolled {text}: {terms} = {total}."


PARAMETERS: dict[str, Any] = object_schema(
    {
        "formula": {
            "type": "string",
            "description": "Dice to roll: d20, 3d6+4, 2d8-1, or N for 1dN.",
        }
    },
    "formula",
)


@builtin_tool(
    "dice.roll",
    description="Roll dice for chance outcomes in the story; returns each die and the total.",
    parameters=PARAMETERS,
    repeatable=True,
)
async def ROLL(args: dict[str, Any], ctx: CallContext) -> ToolOutcome:
    """``dice.roll``: rolls the formula with the invocation's random source."""
    text, structured = roll_dice(args["formula"], ctx.rng)
    return ToolOutcome(text, structured)


def roll_dice(formula_text: str, rng: random.Random) -> tuple[str, dict[str, Any]]:
    """Roll a formula: the result text and the structured record."""
    formula = parse_formula(formula_text)
    draw, sides = rng.random, formula.sides
    # int(random() * sides) is uniform on 0..sides-1 to within 2**-53 per face.
    rolls = [int(draw() * sides) + 1 for _ in range(formula.count)]
    total = sum(rolls) + formula.modifier
    text = str(formula)
    structured = {
        "formula": text,
        "rolls": rolls,
        "modifier": formula.modifier,
        "total": total,
        "min": formula.count + formula.modifier,
        "max": formula.count * formula.sides + formula.modifier,
    }
    return describe_roll(formula, rolls, text), structured
