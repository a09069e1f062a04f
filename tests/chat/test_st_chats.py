"""Chat files as SillyTavern writes and reads them: real 2023 chats and every later line shape.

SillyTavern reads a chat by splitting it at ``\\n`` and ``JSON.parse``-ing each
line, dropping lines that do not parse; the first object is the header
(``src/endpoints/chats.js``, ``/api/chats/get``). It writes lines with
``JSON.stringify`` joined by ``\\n``, without a final newline.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tavern_agent.chat.formats import parse_chat
from tests.chat.helpers import ChatAgent, line, message

REAL = Path(__file__).resolve().parents[1] / "data" / "st-real"
REAL_CHATS = sorted((REAL / "chats").glob("*.jsonl"))

# SillyTavern 1.13+ writes this header; the names are placeholders.
HEADER_113 = {
    "chat_metadata": {"integrity": "0b5a7f3e-1c2d-4e5f-8a9b-0c1d2e3f4a5b", "tainted": True},
    "user_name": "unused",
    "character_name": "unused",
}


@pytest.mark.parametrize("path", REAL_CHATS, ids=lambda p: p.name)
def test_real_chats_parse_and_round_trip_byte_for_byte(path: Path) -> None:
    data = path.read_bytes()
    chat = parse_chat(data)
    assert chat.has_header and chat.character_name == path.stem.split("_")[0]
    assert chat.user_name == "You"
    assert chat.messages and chat.messages[0].mes
    assert chat.encode() == data


def test_megumin_chat_has_its_user_turn_and_metadata() -> None:
    chat = parse_chat((REAL / "chats" / "Megumin_1673323621108.jsonl").read_bytes())
    assert [m.role for m in chat.messages] == ["assistant", "user", "assistant"]
    assert chat.metadata["note_depth"] == 4


def test_113_header_names_are_placeholders() -> None:
    data = "\n".join([line(HEADER_113), line(message("Seraphina", "Hi", is_user=False))]).encode()
    chat = parse_chat(data)
    assert chat.character_name == "" and chat.user_name == ""
    assert chat.integrity == HEADER_113["chat_metadata"]["integrity"]
    assert chat.encode() == data


def test_headerless_old_group_chat_keeps_its_first_message() -> None:
    # Group chats saved by SillyTavern 1.12 and earlier: no header line at all.
    lines = [
        line(message("Alice", "First floor", is_user=False)),
        line(message("User", "Second", is_user=True)),
        line(message("Bob", "Third", is_user=False)),
    ]
    data = "\n".join(lines).encode()
    chat = parse_chat(data)
    assert not chat.has_header
    assert [m.mes for m in chat.messages] == ["First floor", "Second", "Third"]
    assert chat.encode() == data


def test_group_chat_with_header_line() -> None:
    data = "\n".join([line(HEADER_113), line(message("Alice", "x", is_user=False))]).encode()
    chat = parse_chat(data)
    assert chat.has_header and [m.name for m in chat.messages] == ["Alice"]


@pytest.mark.parametrize(
    "data",
    [
        b'{"user_name":"U"}\r\n{"name":"A","mes":"one"}\r\n{"name":"B","mes":"two"}\r\n',
        b'{"user_name":"U"}\n{"name":"A","mes":"one"}\r\n{"name":"B","mes":"two"}',
        b'{"user_name":"U"}\n\n{"name":"A","mes":"one"}\n   \n{"name":"B","mes":"two"}\n\n',
        b'\n{"user_name":"U"}\n{"name":"A","mes":"one"}\n{broken\n{"name":"B","mes":"two"}',
        b'{"user_name":"U"}\n  {"name":"A","mes":"one"}  \n[1,2]\n{"name":"B","mes":"two"}',
    ],
    ids=["crlf", "mixed-endings", "blank-lines", "broken-line", "indented-and-array"],
)
def test_lines_sillytavern_skips_or_trims_are_kept(data: bytes) -> None:
    chat = parse_chat(data)
    assert chat.user_name == "U"
    assert [m.mes for m in chat.messages] == ["one", "two"]
    assert chat.encode() == data


def test_an_appended_message_follows_the_files_line_ends() -> None:
    from tavern_agent.chat.formats import new_message

    crlf = parse_chat(b'{"user_name":"U"}\r\n{"name":"A","mes":"one"}\r\n')
    crlf.messages.append(new_message("C", "two"))
    assert crlf.encode().startswith(b'{"user_name":"U"}\r\n{"name":"A","mes":"one"}\r\n{')
    assert crlf.encode().endswith(b"}\r\n")
    assert [m.mes for m in parse_chat(crlf.encode()).messages] == ["one", "two"]


def test_empty_file_is_an_empty_chat() -> None:
    chat = parse_chat(b"")
    assert chat.messages == [] and chat.header == {}
    blank = parse_chat(b"\n\n")
    assert blank.messages == [] and blank.encode() == b"\n\n"


def test_lone_surrogate_reads_as_replacement_character() -> None:
    # JSON.stringify writes half an emoji as an escape; Python reads it as a lone surrogate.
    data = b'{"user_name":"U"}\n{"name":"A","mes":"cut \\ud83d here","swipes":["cut \\ud83d here"]}'
    chat = parse_chat(data)
    assert chat.messages[0].mes == "cut \ufffd here"
    assert chat.encode() == data


async def test_tools_read_and_search_a_message_with_a_lone_surrogate(tmp_path: Path) -> None:
    path = tmp_path / "Seraphina - cut.jsonl"
    path.write_bytes(
        b'{"user_name":"U","character_name":"Seraphina","chat_metadata":{}}\n'
        b'{"name":"Seraphina","is_user":false,"mes":"the lantern \\ud83d glows"}\n'
        b'{"name":"U","is_user":true,"mes":"\\ude00 tail half"}'
    )
    agent = ChatAgent(tmp_path / "data", path)
    read = await agent("chat_read_messages", floors=[{"floor": 0}, {"floor": 1}])
    assert not read.is_error and "the lantern \ufffd glows" in read.content
    found = await agent("chat_search", query="lantern")
    assert not found.is_error and found.structured["hits"][0]["floor"] == 0


def test_113_chat_with_swipes_and_cjk_round_trips_and_takes_a_commit(tmp_path: Path) -> None:
    # Message lines in the shape SillyTavern 1.13 writes them (JSON.stringify, field order
    # as its code builds them), with swipes, reasoning metadata and CJK text.
    reply = {
        "name": "林昭",
        "is_user": False,
        "is_system": False,
        "send_date": "2025-11-30T21:04:05.123Z",
        "mes": "雨还在下。她推开门，灯笼的光落在石阶上。",
        "extra": {"api": "openai", "model": "gpt-4o", "reasoning": "", "token_count": 31},
        "title": "",
        "gen_started": "2025-11-30T21:04:01.002Z",
        "gen_finished": "2025-11-30T21:04:05.120Z",
        "swipe_id": 1,
        "swipes": ["第一个版本。", "雨还在下。她推开门，灯笼的光落在石阶上。"],
        "swipe_info": [
            {"send_date": "2025-11-30T21:03:00.000Z", "extra": {"api": "openai"}},
            {"send_date": "2025-11-30T21:04:05.123Z", "extra": {"api": "openai"}},
        ],
    }
    user = {
        "name": "旅人",
        "is_user": True,
        "send_date": "2025-11-30T21:05:00.000Z",
        "mes": "门后是什么？",
        "extra": {"isSmallSys": False, "token_count": 6},
        "force_avatar": "User Avatars/user-default.png",
    }
    data = "\n".join(line(x) for x in [HEADER_113, reply, user]).encode()
    chat = parse_chat(data)
    assert chat.encode() == data
    assert chat.messages[0].swipe_count == 2 and chat.messages[0].swipe_id == 1
    assert chat.speaker(user=False) == "林昭" and chat.speaker(user=True) == "旅人"
    path = tmp_path / "c.jsonl"
    path.write_bytes(data)
    from tavern_agent.chat.repository import ChatCommit, FileChatRepository

    commit = ChatCommit("run_cjk", "writer", "output/main.md", "石阶尽头，是一口井。", "replace")
    FileChatRepository(path).apply_commit(commit)
    after = path.read_bytes()
    assert after.startswith(data + b"\n")
    new = parse_chat(after).messages[-1]
    assert new.name == "林昭" and new.mes == "石阶尽头，是一口井。"
    assert new.raw["send_date"].endswith("Z")  # ISO, like the chat's other dates


REAL_CARDS = {
    "Aqua.png": ("chara_card_v1", "Aqua", 0),
    "Darkness.png": ("chara_card_v1", "Darkness", 0),
    "Megumin.png": ("chara_card_v1", "Megumin", 0),
    "content_Assistant_CapoGPT.png": ("chara_card_v2", "CapoGPT", 0),
    "contest_Assistant_Gloria.png": ("chara_card_v2", "Gloria, PA", 0),
    "default_FluxTheCat.png": ("chara_card_v2", "Flux the Cat", 0),
    "contest_Assistant_Amy.png": ("chara_card_v3", "Amy", 0),
    "contest_Assistant_Sakana.png": ("chara_card_v2", "Sakana", 14),
    "default_CodingSensei.png": ("chara_card_v2", "Coding Sensei", 0),
    "default_Seraphina.png": ("chara_card_v3", "Seraphina", 4),
    "tauritavern_default_Seraphina.png": ("chara_card_v3", "Seraphina", 4),
}


def test_every_real_card_is_in_the_table() -> None:
    assert sorted(p.name for p in (REAL / "cards").glob("*.png")) == sorted(REAL_CARDS)


@pytest.mark.parametrize("name", sorted(REAL_CARDS))
def test_real_cards_parse_and_survive_a_rewrite(name: str) -> None:
    from tavern_agent.chat.cards import parse_card, write_card_png

    png = (REAL / "cards" / name).read_bytes()
    card = parse_card(png)
    spec, card_name, entries = REAL_CARDS[name]
    book = card.book()
    assert (card.spec, card.name, len(book.entries) if book else 0) == (spec, card_name, entries)
    assert parse_card(write_card_png(png, card.raw)).raw == card.raw
