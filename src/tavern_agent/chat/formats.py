"""SillyTavern's file formats: chat JSONL, world info (lorebook) JSON, character cards.

Every value keeps the object it was read from (``raw``), so fields this code
does not know survive a read/write round trip untouched. A chat keeps each
line's original bytes too: writing a chat re-encodes only the lines that
changed, so every other line stays byte-identical.

Chat JSONL (SillyTavern ``public/script.js``, ``saveChat``): line 1 is a header
``{user_name, character_name, create_date, chat_metadata}`` (since 1.13
``{chat_metadata, user_name: "unused", character_name: "unused"}``); each
further line is one message ``{name, is_user, is_system, send_date, mes,
swipes, swipe_id, swipe_info, extra, …}``. A group chat has the same shape;
its messages carry each speaker's ``name``, and one saved by SillyTavern 1.12
or earlier has no header line. SillyTavern writes lines with
``JSON.stringify``: compact, non-ASCII kept, ``\\n`` between lines, no final
newline; it reads any line ``JSON.parse`` accepts and skips the others.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import copy
import gc
import hashlib
import itertools
import json
import math
import re
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tavern_agent.chat.dates import send_date
from tavern_agent.core import json_input

# ---------------------------------------------------------------- chat JSONL


class ChatFormatError(ValueError):
    """A chat, world info or card file that cannot be read as SillyTavern writes it."""


def encode_line(obj: Mapping[str, Any]) -> bytes:
    """One JSONL line as ``JSON.stringify`` writes it (compact, non-ASCII kept)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


_SURROGATE = re.compile("[\ud800-\udfff]")


def well_formed(text: str) -> str:
    """``text`` with lone UTF-16 surrogates replaced by U+FFFD.

    ``JSON.stringify`` writes a surrogate half it finds (an emoji cut
    mid-stream) as a ``\\udXXX`` escape, which Python reads back as a lone
    surrogate that cannot be encoded; SillyTavern shows U+FFFD for it.
    """
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


class ChatMessage:
    """One message line. ``line`` is the original bytes, ``None`` once changed.

    ``raw`` may be left ``None`` for a line already known to parse (see
    :func:`parse_chat`'s ``known``); it is then parsed when first used.
    """

    __slots__ = ("_raw", "line")

    def __init__(self, raw: dict[str, Any] | None, line: bytes | None = None) -> None:
        if raw is None and line is None:
            raise ValueError("a message needs its object or its line")
        self._raw = raw
        self.line = line

    @property
    def raw(self) -> dict[str, Any]:
        if self._raw is None:
            assert self.line is not None
            found = _json_object(self.line)
            if found is None:
                raise ChatFormatError("a chat line changed under a known digest")
            self._raw = found
        return self._raw

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ChatMessage):
            return NotImplemented
        return (self.raw, self.line) == (other.raw, other.line)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ChatMessage(raw={self.raw!r}, line={self.line!r})"

    @property
    def name(self) -> str:
        return well_formed(str(self.raw.get("name") or ""))

    @property
    def mes(self) -> str:
        value = self.raw.get("mes")
        return well_formed(value) if isinstance(value, str) else ""

    @property
    def is_user(self) -> bool:
        return self.raw.get("is_user") is True

    @property
    def is_system(self) -> bool:
        return self.raw.get("is_system") is True

    @property
    def extra(self) -> dict[str, Any]:
        value = self.raw.get("extra")
        return value if isinstance(value, dict) else {}

    @property
    def role(self) -> str:
        """``user``; ``system`` for narrator messages (``extra.type``); else ``assistant``."""
        if self.is_user:
            return "user"
        if self.extra.get("type") in ("narrator", "system"):
            return "system"
        return "assistant"

    @property
    def hidden(self) -> bool:
        """SillyTavern hides a message from the prompt by setting ``is_system``."""
        return self.is_system

    @property
    def swipe_id(self) -> int:
        value = self.raw.get("swipe_id")
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    @property
    def swipe_count(self) -> int:
        swipes = self.raw.get("swipes")
        return len(swipes) if isinstance(swipes, list) else 1

    def set_text(self, text: str) -> None:
        """Change ``mes`` (and the current swipe, as SillyTavern keeps them equal)."""
        self.raw["mes"] = text
        swipes = self.raw.get("swipes")
        if isinstance(swipes, list) and 0 <= self.swipe_id < len(swipes):
            swipes[self.swipe_id] = text
        self.line = None

    def encoded(self) -> bytes:
        return self.line if self.line is not None else encode_line(self.raw)


