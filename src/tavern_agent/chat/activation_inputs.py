"""What a world info activation takes: the global settings, the chat's context, its messages.

The rules are in :mod:`tavern_agent.chat.activation`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tavern_agent.chat.macros import MacroValues

# Entry flags that add a text to what the entry scans, and the ScanContext text each adds.
EXTRA_TEXTS = (
    "matchPersonaDescription",
    "matchCharacterDescription",
    "matchCharacterPersonality",
    "matchCharacterDepthPrompt",
    "matchScenario",
    "matchCreatorNotes",
)
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


@dataclass(frozen=True, slots=True)
class ScanMessage:
    """One chat message as activation scans it: the speaker's name and the text."""

    name: str
    mes: str
