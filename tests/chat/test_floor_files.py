"""``chat/floors/``: served from memory to the file tools, copied to disk only for the shell."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from rich.console import Console

from tavern_agent.chat import progress
from tavern_agent.providers.gateway import ModelRequest
from tavern_agent.runtime.scripted import Turn, calls, say
from tests.chat.helpers import ChatAgent, write_chat
from tests.runtime.helpers import Harness, results

FLOORS = 3000


def entries_below(folder: Path) -> int:
    return sum(len(dirs) + len(files) for _, dirs, files in os.walk(folder))


def test_a_run_on_a_long_chat_reaches_its_first_request_without_a_file_per_floor(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path, [f"floor {i} on the long road" for i in range(FLOORS)])
    at_first_request: list[int] = []

    def first(request: ModelRequest) -> Turn:
        at_first_request.append(entries_below(h.data.path))
        return calls(
            ("workspace_read_file", {"file_path": "chat/floors/002999/message.md"}),
            ("workspace_list_files", {"path": "chat/floors/002999"}),
            ("workspace_search_files", {"pattern": "floor 1234 on", "path": "chat"}),
        )

    run, _ = h.drive([first, say("done")])
    assert at_first_request[0] < 100  # the run's own files, not two per floor
    assert entries_below(h.data.path) < 100  # nor later: no tool needed a disk copy
    read, listing, search = (r["content"] for r in results(run))
    assert read.rstrip().endswith("floor 2999 on the long road")
    assert "chat/floors/002999/meta.json" in listing
    assert "chat/floors/001234/message.md:1:" in search


async def test_floor_paths_behave_like_read_only_files(tmp_path: Path) -> None:
    chat = write_chat(tmp_path / "c.jsonl", ["one", "two", "three"])
    agent = ChatAgent(tmp_path / "data", chat)
    meta = await agent("workspace_read_file", file_path="chat/floors/000001/meta.json")
    assert '"index": 1' in meta.content and '"role": "assistant"' in meta.content
    folder = await agent("workspace_read_file", file_path="chat/floors/000001")
    assert folder.error_code is not None and "folder" in folder.content.lower()
    for missing in ("chat/floors/0001/message.md", "chat/floors/000001/other.md"):
        result = await agent("workspace_read_file", file_path=missing)
        assert result.error_code == "workspace.file_not_found", missing
    below = await agent("workspace_read_file", file_path="chat/floors/000001/message.md/x")
    assert below.error_code is not None
    listing = await agent("workspace_list_files", path="chat/floors/000002")
    assert "chat/floors/000002/message.md" in listing.content
    assert "chat/floors/000002/meta.json" in listing.content
    assert "000000" in (await agent("workspace_list_files", path="chat", depth=2)).content
    hits = await agent("workspace_search_files", pattern="(?i)THREE", path="chat/floors")
    assert "chat/floors/000002/message.md" in hits.content
    patch = await agent(
        "workspace_apply_patch",
        file_path="chat/floors/000000/message.md",
        old_string="one",
        new_string="1",
    )
    assert patch.error_code == "workspace.path_not_writable"
    assert not (agent.mount / "floors").exists()  # nothing was written for the file tools


async def test_the_shell_gets_a_disk_copy_at_its_first_call_kept_in_step(tmp_path: Path) -> None:
    chat = write_chat(tmp_path / "c.jsonl", ["one", "two", "three"])
    agent = ChatAgent(tmp_path / "data", chat)
    assert not (agent.mount / "floors").exists()
    shown = await agent("workspace_shell", command="cat /chat/floors/000002/message.md; ls /chat")
    assert "three" in shown.content and "floors" in shown.content
    assert sorted(os.listdir(agent.mount / "floors")) == ["000000", "000001", "000002"]
    assert agent.chat.floors_on_disk_ready()  # later calls need no sync (and no thread hop)
    # An edit of the chat file reaches the copy at the next shell call.
    chat.write_text(chat.read_text(encoding="utf-8").replace('"three"', '"THREE"'), "utf-8")
    assert not agent.chat.floors_on_disk_ready()
    again = await agent("workspace_shell", command="cat /chat/floors/000002/message.md")
    assert "THREE" in again.content and agent.chat.floors_on_disk_ready()


def test_a_long_floor_copy_shows_a_progress_bar_for_the_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress, "DELAY_SECONDS", 0.0)
    chat = write_chat(tmp_path / "c.jsonl", [f"floor {i}" for i in range(300)])
    agent = ChatAgent(tmp_path / "data", chat)
    out = io.StringIO()
    with progress.shown(Console(file=out, force_terminal=True, width=100)):
        folder = agent.chat.floors_on_disk()
    assert folder is not None and len(os.listdir(folder)) == 300
    assert "workspace_shell: copying the chat floors" in out.getvalue()