# The names SillyTavern 1.13+ writes into every header instead of the real ones.
UNUSED_NAME = "unused"


@dataclass(slots=True)
class ChatFile:
    """A whole chat file: header, messages and the bytes between them.

    ``has_header`` is false for a group chat saved by SillyTavern 1.12 or
    earlier, whose first line is already a message. ``gaps`` holds, for the
    records (header and messages) the file was read with, the bytes before
    each record and after the last one: line ends (``\\n`` or ``\\r\\n``),
    blank lines, and lines SillyTavern skips because they are not JSON
    objects. ``None`` means plain ``newline`` between records and nothing
    after the last. Records added later are joined with ``newline``.
    """

    header: dict[str, Any]
    messages: list[ChatMessage]
    header_line: bytes | None = None
    newline: bytes = b"\n"
    trailing_newline: bool = False
    has_header: bool = True
    gaps: list[bytes] | None = None

    @property
    def metadata(self) -> dict[str, Any]:
        value = self.header.get("chat_metadata")
        return value if isinstance(value, dict) else {}

    @property
    def integrity(self) -> str | None:
        value = self.metadata.get("integrity")
        return value if isinstance(value, str) and value else None

    @property
    def character_name(self) -> str:
        """The header's character name; empty when SillyTavern wrote ``"unused"`` there."""
        return _header_name(self.header.get("character_name"))

    @property
    def user_name(self) -> str:
        """The header's user name; empty when SillyTavern wrote ``"unused"`` there."""
        return _header_name(self.header.get("user_name"))

    def speaker(self, *, user: bool) -> str:
        """Who the chat is with (or, ``user=True``, who the user is).

        The header's name, else the newest speaker of that side (a 1.13+
        header only says ``"unused"``); empty when neither is known.
        """
        name = self.user_name if user else self.character_name
        if name:
            return name
        for message in reversed(self.messages):
            if message.is_user == user and message.name and not message.is_system:
                return message.name
        return ""

    def stable_id(self, fallback: str) -> str:
        """``chat_metadata.integrity``; without one, ``fallback`` plus the creation date."""
        if self.integrity:
            return self.integrity
        seed = f"{fallback}\n{self.header.get('create_date', '')}"
        return "file-" + hashlib.sha256(seed.encode("utf-8")).hexdigest()[:32]

    def records(self) -> list[bytes]:
        """The JSON lines of the file, header first (when it has one)."""
        head = [self.header_line if self.header_line is not None else encode_line(self.header)]
        return (head if self.has_header else []) + [m.encoded() for m in self.messages]

    def encode(self) -> bytes:
        records = self.records()
        if self.gaps is None:
            body = self.newline.join(records)
            return body + self.newline if self.trailing_newline and records else body
        known = len(self.gaps) - 1
        out = bytearray()
        for at, record in enumerate(records):
            out += self.gaps[at] if at < known else self.newline
            out += record
        out += self.gaps[known]
        return bytes(out)


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many long-lived objects.

    Parsing a 100,000-floor chat or indexing it allocates millions of objects
    that all survive; each automatic collection on the way re-scans them, which
    costs more than the work itself. Nothing built here forms cycles.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _header_name(value: Any) -> str:
    name = str(value or "")
    return "" if name == UNUSED_NAME else name


