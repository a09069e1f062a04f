"""SillyTavern character cards (spec V1, V2, V3): JSON, or a PNG with the card in a text chunk.

A card keeps its whole JSON (``raw``); writing a PNG replaces only the card's
text chunks and keeps every other chunk byte for byte.
"""

import base64
import binascii
import struct
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tavern_agent.chat.formats import ChatFormatError, encode_line
from tavern_agent.chat.world_books import WorldBook, character_book_to_world
from tavern_agent.core import json_input

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CARD_KEYWORDS = ("ccv3", "chara")  # V3 wins when both are present, as in SillyTavern


@dataclass(slots=True)
class CharacterCard:
    """A character card (spec V1, V2 or V3). ``raw`` is the whole card JSON."""

    raw: dict[str, Any]

    @property
    def spec(self) -> str:
        """The card format the file declares (``chara_card_v2``, ...; ``chara_card_v1`` if none)."""
        return str(self.raw.get("spec") or "chara_card_v1")

    @property
    def data(self) -> dict[str, Any]:
        """The card's fields: its ``data`` object (V2/V3), else the top level (V1)."""
        data = self.raw.get("data")
        return data if isinstance(data, dict) else self.raw

    @property
    def name(self) -> str:
        """The character's name, or ``""`` when the card gives none."""
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
    return CharacterCard(
        json_input.load_object(data, ChatFormatError, "a card must be a JSON object")
    )


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
