"""``--st-data``: a folder laid out like SillyTavern's ``data/<user>/``, built from real files.

The run must pick the card by name, the chat by name or ``latest`` (a group's
by group name), scan the chat's bound lorebook, the card's own
(``extensions.world``) and the globally selected one with the folder's
settings, and commit a reply SillyTavern shows under the character's name,
dated like the chat's other messages, into the real file behind a symlink.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tavern_agent.chat.dates import ISO, date_format
from tavern_agent.chat.formats import parse_chat
from tavern_agent.chat.st_data import StDataError, open_st_data
from tests.chat.helpers import line
from tests.runtime.openai_server import OpenAIServer
from tests.test_cli import run

REAL = Path(__file__).resolve().parents[1] / "data" / "st-real"
REPLY = "Seraphina brushes a leaf from her gown. The glade is safe tonight, Ann."
CHAT_NAME = "Seraphina - 2025-11-30@21h04m05s"


def msg(name: str, text: str, *, is_user: bool, date: str) -> dict[str, Any]:
    return {
        "name": name,
        "is_user": is_user,
        "is_system": False,
        "send_date": date,
        "mes": text,
        "extra": {},
    }


@pytest.fixture
def st(tmp_path: Path) -> Path:
    """data/default-user/ with two cards, lorebooks, chats, a group and settings."""
    root = tmp_path / "SillyTavern" / "data" / "default-user"
    for sub in ("characters", "worlds", "groups", "group chats"):
        (root / sub).mkdir(parents=True)
    shutil.copyfile(REAL / "cards" / "default_Seraphina.png", root / "characters" / "Seraphina.png")
    shutil.copyfile(REAL / "cards" / "Aqua.png", root / "characters" / "Aqua.png")
    for name in ("Eldoria", "Toaru", "KoboldAI_Sample"):
        shutil.copyfile(REAL / "worlds" / f"{name}.json", root / "worlds" / f"{name}.json")
    aqua_chats = root / "chats" / "Aqua"
    aqua_chats.mkdir(parents=True)
    shutil.copyfile(REAL / "chats" / "Aqua_1673181146000.jsonl", aqua_chats / "1673181146000.jsonl")
    # Seraphina's chats: an old one, and the newest (1.13 header, ISO dates, bound lorebook),
    # kept on another disk and linked into the folder.
    chats = root / "chats" / "Seraphina"
    chats.mkdir(parents=True)
    old = chats / "Seraphina - 2024-01-01@10h00m00s.jsonl"
    old.write_text(line({"user_name": "Ann", "character_name": "Seraphina", "chat_metadata": {}}))
    os.utime(old, (1_700_000_000, 1_700_000_000))
    header = {
        "chat_metadata": {"integrity": "2b9c-st-data", "world_info": "KoboldAI_Sample"},
        "user_name": "unused",
        "character_name": "unused",
    }
    rows = [
        header,
        msg("Seraphina", "You wake in the glade.", is_user=False, date="2025-11-30T21:04:05.000Z"),
        msg(
            "Ann",
            "Is the forest safe? I read a Test of ttest.",
            is_user=True,
            date="2025-11-30T21:05:00.000Z",
        ),
        msg(
            "Seraphina",
            "Tokiwadai is far from here.",
            is_user=False,
            date="2025-11-30T21:05:30.000Z",
        ),
        msg("Ann", "Tell me more.", is_user=True, date="2025-11-30T21:06:00.000Z"),
    ]
    elsewhere = tmp_path / "other-disk" / f"{CHAT_NAME}.jsonl"
    elsewhere.parent.mkdir()
    elsewhere.write_text("\n".join(line(r) for r in rows), encoding="utf-8")
    (chats / f"{CHAT_NAME}.jsonl").symlink_to(elsewhere)
    # A group with both, whose chat was saved by SillyTavern 1.12 (no header line).
    group = {
        "id": "1701000000000",
        "name": "Adventurers",
        "members": ["Seraphina.png", "Aqua.png"],
        "chat_id": "1701000000001",
        "chats": ["1701000000001"],
    }
    (root / "groups" / "1701000000000.json").write_text(json.dumps(group))
    group_rows = [
        msg("Aqua", "I am a goddess!", is_user=False, date="December 1, 2025 9:00pm"),
        msg("Ann", "Sure.", is_user=True, date="December 1, 2025 9:01pm"),
    ]
    (root / "group chats" / "1701000000001.jsonl").write_text(
        "\n".join(line(r) for r in group_rows)
    )
    settings = {
        "username": "User",
        "user_avatar": "ann.png",
        "main_api": "openai",
        "oai_settings": {"openai_max_context": 8192},
        "power_user": {"personas": {"ann.png": "Ann"}, "persona_description": "A traveller."},
        "world_info_settings": {
            "world_info": {"globalSelect": ["Toaru"], "charLore": []},
            "world_info_depth": 4,
            "world_info_budget": 25,
            "world_info_recursive": True,
            "world_info_max_recursion_steps": 0,
        },
        "tag_map": {"Seraphina.png": ["tag-healer"]},
    }
    (root / "settings.json").write_text(json.dumps(settings))
    return root


def test_selection_picks_card_chat_books_and_settings(st: Path) -> None:
    chosen = open_st_data(st, character="seraphina")  # names are case-insensitive
    assert chosen.chat_file.name == f"{CHAT_NAME}.jsonl"  # latest by time
    assert chosen.card is not None and chosen.card.name == "Seraphina"
    assert [(b.name, b.source) for b in chosen.books] == [
        ("KoboldAI_Sample", "chat"),
        ("Eldoria", "character"),
        ("Toaru", "global"),
    ]
    assert chosen.settings.scan_depth == 4 and chosen.settings.max_context == 8192
    assert chosen.participants.user_name == "Ann" and chosen.participants.persona == "A traveller."
    assert chosen.participants.character_file == "Seraphina"
    assert chosen.participants.character_tags == {"tag-healer"}
    by_name = open_st_data(st, character="Seraphina", chat="Seraphina - 2024-01-01@10h00m00s")
    assert by_name.chat_file.stem.endswith("2024-01-01@10h00m00s")
    with pytest.raises(StDataError, match="there are: Aqua"):
        open_st_data(st, character="Nobody")
    with pytest.raises(StDataError, match="its chats"):
        open_st_data(st, character="Seraphina", chat="missing")


def test_sillytavern_folder_or_data_folder_means_default_user(st: Path) -> None:
    install = st.parents[1]  # .../SillyTavern
    for root in (install, install / "data"):
        assert open_st_data(root, character="Seraphina").chat_file.name == f"{CHAT_NAME}.jsonl"
    with pytest.raises(StDataError, match="no characters/"):
        open_st_data(st / "worlds", character="Seraphina")


def test_group_selection(st: Path) -> None:
    chosen = open_st_data(st, group="adventurers")
    assert chosen.chat_file.name == "1701000000001.jsonl"
    assert chosen.card is not None and chosen.card.name == "Aqua"  # the newest to speak
    assert chosen.participants.group_members == ("Seraphina", "Aqua")
    # SillyTavern scans the replying member's own books only (getCharacterLore, this_chid)
    assert "Eldoria" not in [b.name for b in chosen.books]
    picked = open_st_data(st, group="Adventurers", character="Seraphina")
    assert picked.card is not None and picked.card.name == "Seraphina"
    assert "Eldoria" in [b.name for b in picked.books]


def test_call_activates_the_folders_lorebooks(st: Path, tmp_path: Path) -> None:
    def call(args: str) -> str:
        proc = run(
            "call", "worldinfo_read_activated", args, "--json",
            "--st-data", str(st), "--character", "Seraphina",
            data_dir=tmp_path / "data",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return str(json.loads(proc.stdout)["content"])

    listing = call("{}")
    for ref in ("worldinfo:Eldoria#2", "worldinfo:Toaru#", "worldinfo:KoboldAI_Sample#0"):
        assert ref in listing  # the card's, the global and the chat's book
    glade = call(json.dumps({"entries": [{"ref": "worldinfo:Eldoria#2"}]}))
    assert 'Ann: "What is the glade?"' in glade  # {{user}} is the persona: macros substituted
    assert "Seraphina:" in glade and "{{char}}" not in glade


def test_world_info_flags_override_the_settings(st: Path, tmp_path: Path) -> None:
    def listing(*flags: str) -> str:
        proc = run(
            "call", "worldinfo_read_activated", "{}", "--json",
            "--st-data", str(st), "--character", "Seraphina", *flags,
            data_dir=tmp_path / "data",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return str(json.loads(proc.stdout)["content"])

    assert "worldinfo:Toaru#" in listing()  # "Tokiwadai" is 2 messages back (depth 4)
    assert "worldinfo:Toaru#" not in listing("--wi-depth", "1")
    assert "worldinfo:Toaru#" in listing("--wi-depth", "1", "--wi-min-activations", "3")


def test_group_run_replies_as_the_member_and_keeps_the_old_format(st: Path, tmp_path: Path) -> None:
    turns = [
        [("workspace_write_file", {"file_path": "output/main.md", "content": "Bow to me!"})],
        [("workspace_commit", {"reason": "the reply"})],
        [("workspace_finish", {})],
    ]
    path = st / "group chats" / "1701000000001.jsonl"
    before = path.read_bytes()
    with OpenAIServer(turns) as model:
        proc = run(
            "run", "--st-data", str(st), "--group", "Adventurers",
            "--model", "local", "--base-url", model.base_url, "--json",
            data_dir=tmp_path / "data",
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    after = path.read_bytes()
    assert after.startswith(before + b"\n")  # still no header line: floors stay where they were
    chat = parse_chat(after)
    assert not chat.has_header and [m.name for m in chat.messages] == ["Aqua", "Ann", "Aqua"]
    assert date_format(chat.messages[-1].raw["send_date"]) == "humanized"


def test_run_commits_a_reply_sillytavern_shows(st: Path, tmp_path: Path) -> None:
    turns = [
        [("workspace_write_file", {"file_path": "output/main.md", "content": REPLY})],
        [("workspace_commit", {"reason": "the reply"})],
        [("workspace_finish", {})],
    ]
    real = tmp_path / "other-disk" / f"{CHAT_NAME}.jsonl"
    before = real.read_bytes()
    with OpenAIServer(turns) as model:
        proc = run(
            "run", "latest", "--st-data", str(st), "--character", "Seraphina",
            "--model", "local", "--base-url", model.base_url, "--json",
            data_dir=tmp_path / "data",
        )  # fmt: skip
        prompt = json.dumps(model.bodies[0])
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "completed"
    link = st / "chats" / "Seraphina" / f"{CHAT_NAME}.jsonl"
    assert link.is_symlink()  # the link stays; the real file got the reply
    after = real.read_bytes()
    assert after.startswith(before + b"\n")
    reply = parse_chat(after).messages[-1].raw
    assert reply["name"] == "Seraphina" and reply["mes"] == REPLY
    assert date_format(reply["send_date"]) == ISO
    # the lorebooks' entries reached the model, macros substituted
    assert "prestigious girls' school" in prompt  # Toaru, the global selection
    assert 'Ann: \\"What is the glade?\\"' in prompt  # Eldoria, the card's own book
    assert "## Character: Seraphina" in prompt  # the card, its macros substituted too
    assert "{{char}}" not in prompt and "{{user}}" not in prompt
