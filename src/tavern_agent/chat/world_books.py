"""SillyTavern world info (lorebooks): books, their entries, and cards' ``character_book``.

Every value keeps the object it was read from (``raw``), so fields this code
does not know survive a read/write round trip untouched; each entry's typed
properties read ``raw`` the way SillyTavern's ``world-info.js`` does.
"""

import copy
import itertools
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tavern_agent.chat.formats import ChatFormatError
from tavern_agent.core import json_input

# SillyTavern's world_info_position and world_info_logic values.
POSITIONS = {
    0: "before_char",
    1: "after_char",
    2: "an_top",
    3: "an_bottom",
    4: "at_depth",
    5: "em_top",
    6: "em_bottom",
    7: "outlet",
}
AND_ANY, NOT_ALL, NOT_ANY, AND_ALL = 0, 1, 2, 3
DEFAULT_WEIGHT = 100
_GROUP_SPLIT = re.compile(r",\s*")


def _keys(value: Any) -> tuple[str, ...]:
    """A key list as SillyTavern reads it: only an array counts (a string is no keys)."""
    if not isinstance(value, list):
        return ()
    return tuple(
        str(k) for k in value if isinstance(k, str | int | float) and not isinstance(k, bool)
    )


def _int(value: Any, default: int) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return default
    return default


def truthy(value: Any) -> bool:
    """JavaScript truthiness of a JSON value."""
    if isinstance(value, float) and math.isnan(value):
        return False
    return bool(value) or value == [] or value == {}


def _loose_true(value: Any) -> bool:
    """JavaScript's ``value == true`` for a JSON value (``1``, ``"1"`` and ``true``)."""
    if value is True:
        return True
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value == 1
    if isinstance(value, str):
        try:
            return float(value.strip() or "0") == 1
        except ValueError:
            return False
    return False


def _opt_bool(value: Any) -> bool | None:
    """``value ?? global``: ``None`` when unset, else its truthiness."""
    return None if value is None else truthy(value)