def _json_object(line: bytes) -> dict[str, Any] | None:
    """The JSON object on a line, or ``None`` when SillyTavern would skip the line.

    SillyTavern reads a chat with Node (invalid UTF-8 becomes U+FFFD) and
    ``JSON.parse`` on each line, dropping lines that do not parse.
    """
    try:
        obj = json_input.loads(line)
    except json_input.JsonInputError:
        # Not UTF-8 (Node reads it with U+FFFD), or not JSON, or nested too deeply.
        try:
            obj = json_input.loads(line.decode("utf-8", errors="replace"))
        except json_input.JsonInputError:
            return None
    return obj if isinstance(obj, dict) else None


def _is_header(obj: Mapping[str, Any]) -> bool:
    """Whether a chat's first record is its header rather than a message.

    A header carries ``chat_metadata`` (SillyTavern since 2023) or at least no
    ``mes``; a group chat saved by SillyTavern 1.12 or earlier starts right
    away with a message, which has ``mes`` and no ``chat_metadata``.
    """
    return "chat_metadata" in obj or "mes" not in obj


_LATER: dict[str, Any] = {}  # stands for a known line, parsed when used


def parse_chat(data: bytes, *, known: Callable[[bytes], bool] | None = None) -> ChatFile:
    """Read a chat JSONL file the way SillyTavern does.

    Lines are split at ``\\n`` (a ``\\r`` before it is kept as part of the
    line end); blank lines and lines that are not JSON objects are skipped, as
    SillyTavern skips them, but kept for writing the file back. The first
    record is the header unless it is a message (see :func:`_is_header`). An
    empty file is a chat without header or messages.

    Message lines for which ``known(line)`` is true are taken as valid and
    parsed only when used (a caller that has seen those exact bytes parse
    before). ``known`` is called once for each line that holds a record after
    the first, in order.
    """
    if data.startswith(b"\xef\xbb\xbf"):
        raise ChatFormatError("the chat file starts with a byte order mark")
    records: list[tuple[bytes, dict[str, Any] | None]] = []
    gaps: list[bytes] = []
    pending = bytearray()  # the bytes since the last record
    pieces = data.split(b"\n")
    last = len(pieces) - 1
    for at, piece in enumerate(pieces):
        end = b"" if at == last else b"\n"
        # JSON.parse ignores white space around the object (a "\r" of a CRLF file too).
        line = piece if piece[:1] == b"{" and piece[-1:] == b"}" else piece.strip(b" \t\r")
        obj: dict[str, Any] | None = None
        if line[:1] == b"{":
            # A line ``known`` vouches for is parsed when first used.
            later = records and known is not None and known(line)
            obj = _LATER if later else _json_object(line)
        if obj is None:
            pending += piece + end
            continue
        start = 0 if line is piece else piece.index(line)
        gaps.append(bytes(pending) + piece[:start])
        records.append((line, None if obj is _LATER else obj))
        pending = bytearray(piece[start + len(line) :] + end)
    gaps.append(bytes(pending))
    header: dict[str, Any] = {}
    header_line: bytes | None = None
    has_header = bool(records)  # an empty file has no header line yet
    if records:
        first = records[0][1]
        if first is not None and _is_header(first):
            header, header_line = first, records[0][0]
            records = records[1:]
        else:
            has_header = False
    messages = [ChatMessage(obj, line) for line, obj in records]
    newline = b"\r\n" if b"\r\n" in data[:65536] else b"\n"
    chat = ChatFile(header, messages, header_line, newline, has_header=has_header)
    plain = gaps[0] == b"" and all(g == b"\n" for g in gaps[1:-1]) and gaps[-1] in (b"", b"\n")
    if plain and newline == b"\n":
        chat.trailing_newline = len(gaps) > 1 and gaps[-1] == b"\n"
    else:
        chat.gaps = gaps
    return chat


