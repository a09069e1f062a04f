"""SillyTavern files: chat JSONL, world info and character cards, read and written faithfully."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tavern_agent.chat.cards import parse_card, png_text_chunks, write_card_png
from tavern_agent.chat.formats import ChatFormatError, encode_line, parse_chat
from tavern_agent.chat.world_books import parse_world
from tests.chat.helpers import ELDORIA, header, line, message, write_chat


def test_chat_round_trip_is_byte_identical(tmp_path: Path) -> None:
    for trailing in (False, True):
        path = write_chat(
            tmp_path / f"c{trailing}.jsonl",
            ["hello", "世界へようこそ 🌲", "line one\nline two"],
            trailing_newline=trailing,
        )
        data = path.read_bytes()
        chat = parse_chat(data)
        assert chat.encode() == data
        assert chat.integrity == "4f1c-test-integrity"
        assert [m.role for m in chat.messages] == ["user", "assistant", "user"]
        assert chat.messages[1].swipe_count == 2


def test_stable_identity_prefers_integrity(tmp_path: Path) -> None:
    chat = parse_chat(write_chat(tmp_path / "a.jsonl", ["x"]).read_bytes())
    assert chat.stable_id("/elsewhere/renamed.jsonl") == "4f1c-test-integrity"
    bare = parse_chat(line({"user_name": "U", "character_name": "C"}).encode())
    assert bare.stable_id("/a.jsonl") == bare.stable_id("/a.jsonl") != bare.stable_id("/b.jsonl")


def test_group_chat_keeps_each_speaker(tmp_path: Path) -> None:
    head = {"user_name": "unused", "character_name": "unused", "chat_metadata": {}}
    msgs = [
        message("Alice", "hi", is_user=False, original_avatar="alice.png"),
        message("Bob", "hey", is_user=False, original_avatar="bob.png"),
        message("User", "hello both", is_user=True),
    ]
    data = "\n".join(line(x) for x in [head, *msgs]).encode()
    chat = parse_chat(data)
    assert [m.name for m in chat.messages] == ["Alice", "Bob", "User"]
    assert chat.encode() == data


def test_broken_lines_are_skipped_and_kept() -> None:
    chat = parse_chat(b'{"user_name":"u"}\n{not json')
    assert chat.messages == [] and chat.encode() == b'{"user_name":"u"}\n{not json'
    with pytest.raises(ChatFormatError, match="byte order mark"):
        parse_chat(b"\xef\xbb\xbf{}")


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(10**9), 10**9), st.text(max_size=20))
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
unknown_fields = st.dictionaries(
    st.text(min_size=1, max_size=12).filter(lambda k: k not in {"mes", "swipes", "swipe_id"}),
    json_value,
    max_size=5,
)


@settings(max_examples=60, deadline=None)
@given(unknown=unknown_fields, new_text=st.text(max_size=50))
def test_unknown_fields_survive_an_edit(unknown: dict[str, Any], new_text: str) -> None:
    msgs = [message("U", "one", is_user=True), {**message("C", "two", is_user=False), **unknown}]
    data = "\n".join(line(x) for x in [header(), *msgs]).encode()
    chat = parse_chat(data)
    chat.messages[1].set_text(new_text)
    again = parse_chat(chat.encode())
    edited = again.messages[1].raw
    for key, value in unknown.items():
        assert edited[key] == value
    assert edited["mes"] == new_text and edited["swipes"][0] == new_text
    assert again.encode().split(b"\n")[:2] == data.split(b"\n")[:2]


def test_eldoria_loads_and_round_trips() -> None:
    book = parse_world(ELDORIA.read_bytes(), "Eldoria")
    assert len(book.entries) == 4
    forest = book.entries["0"]
    assert "forest" in forest.keys and forest.order == 100 and not forest.constant
    assert "What is Eldoria?" in forest.content
    again = parse_world(book.encode(), "Eldoria")
    assert {k: e.raw for k, e in again.entries.items()} == json.loads(ELDORIA.read_bytes())[
        "entries"
    ]


def test_world_entry_unknown_fields_are_kept() -> None:
    raw = {"entries": {"5": {"uid": 5, "key": ["a"], "content": "x", "vectorized": True}}}
    book = parse_world(json.dumps(raw).encode(), "w")
    assert json.loads(book.encode())["entries"]["5"]["vectorized"] is True


CARD_BOOK = {
    "name": "Seraphina's book",
    "entries": [
        {
            "id": 3,
            "keys": ["glade"],
            "secondary_keys": [],
            "content": "The glade is safe.",
            "enabled": True,
            "insertion_order": 50,
            "constant": False,
            "extensions": {"position": 4, "depth": 2, "probability": 80, "group": "places"},
        },
        {"keys": [], "content": "Always here.", "constant": True, "enabled": True},
    ],
}


def v2_card() -> dict[str, Any]:
    return {
        "spec": "chara_card_v2",
        "spec_version": "2.0",
        "data": {"name": "Seraphina", "description": "A guardian.", "character_book": CARD_BOOK},
    }


def tiny_png() -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    idat = zlib.compress(b"\x00\x00")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def test_json_card_with_embedded_book() -> None:
    card = parse_card(encode_line(v2_card()))
    assert card.name == "Seraphina" and card.spec == "chara_card_v2"
    book = card.book()
    assert book is not None
    glade = book.entries["3"]
    assert glade.keys == ("glade",) and glade.order == 50 and glade.position == 4
    assert glade.probability == 80 and glade.groups == ("places",)
    assert book.entries["1"].constant


def test_png_cards_v2_and_v3() -> None:
    png = write_card_png(tiny_png(), v2_card())
    assert parse_card(png).name == "Seraphina"
    v3 = {**v2_card(), "spec": "chara_card_v3", "spec_version": "3.0"}
    v3["data"] = {**v3["data"], "name": "Seraphina v3"}
    png3 = write_card_png(png, v3)
    card = parse_card(png3)
    assert card.spec == "chara_card_v3" and card.name == "Seraphina v3"
    # The chara chunk is still there for V2 readers, and the image chunks are untouched.
    chunks = png_text_chunks(png3)
    assert json.loads(base64.b64decode(chunks["chara"]))["spec"] == "chara_card_v2"
    assert png3.count(b"IDAT") == 1 and png3.count(b"chara\x00") == 1
    assert parse_card(png3).book() is not None


def test_png_without_card_is_an_error() -> None:
    with pytest.raises(ChatFormatError, match="no chara"):
        parse_card(tiny_png())
