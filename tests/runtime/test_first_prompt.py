"""How much chat history the first prompt carries (``prompt.initialChatHistoryMessages``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tavern_agent.core.profile import Profile, ProfileError
from tests.chat.helpers import write_chat
from tests.runtime.helpers import TEXTS, WRITER_TOOLS, Harness


def writer(**prompt: Any) -> Profile:
    data = {"id": "writer", "name": "Writer", "tools": {"allow": WRITER_TOOLS}, "prompt": prompt}
    return Profile.from_json(data)


def chat_section(tmp: Path, prof: Profile) -> str:
    """The chat part of the first user message of a run of ``prof``."""
    run = Harness(tmp).start(prof)
    user = run.invocations[0].transcript.items[0].text  # type: ignore[union-attr]
    return user.split("## Chat", 1)[1].split("\n\n", 1)[0]


def test_all_floors_by_default(tmp_path: Path) -> None:
    section = chat_section(tmp_path, writer())
    assert section.splitlines() == [
        " (3 floors)",
        f"[0] User: {TEXTS[0]}",
        f"[1] Seraphina: {TEXTS[1]}",
        f"[2] User: {TEXTS[2]}",
    ]
    assert chat_section(tmp_path / "all", writer(initialChatHistoryMessages=-1)) == section


def test_newest_n_floors_and_where_to_read_the_rest(tmp_path: Path) -> None:
    section = chat_section(tmp_path, writer(initialChatHistoryMessages=1))
    assert section.splitlines() == [
        " (3 floors)",
        "(floors 0-1 are not shown; read them with chat_read_messages)",
        f"[2] User: {TEXTS[2]}",
    ]


def test_none(tmp_path: Path) -> None:
    section = chat_section(tmp_path, writer(initialChatHistoryMessages=0))
    assert section.splitlines() == [
        " (3 floors)",
        "(floors 0-2 are not shown; read them with chat_read_messages)",
    ]


def test_the_character_budget_still_binds(tmp_path: Path) -> None:
    prof = writer(initialChatHistoryMessages=3, historyChars=len(f"[2] User: {TEXTS[2]}"))
    assert chat_section(tmp_path, prof).splitlines()[1:] == [
        "(floors 0-1 are not shown; read them with chat_read_messages)",
        f"[2] User: {TEXTS[2]}",
    ]


def test_hidden_floors_are_skipped_and_the_note_names_the_first_shown(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    write_chat(harness.chat_path, [*TEXTS, "A fourth floor."], hidden=frozenset({2}))
    run = harness.start(writer(initialChatHistoryMessages=2))
    user = run.invocations[0].transcript.items[0].text  # type: ignore[union-attr]
    section = user.split("## Chat", 1)[1].split("\n\n", 1)[0]
    assert section.splitlines() == [
        " (4 floors)",
        "(floors 0-0 are not shown; read them with chat_read_messages)",
        f"[1] Seraphina: {TEXTS[1]}",
        "[3] Seraphina: A fourth floor.",
    ]


def test_below_minus_one_is_refused() -> None:
    with pytest.raises(ProfileError, match="initialChatHistoryMessages"):
        writer(initialChatHistoryMessages=-2)