@dataclass(slots=True)
class WorldEntry:
    """One lorebook entry, typed view over ``raw`` with SillyTavern's reading of each field.

    ``case_sensitive``, ``match_whole_words``, ``scan_depth`` and
    ``use_group_scoring`` are ``None`` when the entry follows the global setting.
    """

    raw: dict[str, Any]
    world: str = ""

    @property
    def uid(self) -> int:
        """The entry's id within its book (0 if missing)."""
        return _int(self.raw.get("uid"), 0)

    @property
    def keys(self) -> tuple[str, ...]:
        """The primary keys whose mention activates the entry."""
        return _keys(self.raw.get("key"))

    @property
    def secondary_keys(self) -> tuple[str, ...]:
        """The optional filter keys, combined as ``selective_logic`` says."""
        return _keys(self.raw.get("keysecondary"))

    @property
    def selective(self) -> bool:
        """Secondary keys count only when set (a missing field means they are ignored)."""
        return truthy(self.raw.get("selective"))

    @property
    def selective_logic(self) -> int:
        """How secondary keys combine: AND ANY, NOT ALL, NOT
        ANY or AND ALL (unknown values read as AND ANY)."""
        logic = _int(self.raw.get("selectiveLogic"), AND_ANY)
        return logic if logic in (AND_ANY, NOT_ALL, NOT_ANY, AND_ALL) else AND_ANY

    @property
    def constant(self) -> bool:
        """Whether the entry is always active, keys or not."""
        return truthy(self.raw.get("constant"))

    @property
    def disabled(self) -> bool:
        """Whether the entry is switched off."""
        return _loose_true(self.raw.get("disable"))

    @property
    def content(self) -> str:
        """The text the entry inserts into the prompt."""
        value = self.raw.get("content")
        return value if isinstance(value, str) else ""

    @property
    def comment(self) -> str:
        """The entry's title as the user wrote it."""
        value = self.raw.get("comment")
        return value if isinstance(value, str) else ""

    @property
    def order(self) -> int:
        """The insertion order (higher comes later; 100 if missing)."""
        return _int(self.raw.get("order"), 100)

    @property
    def position(self) -> int:
        """Where the content goes in the prompt, as SillyTavern's position number."""
        return _int(self.raw.get("position"), 0)

    @property
    def position_name(self) -> str:
        """The position as a name (``before_char``, ``at_depth``, ...)."""
        return POSITIONS.get(self.position, str(self.position))

    @property
    def depth(self) -> int:
        """For an ``at_depth`` entry, how many messages
        from the end it is inserted (4 if missing)."""
        return _int(self.raw.get("depth"), 4)

    @property
    def probability(self) -> int | None:
        """``None`` when missing: a roll against it always fails, as in SillyTavern."""
        value = self.raw.get("probability")
        return None if value is None else _int(value, 0)

    @property
    def use_probability(self) -> bool:
        """Rolls only when set (a missing field means the entry never rolls)."""
        return truthy(self.raw.get("useProbability"))

    @property
    def scan_depth(self) -> int | None:
        """The entry's own scan depth in messages; ``None`` uses the global setting."""
        value = self.raw.get("scanDepth")
        return None if value is None else _int(value, 0)

    @property
    def case_sensitive(self) -> bool | None:
        """Whether keys match case-sensitively; ``None`` uses the global setting."""
        return _opt_bool(self.raw.get("caseSensitive"))

    @property
    def match_whole_words(self) -> bool | None:
        """Whether keys match whole words only; ``None`` uses the global setting."""
        return _opt_bool(self.raw.get("matchWholeWords"))

    @property
    def exclude_recursion(self) -> bool:
        """Whether other entries' content cannot activate this one."""
        return truthy(self.raw.get("excludeRecursion"))

    @property
    def prevent_recursion(self) -> bool:
        """Whether this entry's content does not activate other entries."""
        return truthy(self.raw.get("preventRecursion"))

    @property
    def delay_until_recursion(self) -> int:
        """0: off; ``true`` is level 1; a number is the recursion level it waits for."""
        value = self.raw.get("delayUntilRecursion")
        if not truthy(value):
            return 0
        return 1 if value is True else max(_int(value, 1), 1)

    @property
    def group(self) -> str:
        """The inclusion group(s) the entry belongs to (comma-separated names)."""
        value = self.raw.get("group")
        return value if isinstance(value, str) else ""

    @property
    def groups(self) -> tuple[str, ...]:
        """The inclusion groups: ``group`` split at commas (and the spaces after them)."""
        return tuple(g for g in _GROUP_SPLIT.split(self.group) if g)

    @property
    def group_override(self) -> bool:
        """Whether the entry wins its group by order instead of by chance."""
        return truthy(self.raw.get("groupOverride"))

    @property
    def group_weight(self) -> float:
        """The entry's weight in its group's random choice."""
        value = self.raw.get("groupWeight")
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        return float(DEFAULT_WEIGHT)

    @property
    def use_group_scoring(self) -> bool | None:
        """Whether the group picks by key match score; ``None`` uses the global setting."""
        return _opt_bool(self.raw.get("useGroupScoring"))

    def timed(self, kind: str) -> int:
        """``sticky``, ``cooldown`` or ``delay``: a number of messages (0 when unset)."""
        return max(_int(self.raw.get(kind), 0), 0)

    @property
    def character_filter(self) -> dict[str, Any]:
        """Which characters (names or tags) the entry is limited to or excluded from."""
        value = self.raw.get("characterFilter")
        return value if isinstance(value, dict) else {}

    def matches_extra(self, field_name: str) -> bool:
        """``matchCharacterDescription`` and its siblings: scan that text too."""
        return truthy(self.raw.get(field_name))

    @property
    def label(self) -> str:
        """A name for the entry in listings: its comment, else its first key, else its uid."""
        return self.comment or (self.keys[0] if self.keys else f"entry {self.uid}")


def js_key_order(keys: Iterable[str]) -> list[str]:
    """JavaScript's property order: integer-like keys ascending, then the others as written."""
    keys = list(keys)
    numeric = [k for k in keys if k.isdigit() and (k == "0" or not k.startswith("0"))]
    if numeric == keys and all(int(a) < int(b) for a, b in itertools.pairwise(keys)):
        return keys  # the usual case: uids in ascending order
    known = set(numeric)
    return sorted(numeric, key=int) + [k for k in keys if k not in known]


@dataclass(slots=True)
class WorldBook:
    """A lorebook: its name (the file stem in SillyTavern) and entries by map key.

    ``source`` says where SillyTavern takes the book from, which orders it
    among the others: ``chat`` (bound to the chat), ``persona``,
    ``character`` (the character's own) or ``global`` (selected globally).
    """

    name: str
    raw: dict[str, Any]
    entries: dict[str, WorldEntry] = field(default_factory=dict)
    source: str = "global"

    def encode(self) -> bytes:
        """The lorebook JSON; entries are written back from their ``raw`` objects."""
        out = dict(self.raw)
        out["entries"] = {k: e.raw for k, e in self.entries.items()}
        return json.dumps(out, ensure_ascii=False, indent=4).encode("utf-8")

    def in_scan_order(self) -> list[WorldEntry]:
        """The entries in the order SillyTavern walks ``entries`` (JavaScript key order)."""
        return [self.entries[k] for k in js_key_order(self.entries)]


