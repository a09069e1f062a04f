"""SillyTavern's chat files (JSONL); world info is in :mod:`tavern_agent.chat.world_books`,
character cards in :mod:`tavern_agent.chat.cards`.

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

import contextlib
import gc
import hashlib
import json
import re
from collections.abc import Callable, Iterator, Mapping
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
    if text.isascii():  # O(1): most texts, and they cannot hold a surrogate
        return text
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
        """The message's JSON object, parsed from its line on first use;
        raises ``ChatFormatError`` if the line no longer parses."""
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
        """The speaker's name as the chat gives it."""
        return well_formed(str(self.raw.get("name") or ""))

    @property
    def mes(self) -> str:
        """The message text (``""`` when missing or not text)."""
        value = self.raw.get("mes")
        return well_formed(value) if isinstance(value, str) else ""

    @property
    def is_user(self) -> bool:
        """Whether the user wrote the message."""
        return self.raw.get("is_user") is True

    @property
    def is_system(self) -> bool:
        """The raw ``is_system`` flag, which SillyTavern sets to hide a message from the prompt."""
        return self.raw.get("is_system") is True

    @property
    def extra(self) -> dict[str, Any]:
        """The message's ``extra`` object (``{}`` when missing)."""
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
        """Which swipe is shown (0 when missing)."""
        value = self.raw.get("swipe_id")
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    @property
    def swipe_count(self) -> int:
        """How many swipes the message has (1 without a swipe list)."""
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
        """The message's JSON line: the bytes as read when it is unchanged."""
        return self.line if self.line is not None else encode_line(self.raw)


@dataclass(frozen=True, slots=True)
class SkippedLine:
    """A line with content that is not a JSON object: SillyTavern skips it, and so do we.

    ``line`` is its 1-based number in the file; ``before`` counts the records
    (header and messages) read before it; ``first`` is true when no line with
    content comes before it.
    """

    line: int
    before: int
    first: bool


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
    skipped: list[SkippedLine] = field(default_factory=list)

    @property
    def header_unreadable(self) -> bool:
        """Whether the file's first line with content was skipped (not a JSON object)."""
        return bool(self.skipped) and self.skipped[0].before == 0 and self.skipped[0].first

    def refuse_unreadable_header(self, path: object) -> None:
        """Raise :class:`ChatFormatError` naming ``path`` when the header line is unreadable.

        A run refuses such a chat before its model is asked: its commit would
        write into a file whose metadata SillyTavern can no longer find.
        """
        if self.header_unreadable:
            raise ChatFormatError(
                f"{path}: line {self.skipped[0].line}, the chat's header, is not a JSON object; "
                "repair it (or open and save the chat in SillyTavern), then run again"
            )

    def skipped_text(self) -> str:
        """The skipped lines in one phrase: ``lines 3, 9`` (empty when none)."""
        numbers = [str(s.line) for s in self.skipped]
        if len(numbers) > 12:
            numbers = [*numbers[:10], f"… ({len(numbers)} in all)"]
        return ("line " if len(self.skipped) == 1 else "lines ") + ", ".join(numbers)

    def skipped_warning(self, path: object) -> str:
        """One line for the user naming the file and its skipped lines (empty when none)."""
        if not self.skipped:
            return ""
        verb = "is" if len(self.skipped) == 1 else "are"
        return (
            f"tavern-agent: warning: {path}: {self.skipped_text()} {verb} not readable "
            "(not a JSON object); skipped, as SillyTavern skips them"
        )

    def missing_floors(self) -> str:
        """Where the skipped lines stand among the floors, for the model (empty when none)."""
        if not self.skipped:
            return ""
        places = []
        for s in self.skipped[:10]:
            floor = s.before - (1 if self.has_header else 0)
            places.append(f"before floor {floor}" if floor >= 0 else "before the first floor")
        more = f" and {len(self.skipped) - 10} more" if len(self.skipped) > 10 else ""
        return (
            f"{len(self.skipped)} line(s) of the chat file could not be read, so those "
            f"messages are missing ({'; '.join(places)}{more}); SillyTavern skips them too."
        )

    @property
    def metadata(self) -> dict[str, Any]:
        """The header's ``chat_metadata`` object (``{}`` when missing)."""
        value = self.header.get("chat_metadata")
        return value if isinstance(value, dict) else {}

    @property
    def integrity(self) -> str | None:
        """SillyTavern's integrity id of the chat, if it has one."""
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
        header only says ``"unused"``); empty when neither is known. Narrator
        and other system-typed messages (``extra.type``, e.g. ``/sys``) speak
        for nobody.
        """
        name = self.user_name if user else self.character_name
        if name:
            return name
        for message in reversed(self.messages):
            typed = bool(message.extra.get("type"))
            if message.is_user == user and message.name and not message.is_system and not typed:
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
        """The whole chat file as bytes, keeping the original
        line breaks and whitespace between lines."""
        records = self.records()
        if self.gaps is None:
            body = self.newline.join(records)
            return body + self.newline if self.trailing_newline and records else body
        known = len(self.gaps) - 1
        tail = self.gaps[known]
        out = bytearray()
        for at, record in enumerate(records):
            if at < known:
                out += self.gaps[at]
            elif at == known and tail.strip():
                # Skipped lines at the end (a truncated last line) stay where they
                # are; the new record starts on a line of its own after them.
                out += tail if tail.endswith(b"\n") else tail + self.newline
            else:
                out += self.newline
            out += record
        if len(records) <= known or not tail.strip():
            out += tail
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
    skipped: list[SkippedLine] = []
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
            if line.strip():
                leading = not records and not skipped
                skipped.append(SkippedLine(at + 1, len(records), leading))
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
    chat.skipped = skipped
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
