"""Commits into SillyTavern chats: who signs the reply, its date, and merging with changes.

SillyTavern shows a message under its ``name`` and sorts / displays it by
``send_date``; since 1.13 the header's names are the placeholder
``"unused"``. SillyTavern saves a chat by writing the whole file anew
(``write-file-atomic``: a new file renamed over the old one), so a commit must
be applied to the file as it is at that moment.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tavern_agent.chat.dates import AT, EPOCH_MS, HUMANIZED, ISO, date_format, send_date
from tavern_agent.chat.formats import parse_chat
from tavern_agent.chat.repository import ChatCommit, FileChatRepository, prefix_digest
from tests.chat.helpers import line, message
from tests.chat.test_st_chats import HEADER_113, REAL_CHATS


def commit(run_id: str = "run_a", text: str = "The reply.", **more: object) -> ChatCommit:
    return ChatCommit(run_id, "writer", "output/main.md", text, "replace", **more)  # type: ignore[arg-type]


def iso_message(name: str, text: str, *, is_user: bool) -> dict[str, object]:
    return {**message(name, text, is_user=is_user), "send_date": "2025-11-30T21:04:05.123Z"}


@pytest.mark.parametrize("path", REAL_CHATS, ids=lambda p: p.name)
def test_commit_to_a_real_chat_keeps_every_other_byte(tmp_path: Path, path: Path) -> None:
    chat_path = tmp_path / path.name
    shutil.copyfile(path, chat_path)
    before = chat_path.read_bytes()
    receipt = FileChatRepository(chat_path).apply_commit(commit())
    after = chat_path.read_bytes()
    assert after.startswith(before + b"\n")
    new = json.loads(after[len(before) + 1 :])
    assert new["name"] == parse_chat(before).character_name and new["mes"] == "The reply."
    assert receipt.created and receipt.floor == len(parse_chat(before).messages)
    original = parse_chat(before).messages[-1].raw["send_date"]
    assert date_format(new["send_date"]) == date_format(original)


def test_113_chat_reply_is_signed_by_the_character_not_unused(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    lines = [HEADER_113, iso_message("Seraphina", "Hello.", is_user=False)]
    path.write_text("\n".join(line(x) for x in [*lines, iso_message("Ann", "Hi!", is_user=True)]))
    repo = FileChatRepository(path)
    repo.apply_commit(commit())
    chat = parse_chat(path.read_bytes())
    assert chat.messages[-1].name == "Seraphina"  # the newest character speaker
    repo.apply_commit(commit("run_b", name="Seraphina (card)"))
    assert parse_chat(path.read_bytes()).messages[-1].name == "Seraphina (card)"
    assert chat.speaker(user=True) == "Ann"


def test_narrator_lines_are_not_taken_as_the_character(tmp_path: Path) -> None:
    """A 1.13+ chat without a card: `/sys` and `/comment` lines sign no reply."""
    path = tmp_path / "c.jsonl"
    narrator = {
        **iso_message("SillyTavern System", "The storm breaks.", is_user=False),
        "force_avatar": "img/five.png",
        "extra": {"type": "narrator", "bias": None},
    }
    comment = {**narrator, "name": "Note", "extra": {"type": "comment"}}
    lines = [HEADER_113, iso_message("Seraphina", "Hello.", is_user=False)]
    lines += [iso_message("Ann", "Hi!", is_user=True), narrator, comment]
    path.write_text("\n".join(line(x) for x in lines))
    FileChatRepository(path).apply_commit(commit())
    chat = parse_chat(path.read_bytes())
    assert chat.messages[-1].name == "Seraphina" and chat.messages[-1].mes == "The reply."


def test_headerless_group_chat_commit_keeps_it_headerless(tmp_path: Path) -> None:
    path = tmp_path / "group.jsonl"
    data = "\n".join(
        line(x) for x in [message("Alice", "one", is_user=False), message("U", "two", is_user=True)]
    ).encode()
    path.write_bytes(data)
    FileChatRepository(path).apply_commit(commit(name="Bob"))
    after = path.read_bytes()
    assert after.startswith(data + b"\n")
    chat = parse_chat(after)
    assert not chat.has_header and [m.name for m in chat.messages] == ["Alice", "U", "Bob"]


def test_empty_chat_gets_a_header_before_the_reply(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    FileChatRepository(path).apply_commit(commit(name="Seraphina"))
    chat = parse_chat(path.read_bytes())
    assert chat.character_name == "Seraphina" and [m.mes for m in chat.messages] == ["The reply."]


@pytest.mark.parametrize(
    ("value", "fmt"),
    [
        ("2025-11-30T21:04:05.123Z", ISO),
        ("December 2, 2025 10:56am", HUMANIZED),
        ("2023-4-21 @20h 02m 47s 124ms", AT),
        (1674563371558, EPOCH_MS),
        ("yesterday", None),
        (None, None),
    ],
)
def test_date_formats_are_recognised(value: object, fmt: str | None) -> None:
    assert date_format(value) == fmt


def test_send_date_writes_each_format() -> None:
    moment = datetime(2026, 12, 2, 18, 15, 7, 5000, tzinfo=UTC)
    assert send_date(moment, ISO) == "2026-12-02T18:15:07.005Z"
    assert send_date(moment, EPOCH_MS) == int(moment.timestamp() * 1000)
    local = moment.astimezone()
    assert send_date(local, AT) == (
        f"{local.year}-{local.month}-{local.day} @{local.hour:02d}h 15m 07s 05ms"
    )
    assert str(send_date(moment.astimezone(), HUMANIZED)).startswith("December 2, 2026 ")
    for fmt in (ISO, AT, HUMANIZED, EPOCH_MS):
        assert date_format(send_date(fmt=fmt)) == fmt


def test_iso_chat_gets_an_iso_date(tmp_path: Path) -> None:
    path = tmp_path / "iso.jsonl"
    path.write_text("\n".join(line(x) for x in [HEADER_113, iso_message("S", "x", is_user=False)]))
    FileChatRepository(path).apply_commit(commit())
    new = parse_chat(path.read_bytes()).messages[-1].raw
    assert date_format(new["send_date"]) == ISO
    assert date_format(new["swipe_info"][0]["send_date"]) == ISO


def _chat(path: Path, texts: list[str]) -> bytes:
    rows = [HEADER_113] + [
        iso_message("Seraphina" if i % 2 else "Ann", t, is_user=i % 2 == 0)
        for i, t in enumerate(texts)
    ]
    data = "\n".join(line(x) for x in rows).encode()
    path.write_bytes(data)
    return data


def test_messages_added_since_the_run_read_the_chat_stay(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    read = parse_chat(_chat(path, ["a", "b"]))
    seen = dict(floor_count=2, prefix_sha256=prefix_digest(read, 2))
    later = _chat(path, ["a", "b", "c (typed in SillyTavern)", "d"])
    receipt = FileChatRepository(path).apply_commit(commit(**seen))
    after = path.read_bytes()
    assert after.startswith(later + b"\n") and receipt.floor == 4
    assert "2 message(s) were added" in receipt.merged


def test_an_edited_history_is_reported_and_nothing_is_lost(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    read = parse_chat(_chat(path, ["a", "b"]))
    seen = dict(floor_count=2, prefix_sha256=prefix_digest(read, 2))
    edited = _chat(path, ["a", "b, edited"])
    receipt = FileChatRepository(path).apply_commit(commit(**seen))
    assert path.read_bytes().startswith(edited + b"\n")
    assert "edited or deleted" in receipt.merged


def test_a_reply_edited_in_sillytavern_is_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    _chat(path, ["a"])
    repo = FileChatRepository(path)
    first = repo.apply_commit(commit(text="draft one"))
    chat = parse_chat(path.read_bytes())
    chat.messages[first.floor].set_text("draft one, fixed by hand")
    path.write_bytes(chat.encode())
    second = repo.apply_commit(commit(text="draft two"))
    assert second.created and second.floor == first.floor + 1 and "edited since" in second.merged
    texts = [m.mes for m in parse_chat(path.read_bytes()).messages]
    assert texts[-2:] == ["draft one, fixed by hand", "draft two"]
    third = repo.apply_commit(commit(text="draft three"))  # revises its own newest message
    assert not third.created and third.floor == second.floor and third.merged == ""


class _SavedMeanwhile(FileChatRepository):
    """Between the commit's read and its rename, SillyTavern saves the chat (once)."""

    def __init__(self, path: Path, newer: bytes) -> None:
        super().__init__(path)
        self.newer: bytes | None = newer

    @contextlib.contextmanager
    def _locked(self) -> Iterator[tuple[bytes, tuple[int, int, int]]]:
        with super()._locked() as read:
            if self.newer is not None:  # write-file-atomic: a new file renamed into place
                tmp = self.path.with_name(".st-save.tmp")
                tmp.write_bytes(self.newer)
                os.replace(tmp, self.path)
                self.newer = None
            yield read


def test_a_save_between_read_and_rename_is_merged(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    _chat(path, ["a"])
    newer = _chat(tmp_path / "newer.jsonl", ["a", "b (saved by SillyTavern)"])
    receipt = _SavedMeanwhile(path, newer).apply_commit(commit())
    assert path.read_bytes().startswith(newer + b"\n") and receipt.floor == 2