def parse_world(data: bytes | Mapping[str, Any], name: str) -> WorldBook:
    """A SillyTavern world info file, or a card's ``character_book`` (converted)."""
    try:
        obj = json_input.loads(data) if isinstance(data, bytes) else copy.deepcopy(dict(data))
    except (json_input.JsonInputError, RecursionError) as exc:
        raise ChatFormatError(json_input.describe(exc)) from None
    if not isinstance(obj, dict):
        raise ChatFormatError("world info must be a JSON object")
    entries = obj.get("entries")
    if isinstance(entries, list):  # character_book (card spec V2/V3)
        return character_book_to_world(obj, name)
    if not isinstance(entries, dict):
        raise ChatFormatError("world info needs an 'entries' object")
    book = WorldBook(name, obj)
    for key, raw in entries.items():
        if not isinstance(raw, dict):
            raise ChatFormatError(f"world info entry {key!r} is not an object")
        book.entries[str(key)] = WorldEntry(raw, name)
    return book


# character_book entry extension → world info field, with SillyTavern's default.
_BOOK_EXTENSIONS: tuple[tuple[str, str, Any], ...] = (
    ("exclude_recursion", "excludeRecursion", False),
    ("prevent_recursion", "preventRecursion", False),
    ("delay_until_recursion", "delayUntilRecursion", False),
    ("probability", "probability", 100),
    ("useProbability", "useProbability", True),
    ("depth", "depth", 4),
    ("selectiveLogic", "selectiveLogic", AND_ANY),
    ("group", "group", ""),
    ("group_override", "groupOverride", False),
    ("group_weight", "groupWeight", DEFAULT_WEIGHT),
    ("scan_depth", "scanDepth", None),
    ("case_sensitive", "caseSensitive", None),
    ("match_whole_words", "matchWholeWords", None),
    ("use_group_scoring", "useGroupScoring", None),
    ("automation_id", "automationId", ""),
    ("role", "role", 0),
    ("vectorized", "vectorized", False),
    ("sticky", "sticky", None),
    ("cooldown", "cooldown", None),
    ("delay", "delay", None),
    ("match_persona_description", "matchPersonaDescription", False),
    ("match_character_description", "matchCharacterDescription", False),
    ("match_character_personality", "matchCharacterPersonality", False),
    ("match_character_depth_prompt", "matchCharacterDepthPrompt", False),
    ("match_scenario", "matchScenario", False),
    ("match_creator_notes", "matchCreatorNotes", False),
)


def character_book_to_world(book: Mapping[str, Any], name: str) -> WorldBook:
    """A card's ``character_book`` as world info, the way SillyTavern imports it.

    As SillyTavern's ``convertCharacterBook``: keys are taken as they are; an
    entry without ``enabled: true`` is disabled; ``extensions.position`` wins,
    else ``position: "before_char"`` is before the character and anything
    else (no position too) after it; SillyTavern's own fields come from each
    entry's ``extensions`` only (a top-level ``case_sensitive`` is ignored).
    The card's book is kept whole under ``originalData``.
    """
    entries = book.get("entries")
    world = WorldBook(book.get("name") or name, {"entries": {}, "originalData": dict(book)})
    world.source = "character"
    for index, item in enumerate(entries if isinstance(entries, list) else []):
        if not isinstance(item, dict):
            continue
        found = item.get("extensions")
        ext: dict[str, Any] = found if isinstance(found, dict) else {}
        uid = item.get("id", index)
        position = ext.get("position")
        if position is None:
            position = 0 if item.get("position") == "before_char" else 1
        raw: dict[str, Any] = {
            "uid": uid,
            "key": item.get("keys"),
            "keysecondary": item.get("secondary_keys") or [],
            "comment": item.get("comment") or "",
            "content": item.get("content"),
            "constant": item.get("constant") or False,
            "selective": item.get("selective") or False,
            "order": item.get("insertion_order"),
            "position": position,
            "disable": not truthy(item.get("enabled")),
            "addMemo": truthy(item.get("comment")),
            "displayIndex": ext.get("display_index", index),
        }
        for ext_name, field_name, default in _BOOK_EXTENSIONS:
            value = ext.get(ext_name)
            raw[field_name] = default if value is None else value
        raw["extensions"] = ext
        world.entries[str(uid)] = WorldEntry(raw, world.name)
    return world
