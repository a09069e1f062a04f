"""A chat search that comes before the run's index is ready scans the chat instead of waiting."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from tavern_agent.chat import run_input
from tavern_agent.chat.formats import new_message
from tavern_agent.chat.index_store import docs
from tavern_agent.chat.search import ChatIndex, ChatScan
from tests.chat.helpers import ChatAgent, filler, write_chat

FLOORS = 3_000  # above run_input.SCAN_FROM: smaller chats wait for their index


class HeldBuilds:
    """Index builds that start only when the test says so (the build itself is the real one)."""

    def __init__(self) -> None:
        self.held: list[tuple[Callable[[], Any], Future[Any]]] = []

    def __call__(self, work: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        self.held.append((work, future))
        return future

    def release(self) -> None:
        for work, future in self.held:
            future.set_result(work())


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> HeldBuilds:
    builds = HeldBuilds()
    monkeypatch.setattr(run_input, "in_background", builds)
    return builds


def texts() -> list[str]:
    rng = random.Random(5)
    out = [filler(rng) for _ in range(FLOORS)]
    out[1234] = "The zeppelin drifted over the harbour."
    out[2500] = "A zeppelin, a second zeppelin, and a third ZEPPELIN."
    out[2900] = "我们在森林深处发现了一座古老的神殿。"
    out[17] = "zeppelins are not the same word"
    return out


async def test_a_search_before_the_index_is_ready_scans_then_the_index_answers(
    tmp_path: Path, held: HeldBuilds
) -> None:
    agent = ChatAgent(tmp_path / "data", write_chat(tmp_path / "c.jsonl", texts()))
    # The build never runs until released: a search that waited for it would not return.
    early = await asyncio.wait_for(agent("chat_search", query="zeppelin"), timeout=60)
    assert not early.is_error
    assert [h["floor"] for h in early.structured["hits"]] == [2500, 1234]
    assert "floor 2500 (user, User) chat/floors/002500/message.md" in early.content
    cjk = await asyncio.wait_for(agent("chat_search", query="森林的神殿"), timeout=60)
    assert [h["floor"] for h in cjk.structured["hits"]] == [2900]
    assert isinstance(agent.chat.searcher(), ChatScan)
    assert held.held and not held.held[0][1].done()

    held.release()
    assert isinstance(agent.chat.searcher(), ChatIndex)
    later = await agent("chat_search", query="zeppelin")
    assert [h["floor"] for h in later.structured["hits"]] == [2500, 1234]
    assert "floor 2500 (user, User) chat/floors/002500/message.md" in later.content


def test_the_scan_finds_the_floors_the_index_finds(tmp_path: Path) -> None:
    chat = agent_chat(tmp_path)
    scan, index = ChatScan(chat), ChatIndex(docs(chat))
    for query in ["zeppelin", "lanterns wagons", "森林", "神殿", "ZEPPELIN harbour"]:
        for kwargs in [{}, {"start": 1500, "end": 2600}, {"role": "user"}]:
            args: dict[str, Any] = {"limit": FLOORS, "end": FLOORS} | kwargs
            found = {h.floor for h in scan.search(query, **args)}
            assert found == {h.floor for h in index.search(query, **args)}, (query, kwargs)


def agent_chat(tmp_path: Path) -> list[Any]:
    agent = ChatAgent(tmp_path / "data", write_chat(tmp_path / "c.jsonl", texts()))
    return list(agent.chat.chat().messages)


def test_the_scan_finds_words_between_ascii_word_boundaries_and_cjk_anywhere() -> None:
    floors = [
        "zeppelin",  # the whole floor
        "a zeppelins parade, then one zeppelin",  # inside a longer word first, then a word
        "zeppelins only",
        "zeppelin_one and one_zeppelin",  # joined by _: not a word for the scan
        "2zeppelin zeppelin2",
        "ZEPPELIN! Zeppelin? zeppelin.",
        "",
        "un café au lait",
        "cafés et cafeteria",
        "我们在森林深处 森林",
        "end with zeppelin",
    ]
    messages = [new_message("A", text) for text in floors]
    scan = ChatScan(messages)

    def found(query: str) -> dict[int, float]:
        return {h.floor: h.score for h in scan.search(query, limit=100, end=len(floors))}

    zeppelin = found("zeppelin")
    assert set(zeppelin) == {0, 1, 5, 10}
    assert zeppelin[5] > zeppelin[10]  # three times in a floor of about the same length
    assert set(found("café")) == {7, 8}  # no boundary after a non-ASCII letter
    assert set(found("森林")) == {9}
    assert set(found("one")) == {1}  # "_one" and "one_" are not the word
