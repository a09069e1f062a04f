"""SillyTavern's macros in world info keys and entry text (``substituteParams``).

SillyTavern substitutes macros in every key before matching it and in an
activated entry's content before it goes into the prompt. Macro names are
case-insensitive; a macro it does not know stays as written. Substituted here:

* ``{{user}}`` / ``<USER>``: the user's (persona) name;
* ``{{char}}`` / ``<BOT>`` / ``<CHAR>``: the character's name;
* ``{{group}}``: the group's member names, comma-separated (the character's
  name outside a group); ``{{charIfNotGroup}}``: the character's name outside
  a group, the member names in one;
* ``{{persona}}``, ``{{description}}``, ``{{personality}}``, ``{{scenario}}``:
  those texts of the persona and the card;
* ``{{newline}}``: a line break; ``{{noop}}``: nothing.

Macros that depend on the moment or on randomness (``{{time}}``,
``{{random}}``, ``{{roll}}``) are left as written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_MACRO = re.compile(r"\{\{([A-Za-z]+)\}\}|<(USER|BOT|CHAR)>", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class MacroValues:
    """The names and texts macros stand for in one chat."""

    user: str = "User"
    char: str = ""
    group: tuple[str, ...] = ()  # member names in a group chat
    persona: str = ""
    description: str = ""
    personality: str = ""
    scenario: str = ""

    def table(self) -> dict[str, str]:
        """What each macro name (``user``, ``char``, ``group``, ...) stands for."""
        members = ", ".join(self.group)
        return {
            "user": self.user,
            "char": self.char,
            "bot": self.char,
            "group": members or self.char,
            "charifnotgroup": members or self.char,
            "persona": self.persona,
            "description": self.description,
            "personality": self.personality,
            "scenario": self.scenario,
            "newline": "\n",
            "noop": "",
        }


def substitute(text: str, values: MacroValues) -> str:
    """``text`` with the macros above replaced (a fast no-op without ``{{`` or ``<``)."""
    if "{{" not in text and "<" not in text:
        return text
    table = values.table()

    def one(found: re.Match[str]) -> str:
        name = (found.group(1) or found.group(2)).lower()
        if found.group(2) is not None:  # <USER>, <BOT>, <CHAR>
            return values.user if name == "user" else values.char
        value = table.get(name)
        return found.group(0) if value is None else value

    return _MACRO.sub(one, text)