def new_message(
    name: str,
    text: str,
    *,
    is_user: bool = False,
    extra: Mapping[str, Any] | None = None,
    date: str | int | None = None,
) -> ChatMessage:
    """A message line in SillyTavern's shape, with one swipe (``date``: its ``send_date``)."""
    date = send_date() if date is None else date
    raw: dict[str, Any] = {
        "name": name,
        "is_user": is_user,
        "is_system": False,
        "send_date": date,
        "mes": text,
        "swipes": [text],
        "swipe_id": 0,
        "swipe_info": [{"send_date": date, "extra": {}}],
        "extra": dict(extra or {}),
    }
    return ChatMessage(raw)


# ---------------------------------------------------------------- world info

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
        return _int(self.raw.get("uid"), 0)

    @property
    def keys(self) -> tuple[str, ...]:
        return _keys(self.raw.get("key"))

    @property
    def secondary_keys(self) -> tuple[str, ...]:
        return _keys(self.raw.get("keysecondary"))

    @property
    def selective(self) -> bool:
        """Secondary keys count only when set (a missing field means they are ignored)."""
        return truthy(self.raw.get("selective"))

    @property
    def selective_logic(self) -> int:
        logic = _int(self.raw.get("selectiveLogic"), AND_ANY)
        return logic if logic in (AND_ANY, NOT_ALL, NOT_ANY, AND_ALL) else AND_ANY

    @property
    def constant(self) -> bool:
        return truthy(self.raw.get("constant"))

    @property
    def disabled(self) -> bool:
        return _loose_true(self.raw.get("disable"))

    @property
    def content(self) -> str:
        value = self.raw.get("content")
        return value if isinstance(value, str) else ""

    @property
    def comment(self) -> str:
        value = self.raw.get("comment")
        return value if isinstance(value, str) else ""

    @property
    def order(self) -> int:
        return _int(self.raw.get("order"), 100)

    @property
    def position(self) -> int:
        return _int(self.raw.get("position"), 0)

    @property
    def position_name(self) -> str:
        return POSITIONS.get(self.position, str(self.position))

    @property
    def depth(self) -> int:
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
        value = self.raw.get("scanDepth")
        return None if value is None else _int(value, 0)

    @property
    def case_sensitive(self) -> bool | None:
        return _opt_bool(self.raw.get("caseSensitive"))

    @property
    def match_whole_words(self) -> bool | None:
        return _opt_bool(self.raw.get("matchWholeWords"))

    @property
    def exclude_recursion(self) -> bool:
        return truthy(self.raw.get("excludeRecursion"))

    @property
    def prevent_recursion(self) -> bool:
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
        value = self.raw.get("group")
        return value if isinstance(value, str) else ""

    @property
    def groups(self) -> tuple[str, ...]:
        """The inclusion groups: ``group`` split at commas (and the spaces after them)."""
        return tuple(g for g in _GROUP_SPLIT.split(self.group) if g)

    @property
    def group_override(self) -> bool:
        return truthy(self.raw.get("groupOverride"))

    @property
    def group_weight(self) -> float:
        value = self.raw.get("groupWeight")
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        return float(DEFAULT_WEIGHT)

    @property
    def use_group_scoring(self) -> bool | None:
        return _opt_bool(self.raw.get("useGroupScoring"))

    def timed(self, kind: str) -> int:
        """``sticky``, ``cooldown`` or ``delay``: a number of messages (0 when unset)."""
        return max(_int(self.raw.get(kind), 0), 0)

    @property
    def character_filter(self) -> dict[str, Any]:
        value = self.raw.get("characterFilter")
        return value if isinstance(value, dict) else {}

    def matches_extra(self, field_name: str) -> bool:
        """``matchCharacterDescription`` and its siblings: scan that text too."""
        return truthy(self.raw.get(field_name))

    @property
    def label(self) -> str:
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


# ---------------------------------------------------------------- character cards

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CARD_KEYWORDS = ("ccv3", "chara")  # V3 wins when both are present, as in SillyTavern


