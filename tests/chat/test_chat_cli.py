"""The chat options of ``tavern-agent call``, run as a real process."""

from __future__ import annotations

import json
from pathlib import Path

from tavern_agent.chat.formats import encode_line, parse_chat
from tests.chat.helpers import ELDORIA, write_chat
from tests.test_cli import run


def test_cli_chat_search_world_and_commit(tmp_path: Path) -> None:
    chat = write_chat(tmp_path / "my.jsonl", ["Into the forest we go.", "The glade awaits."])
    data = tmp_path / "data"
    proc = run("call", "chat_search", '{"query":"forest"}', "--chat", str(chat), data_dir=data)
    assert proc.returncode == 0, proc.stderr
    assert "floor 0 (user, User) chat/floors/000000/message.md" in proc.stdout
    proc = run(
        "call",
        "worldinfo_read_activated",
        "--chat",
        str(chat),
        "--world",
        str(ELDORIA),
        data_dir=data,
    )
    assert "worldinfo:Eldoria#0" in proc.stdout, proc.stderr
    card = tmp_path / "card.json"
    book = {"entries": [{"id": 1, "keys": ["glade"], "content": "Card lore.", "enabled": True}]}
    card.write_bytes(
        encode_line({"spec": "chara_card_v2", "data": {"name": "S", "character_book": book}})
    )
    proc = run(
        "call",
        "worldinfo_read_activated",
        "--chat",
        str(chat),
        "--character",
        str(card),
        "--json",
        data_dir=data,
    )
    assert json.loads(proc.stdout)["structured"]["entries"][0]["label"] == "glade"
    ws = tmp_path / "ws"
    (ws / "output").mkdir(parents=True)
    (ws / "output" / "main.md").write_text("A reply from the command line.")
    proc = run(
        "call",
        "workspace_commit",
        '{"reason":"Publish the reply."}',
        "--chat",
        str(chat),
        "--workspace",
        str(ws),
        data_dir=data,
    )
    assert proc.returncode == 0, proc.stderr
    assert "chat floor 2 created" in proc.stderr
    assert parse_chat(chat.read_bytes()).messages[2].mes == "A reply from the command line."
    proc = run("call", "chat_search", '{"query":"x"}', "--world", str(ELDORIA), data_dir=data)
    assert proc.returncode == 2 and "--chat" in proc.stderr


def test_shell_sees_the_chat_mount_read_only(tmp_path: Path) -> None:
    chat = write_chat(tmp_path / "my.jsonl", ["Into the forest we go.", "The glade awaits."])
    data = tmp_path / "data"
    command = {"command": "cat /chat/floors/000001/message.md; echo x > /chat/floors/x"}
    proc = run(
        "call", "workspace_shell", json.dumps(command), "--chat", str(chat), "--json", data_dir=data
    )
    result = json.loads(proc.stdout)
    assert "The glade awaits." in result["content"]
    assert result["structured"]["exit_code"] != 0  # the write is refused: read-only
    assert not list(data.glob("chats/**/floors/x"))


def _commit(chat: Path, ws: Path, text: str, data: Path, *extra: str) -> str:
    (ws / "output").mkdir(parents=True, exist_ok=True)
    (ws / "output" / "main.md").write_text(text)
    proc = run(
        "call",
        "workspace_commit",
        '{"reason": "the reply"}',
        "--chat",
        str(chat),
        "--workspace",
        str(ws),
        *extra,
        data_dir=data,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def test_cli_commits_from_two_workspaces_both_stay_and_run_revises_its_own(
    tmp_path: Path,
) -> None:
    chat = write_chat(tmp_path / "my.jsonl", ["Into the forest we go."])
    data = tmp_path / "data"
    first = _commit(chat, tmp_path / "ws1", "First reply.", data)
    second = _commit(chat, tmp_path / "ws2", "Second reply.", data)
    assert "chat floor 1 created" in first and "chat floor 2 created" in second
    messages = parse_chat(chat.read_bytes()).messages
    assert [m.mes for m in messages] == ["Into the forest we go.", "First reply.", "Second reply."]
    # --run ID revises the message that run committed, and only that one.
    run_id = first.rsplit("--run ", 1)[1].strip(" )\n")
    revised = _commit(chat, tmp_path / "ws1", "First reply, revised.", data, "--run", run_id)
    assert "chat floor 1 updated" in revised
    messages = parse_chat(chat.read_bytes()).messages
    assert [m.mes for m in messages][1:] == ["First reply, revised.", "Second reply."]
