"""The chat, world info and commit tools, called through the gate."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tavern_agent.chat.formats import parse_chat
from tavern_agent.chat.run_input import ChatRunInput
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.results import CommitRequested
from tests.chat.helpers import ChatAgent, eldoria, filler, write_chat


@pytest.fixture
def small(tmp_path: Path) -> Path:
    texts = [
        "We should rest by the river.",
        "The forest is quiet tonight; Shadowfang beasts roam far away.",
        "What about the glade?",
        "The glade is a refuge.",
        "hidden note about the forest",
    ]
    return write_chat(tmp_path / "Seraphina - chat.jsonl", texts, hidden=frozenset({4}))


async def test_chinese_query_ranks_the_chinese_floor_first(tmp_path: Path) -> None:
    rng = random.Random(3)
    texts = [filler(rng) for _ in range(10_000)]
    texts[4321] = "我们在森林深处发现了一座古老的神殿，里面藏着龙的宝藏。"
    texts[77] = "森"  # a lone character, unrelated
    texts[9000] = "古い神殿の扉がゆっくりと開いた。"
    path = write_chat(tmp_path / "big.jsonl", texts)
    agent = ChatAgent(tmp_path / "data", path)
    result = await agent("chat_search", query="森林里的神殿")
    assert not result.is_error
    assert result.structured["hits"][0]["floor"] == 4321
    assert "chat/floors/004321/message.md" in result.content
    japanese = await agent("chat_search", query="神殿の扉")
    assert japanese.structured["hits"][0]["floor"] == 9000
    english = await agent("chat_search", query="lanterns wagons", limit=5)
    assert len(english.structured["hits"]) == 5


async def test_filters_ties_and_zero_hits(tmp_path: Path, small: Path) -> None:
    agent = ChatAgent(tmp_path / "data", small)
    both = await agent("chat_search", query="forest")
    assert [h["floor"] for h in both.structured["hits"]] == [4, 1] or {
        h["floor"] for h in both.structured["hits"]
    } == {1, 4}
    users = await agent("chat_search", query="glade", role="user")
    assert [h["floor"] for h in users.structured["hits"]] == [2]
    assert all(h["role"] == "user" for h in users.structured["hits"])
    ranged = await agent("chat_search", query="glade", start_floor=3, end_floor=3)
    assert [h["floor"] for h in ranged.structured["hits"]] == [3]
    visible = await agent("chat_search", query="forest", hidden=False)
    assert [h["floor"] for h in visible.structured["hits"]] == [1]
    none = await agent("chat_search", query="spaceship")
    assert not none.is_error and none.structured["hits"] == [] and "No floors match" in none.content
    bad = await agent("chat_search", query="glade", start_floor=9)
    assert bad.is_error and bad.error_code == "chat.invalid_range" and "floors 0-4" in bad.content


async def test_scan_limit_tool_role_and_the_system_hint(tmp_path: Path) -> None:
    path = write_chat(
        tmp_path / "t.jsonl",
        ["the lantern glows", "a lantern again", "lantern lantern", "no light", "one lantern"],
    )
    lines = path.read_text(encoding="utf-8").split("\n")
    tool_floor = json.loads(lines[3])  # floor 2: a floor recording a tool call
    tool_floor.update(is_user=False, name="Seraphina")
    tool_floor["extra"]["tool_invocations"] = [{"name": "lantern_lookup", "result": "lantern"}]
    lines[3] = json.dumps(tool_floor)
    path.write_text("\n".join(lines), encoding="utf-8")
    agent = ChatAgent(tmp_path / "data", path)
    newest = await agent("chat_search", query="lantern", scan_limit=2)
    assert [h["floor"] for h in newest.structured["hits"]] == [4]
    assert "floors 3-4" in newest.content
    tools = await agent("chat_search", query="lantern", role="tool")
    assert [h["floor"] for h in tools.structured["hits"]] == [2]
    assert "floor 2 (tool, Seraphina)" in tools.content
    assistant = await agent("chat_search", query="lantern", role="assistant")
    assert [h["floor"] for h in assistant.structured["hits"]] == [1]
    system = await agent("chat_search", query="lantern", role="system")
    assert not system.is_error and system.structured["hits"] == []
    assert "search with hidden: true instead" in system.content


async def test_newest_floor_wins_a_tie(tmp_path: Path) -> None:
    path = write_chat(tmp_path / "t.jsonl", ["the lantern", "x", "the lantern", "y"])
    agent = ChatAgent(tmp_path / "data", path)
    hits = (await agent("chat_search", query="lantern")).structured["hits"]
    assert [h["floor"] for h in hits] == [2, 0]


async def test_run_sees_only_its_frozen_floors(tmp_path: Path, small: Path) -> None:
    agent = ChatAgent(tmp_path / "data", small)
    with small.open("a") as f:
        f.write('\n{"name":"User","is_user":true,"mes":"a later forest message"}')
    hits = (await agent("chat_search", query="later forest")).structured["hits"]
    assert all(h["floor"] < 5 for h in hits)
    late = await agent("chat_read_messages", floors=[{"floor": 5}])
    assert late.error_code == "chat.floor_not_found" and "floors 0-4" in late.content
    saved = ChatRunInput.load(agent.workspace.root)
    assert saved == agent.input and saved is not None and saved.floor_count == 5


async def test_read_messages_pages_and_errors(tmp_path: Path) -> None:
    long = "\n".join(f"line {i} " + "x" * 90 for i in range(1, 201))  # ~20,000 chars
    path = write_chat(tmp_path / "l.jsonl", ["short one", long, long, long])
    agent = ChatAgent(tmp_path / "data", path)
    one = await agent("chat_read_messages", floors=[{"floor": 0}])
    assert one.content.startswith("floor 0 (user, User): lines 1-1 of 1\n1\tshort one")
    page = await agent("chat_read_messages", floors=[{"floor": 1, "offset": 10, "limit": 5}])
    assert "lines 10-14 of 200" in page.content and "more" not in page.content
    big = await agent("chat_read_messages", floors=[{"floor": 1}, {"floor": 2}, {"floor": 3}])
    assert len(big.content) < 21_000
    cont = big.structured["more"]
    assert cont[0]["floor"] == 1 and cont[0]["offset"] > 1
    assert 'continue with floors=[{"floor":1,"offset":' in big.content
    again = await agent("chat_read_messages", floors=cont[:1])
    assert f"lines {cont[0]['offset']}-" in again.content
    past = await agent("chat_read_messages", floors=[{"floor": 0, "offset": 3}])
    assert past.error_code == "chat.invalid_range"
    assert past.content == ("Floor 0 has 1 line, so offset 3 is past its end. Use offset 1.")
    renamed = await agent("chat_read_messages", floors=[{"index": 0}])
    assert renamed.error_code == "tool.invalid_arguments"
    assert (await agent("chat_read_messages", floors=[])).error_code == "tool.invalid_arguments"


async def test_worldinfo_index_entries_and_errors(tmp_path: Path) -> None:
    path = write_chat(tmp_path / "w.jsonl", ["Tell me of the forest.", "Gladly."])
    agent = ChatAgent(tmp_path / "data", path, books=[eldoria()])
    index = await agent("worldinfo_read_activated")
    refs = [e["ref"] for e in index.structured["entries"]]
    assert "worldinfo:Eldoria#0" in refs and "| before_char" in index.content
    text = await agent("worldinfo_read_activated", entries=[{"ref": "worldinfo:Eldoria#0"}])
    assert "What is Eldoria?" in text.content
    missing = await agent("worldinfo_read_activated", entries=[{"ref": "worldinfo:Eldoria#99"}])
    assert missing.error_code == "worldinfo.entry_not_found"
    assert "worldinfo_read_activated without arguments" in missing.content
    past = await agent(
        "worldinfo_read_activated", entries=[{"ref": "worldinfo:Eldoria#0", "offset": 99}]
    )
    assert past.error_code == "worldinfo.invalid_entry_range"
    bare = ChatAgent(tmp_path / "data2", path)
    none = await bare("worldinfo_read_activated")
    assert none.error_code == "worldinfo.activation_unavailable"
    host = ChatAgent(tmp_path / "d3", path, precomputed=[{"content": "Host lore.", "label": "L"}])
    listed = await host("worldinfo_read_activated")
    assert listed.structured["entries"][0]["ref"] == "worldinfo:activated#0"


async def test_commit_appends_then_updates_one_message(tmp_path: Path, small: Path) -> None:
    before = small.read_bytes()
    agent = ChatAgent(tmp_path / "data", small)
    (agent.workspace.root / "output").mkdir(exist_ok=True)
    (agent.workspace.root / "output" / "main.md").write_text("The night is calm.")
    executed = await agent.run("workspace_commit", reason="First draft of the reply.")
    assert not executed.result.is_error and "workspace_finish" in executed.result.content
    assert executed.effect == CommitRequested(
        "output/main.md", "replace", "First draft of the reply."
    )
    receipt = agent.chat.apply_effect(executed.effect, agent.workspace)
    assert receipt.floor == 5 and receipt.created
    after = small.read_bytes()
    assert after.split(b"\n")[:-1] == before.split(b"\n")  # every old line byte-identical
    (agent.workspace.root / "output" / "more.md").write_text(" Stars rise.")
    second = await agent.run(
        "workspace_commit", file_path="output/more.md", mode="append", reason="Add an ending."
    )
    assert isinstance(second.effect, CommitRequested)
    agent.chat.apply_effect(second.effect, agent.workspace)
    chat = parse_chat(small.read_bytes())
    assert len(chat.messages) == 6
    last = chat.messages[5]
    assert last.mes == "The night is calm. Stars rise." and last.name == "Seraphina"
    meta = last.extra["agent"]
    assert meta["runId"] == "run_1" and meta["profileId"] == "writer" and meta["commits"] == 2
    assert meta["file"] == "output/more.md"
    assert small.read_bytes().split(b"\n")[:-1] == before.split(b"\n")


async def test_commit_refusals(tmp_path: Path, small: Path) -> None:
    agent = ChatAgent(tmp_path / "data", small)
    empty = await agent("workspace_commit", reason="r")
    assert empty.error_code == "workspace.file_not_found"
    (agent.workspace.root / "output").mkdir(exist_ok=True)
    (agent.workspace.root / "output" / "main.md").write_text("text")
    mode = await agent("workspace_commit", reason="r", mode="overwrite")
    assert mode.error_code == "workspace.commit_mode_invalid"
    hidden = await agent("workspace_commit", reason="r", file_path="input/chat.json")
    assert hidden.error_code == "workspace.path_not_visible"
    child = ChatAgent(tmp_path / "data", small, allow_commit=False, run_id="child")
    refused = await child("workspace_commit", reason="r")
    assert refused.error_code == "workspace.commit_unavailable"
    session = ChatAgent(tmp_path / "data", small, scene=Scene.SESSION, run_id="s")
    assert (await session("workspace_commit", reason="r")).error_code == "model.unknown_tool_call"
    assert (await session("chat_search", query="x")).error_code == "model.unknown_tool_call"


async def test_mount_is_visible_to_file_tools_and_read_only(tmp_path: Path, small: Path) -> None:
    agent = ChatAgent(tmp_path / "data", small)
    listing = await agent("workspace_list_files", path="chat", depth=3)
    assert "chat/chat.json" in listing.content
    assert "chat/floors/000004/message.md" in listing.content
    info = await agent("workspace_read_file", file_path="chat/chat.json")
    assert (
        '"floorCount": 5' in info.content
        and '"stableChatId": "4f1c-test-integrity"' in info.content
    )
    meta = await agent("workspace_read_file", file_path="chat/floors/000004/meta.json")
    assert '"hidden": true' in meta.content and '"role": "user"' in meta.content
    body = await agent("workspace_read_file", file_path="chat/floors/000003/message.md")
    assert "The glade is a refuge." in body.content
    grep = await agent("workspace_search_files", pattern="(?i)glade")
    assert "chat/floors/000002/message.md" in grep.content
    write = await agent(
        "workspace_write_file", file_path="chat/floors/000001/message.md", content="x"
    )
    assert write.error_code == "workspace.path_not_writable"
    # A later run of the same chat shares the mount, updated incrementally.
    with small.open("a") as f:
        f.write('\n{"name":"User","is_user":true,"mes":"one more"}')
    later = ChatAgent(tmp_path / "data", small, run_id="run_2")
    assert (
        await later("workspace_read_file", file_path="chat/floors/000005/message.md")
    ).content.endswith("one more")
    # ... while the first run still sees only its five floors.
    beyond = await agent("workspace_read_file", file_path="chat/floors/000005/message.md")
    assert beyond.error_code == "workspace.path_not_visible"
    assert "000005" not in (await agent("workspace_list_files", path="chat/floors")).content


async def test_no_mount_without_a_chat_tool(tmp_path: Path, small: Path) -> None:
    agent = ChatAgent(tmp_path / "data", small, allow=["builtin:workspace.read_file"])
    result = await agent("workspace_read_file", file_path="chat/chat.json")
    assert result.error_code == "workspace.path_not_visible"
    assert json.loads((agent.workspace.root / "chat" / "chat.json").read_text())["floorCount"] == 5