@dataclass(slots=True)
class CharacterCard:
    """A character card (spec V1, V2 or V3). ``raw`` is the whole card JSON."""

    raw: dict[str, Any]

    @property
    def spec(self) -> str:
        return str(self.raw.get("spec") or "chara_card_v1")

    @property
    def data(self) -> dict[str, Any]:
        data = self.raw.get("data")
        return data if isinstance(data, dict) else self.raw

    @property
    def name(self) -> str:
        return str(self.data.get("name") or self.raw.get("name") or "")

    def book(self) -> WorldBook | None:
        """The embedded ``character_book`` as world info, if the card has one."""
        book = self.data.get("character_book")
        if not isinstance(book, dict):
            return None
        return character_book_to_world(book, book.get("name") or f"{self.name}'s Lorebook")


def parse_card(data: bytes) -> CharacterCard:
    """A card from JSON bytes or from a PNG with a ``ccv3`` / ``chara`` text chunk."""
    if data.startswith(PNG_SIGNATURE):
        chunks = png_text_chunks(data)
        for keyword in _CARD_KEYWORDS:
            if keyword in chunks:
                try:
                    data = base64.b64decode(chunks[keyword], validate=False)
                except (binascii.Error, ValueError) as exc:
                    raise ChatFormatError(f"the {keyword} chunk is not base64: {exc}") from None
                break
        else:
            raise ChatFormatError("the PNG has no chara or ccv3 text chunk")
    try:
        obj = json_input.loads(data)
    except json_input.JsonInputError as exc:
        raise ChatFormatError(str(exc)) from None
    if not isinstance(obj, dict):
        raise ChatFormatError("a card must be a JSON object")
    return CharacterCard(obj)


def _chunks(data: bytes) -> Iterable[tuple[bytes, bytes, int, int]]:
    """``(type, body, start, end)`` of each PNG chunk."""
    pos = len(PNG_SIGNATURE)
    while pos + 8 <= len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        end = pos + 12 + length
        if end > len(data):
            raise ChatFormatError("the PNG is truncated")
        yield kind, data[pos + 8 : pos + 8 + length], pos, end
        pos = end
        if kind == b"IEND":
            return


def png_text_chunks(data: bytes) -> dict[str, bytes]:
    """Keyword → text of the ``tEXt`` chunks (what SillyTavern writes cards into)."""
    found: dict[str, bytes] = {}
    for kind, body, _, _ in _chunks(data):
        if kind == b"tEXt" and b"\0" in body:
            keyword, _, text = body.partition(b"\0")
            found[keyword.decode("latin-1").lower()] = text
    return found


def _chunk(kind: bytes, body: bytes) -> bytes:
    crc = zlib.crc32(kind + body) & 0xFFFFFFFF
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)


def write_card_png(png: bytes, card: Mapping[str, Any]) -> bytes:
    """``png`` with its card chunks replaced: ``chara`` always, ``ccv3`` for a V3 card.

    Like SillyTavern, the ``chara`` chunk holds the card as V2 (``spec`` set
    to ``chara_card_v2``) and the ``ccv3`` chunk the V3 card.
    """
    if not png.startswith(PNG_SIGNATURE):
        raise ChatFormatError("not a PNG")
    kept = [
        data
        for kind, body, start, end in _chunks(png)
        for data in [png[start:end]]
        if not (kind == b"tEXt" and body.split(b"\0", 1)[0].lower() in (b"chara", b"ccv3"))
    ]
    iend = kept.pop() if kept and kept[-1][4:8] == b"IEND" else _chunk(b"IEND", b"")
    v2 = dict(card)
    if str(card.get("spec")) == "chara_card_v3":
        v2["spec"], v2["spec_version"] = "chara_card_v2", "2.0"
    text = [_chunk(b"tEXt", b"chara\0" + base64.b64encode(encode_line(v2)))]
    if str(card.get("spec")) == "chara_card_v3":
        text.append(_chunk(b"tEXt", b"ccv3\0" + base64.b64encode(encode_line(card))))
    return PNG_SIGNATURE + b"".join(kept) + b"".join(text) + iend
