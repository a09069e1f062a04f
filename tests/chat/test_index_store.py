"""The search index saved beside the chat mount: reused, kept up to date, rebuilt when unusable."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from tavern_agent.chat import index_store
from tavern_agent.chat.formats import parse_chat
from tavern_agent.chat.index_store import FILE, docs, floor_digests
from tavern_agent.chat.search import ChatIndex
from tests.chat.helpers import ChatAgent, filler, write_chat


class Builds:
    """Counts indexes built from scratch (a loaded or updated index is not one)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        outer = self

        class Counting(ChatIndex):
            def __init__(self, *args: object, **kwargs: object) -> None:
                outer.count += 1
                super().__init__(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(index_store, "ChatIndex", Counting)


def texts(count: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    return [filler(rng, 12) for _ in range(count)]


def saved_matches_the_chat(agent: ChatAgent, chat_path: Path) -> None:
    """The saved index is the index a fresh build of the chat file gives."""
    chat = parse_chat(chat_path.read_bytes())
    saved = index_store.load(agent.mount / FILE)
    assert saved is not None
    index, digests = saved
    assert digests == floor_digests(chat)
    assert index.to_blocks() == ChatIndex(docs(chat.messages)).to_blocks()


async def floors(agent: ChatAgent, query: str) -> list[int]:
    result = await agent("chat_search", query=query, limit=50)
    assert not result.is_error, result.content
    return [h["floor"] for h in result.structured["hits"]]


async def test_second_run_loads_the_saved_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_chat(tmp_path / "c.jsonl", [*texts(40), "the zeppelin landed"])
    first = ChatAgent(tmp_path / "data", path)
    assert await floors(first, "zeppelin") == [40]
    assert (first.mount / FILE).is_file()
    saved_matches_the_chat(first, path)

    builds = Builds(monkeypatch)
    second = ChatAgent(tmp_path / "data", path, run_id="run_2")
    before = (second.mount / FILE).stat().st_mtime_ns
    assert await floors(second, "zeppelin") == [40]
    assert await floors(second, "tavern rain") == await floors(first, "tavern rain")
    assert builds.count == 0
    assert (second.mount / FILE).stat().st_mtime_ns == before  # unchanged: not rewritten


async def test_appended_floors_are_indexed_without_a_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = [*texts(30), "an airship over the harbour"]
    path = write_chat(tmp_path / "c.jsonl", base)
    first = ChatAgent(tmp_path / "data", path)
    assert await floors(first, "airship") == [30]

    builds = Builds(monkeypatch)
    write_chat(path, [*base, *texts(5, seed=9), "another airship, a zeppelin"])
    later = ChatAgent(tmp_path / "data", path, run_id="run_2")
    assert await floors(later, "zeppelin") == [36]
    assert sorted(await floors(later, "airship")) == [30, 36]
    assert builds.count == 0
    saved_matches_the_chat(later, path)


async def test_edited_and_removed_floors_invalidate_the_saved_part(tmp_path: Path) -> None:
    chat_texts = [*texts(20), "the lighthouse keeper", *texts(10, seed=4)]
    path = write_chat(tmp_path / "c.jsonl", chat_texts)
    first = ChatAgent(tmp_path / "data", path)
    assert await floors(first, "lighthouse") == [20]

    chat_texts[20] = "the observatory keeper"
    write_chat(path, chat_texts)
    edited = ChatAgent(tmp_path / "data", path, run_id="run_2")
    assert await floors(edited, "lighthouse") == []
    assert await floors(edited, "observatory") == [20]
    saved_matches_the_chat(edited, path)

    write_chat(path, chat_texts[:15])  # floors deleted from the end
    shorter = ChatAgent(tmp_path / "data", path, run_id="run_3")
    assert await floors(shorter, "observatory") == []
    saved_matches_the_chat(shorter, path)


async def test_a_commit_in_the_same_run_is_searchable(tmp_path: Path) -> None:
    path = write_chat(tmp_path / "c.jsonl", texts(12))
    agent = ChatAgent(tmp_path / "data", path)
    assert await floors(agent, "gondola") == []
    agent.chat.apply_commit("A gondola drifted past.", "output/main.md", "replace", "reply")
    index = agent.chat.index()  # the whole chat file; the tool shows the run's frozen floors
    assert [h.floor for h in index.search("gondola", limit=5, end=len(index))] == [12]
    saved_matches_the_chat(agent, path)


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],
        lambda data: data[:-1] + bytes([data[-1] ^ 1]),
        lambda data: data.replace(b'"version": 1', b'"version": 99', 1),
        lambda data: b"not an index",
    ],
)
async def test_an_unusable_saved_index_is_rebuilt(
    tmp_path: Path, damage: Callable[[bytes], bytes]
) -> None:
    path = write_chat(tmp_path / "c.jsonl", [*texts(25), "the zeppelin landed"])
    first = ChatAgent(tmp_path / "data", path)
    await floors(first, "zeppelin")
    saved = first.mount / FILE
    saved.write_bytes(damage(saved.read_bytes()))
    again = ChatAgent(tmp_path / "data", path, run_id="run_2")
    assert await floors(again, "zeppelin") == [25]
    saved_matches_the_chat(again, path)


def test_no_folder_to_save_in_is_not_an_error(tmp_path: Path) -> None:
    chat = parse_chat(write_chat(tmp_path / "c.jsonl", ["a zeppelin", "rain"]).read_bytes())
    blocker = tmp_path / "blocked"
    blocker.write_text("a file where the folder would be")
    index = index_store.load_or_build(chat, blocker / "mount")
    assert [h.floor for h in index.search("zeppelin", limit=5, end=2)] == [0]


async def test_with_a_saved_index_only_used_floors_are_parsed(tmp_path: Path) -> None:
    chat_texts = [*texts(30), "the zeppelin landed", "and the crew cheered"]
    path = write_chat(tmp_path / "c.jsonl", chat_texts, hidden=frozenset({3}))
    first = ChatAgent(tmp_path / "data", path)
    await floors(first, "zeppelin")
    eager = parse_chat(path.read_bytes())

    later = ChatAgent(tmp_path / "data", path, run_id="run_2")
    found = await later("chat_search", query="zeppelin crew", role="user")
    assert (
        found.structured
        == (await first("chat_search", query="zeppelin crew", role="user")).structured
    )
    read = await later("chat_read_messages", floors=[{"floor": 3}, {"floor": 31}])
    assert "hidden" in read.content and "crew cheered" in read.content
    chat = later.chat.chat()
    parsed = {i for i, m in enumerate(chat.messages) if m._raw is not None}
    assert {3, 30, 31} >= parsed >= {3, 31}  # the floors shown, nothing else
    assert chat.messages == eager.messages  # parsing on use gives the same messages
    assert chat.encode() == path.read_bytes()


async def test_a_broken_new_line_is_skipped_like_sillytavern_does(tmp_path: Path) -> None:
    path = write_chat(tmp_path / "c.jsonl", [*texts(10), "the zeppelin landed"])
    first = ChatAgent(tmp_path / "data", path)
    await floors(first, "zeppelin")
    later = ChatAgent(tmp_path / "data", path, run_id="run_2")
    with path.open("ab") as handle:
        handle.write(b'\n{"name": "User", "mes": "cut off')
    result = await later("chat_search", query="zeppelin")
    assert not result.is_error and result.structured["hits"][0]["floor"] == 10
    assert len(later.chat.chat().messages) == 11  # the torn line is no floor
    assert later.chat.chat().encode() == path.read_bytes()
