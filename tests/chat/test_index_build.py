"""Reading a large chat fast, and building its search index in the background."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest
from rich.console import Console

from tavern_agent.assembly import Assembly, ChatSource
from tavern_agent.chat import progress, search
from tavern_agent.chat.formats import parse_chat
from tavern_agent.chat.index_store import FILE, docs
from tavern_agent.chat.progress import BuildProgress
from tavern_agent.chat.search import ChatIndex, Doc
from tavern_agent.core import json_input
from tests.chat.helpers import write_chat

LINES = [
    b'{"name":"A","mes":"big \\u00e9","extra":{"id":123456789012345678901234567890}}',
    b'{"name":"A","mes":"lone \\ud800 surrogate","n":NaN,"f":1e400}',
    b'{"name":"A","mes":"cesu \xed\xa0\x80","x":[1.0000000000000002,-0.0,1E5]}',
    b'{"name":"A","mes":"dup","mes":"last wins"}',
]


def test_message_lines_decode_exactly_as_the_standard_library() -> None:
    header = b'{"user_name":"U","character_name":"S"}'
    chat = parse_chat(b"\n".join([header, *LINES]))
    assert [m.raw for m in chat.messages] == [json.loads(line) for line in LINES]
    assert chat.messages[0].raw["extra"]["id"] == 123456789012345678901234567890  # not a float
    assert [m.encoded() for m in chat.messages] == LINES


@pytest.mark.parametrize(
    "bad", [b'{"a":01}', b"[" * 5000, b"[" + b"9" * 5000 + b"]", b'{"a":"\xff"}', b"{} x"]
)
def test_bad_json_fails_with_the_standard_library_reason(bad: bytes) -> None:
    try:
        json.loads(bad)
    except (ValueError, RecursionError) as exc:
        expected = json_input.describe(exc)
    with pytest.raises(json_input.JsonInputError) as failed:
        json_input.loads(bad)
    assert str(failed.value) == expected


def test_the_index_is_built_and_saved_before_the_first_search(tmp_path: Path) -> None:
    texts = [f"floor {i} about the {'lantern' if i % 7 == 0 else 'river'}" for i in range(600)]
    chat_file = write_chat(tmp_path / "c.jsonl", texts)
    assembly = Assembly(tmp_path / "data")
    chat_run, chat, _ = assembly.chat_run(
        ChatSource(chat_file), tmp_path / "run", run_id="r1", profile_id="p"
    )
    saved = assembly.data.chat_mount_dir(chat.stable_id(str(chat_file.resolve()))) / FILE
    deadline = time.monotonic() + 30
    while not saved.is_file() and time.monotonic() < deadline:  # no chat tool was called
        time.sleep(0.02)
    assert saved.is_file()
    index = chat_run.index()
    assert index.to_blocks() == ChatIndex(docs(chat.messages)).to_blocks()
    assert chat_run.index() is index  # built once per chat file version
    chat_file.write_text(chat_file.read_text() + '\n{"name":"S","mes":"a zeppelin"}')
    assert [h.floor for h in chat_run.index().search("zeppelin", limit=5, end=10**6)] == [600]


def test_a_long_wait_for_the_index_shows_a_progress_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "DELAY_SECONDS", 0.05)
    out = io.StringIO()
    state = BuildProgress(step="indexing the chat", total=10)

    def build() -> str:
        for i in range(10):
            state.done = i + 1
            time.sleep(0.05)
        return "index"

    with progress.shown(Console(file=out, force_terminal=True, width=100)):
        assert progress.wait(progress.in_background(build), state) == "index"
    assert "chat_search: indexing the chat" in out.getvalue()


def test_a_failed_build_raises_where_it_is_waited_for() -> None:
    def build() -> str:
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        progress.wait(progress.in_background(build), BuildProgress())


def test_a_paused_build_stops_at_its_next_checkpoint_until_the_scan_is_done() -> None:
    texts = [Doc(f"word{i} and more words", "user", False) for i in range(3 * search._STEP)]
    state = BuildProgress()
    with state.paused():
        future = progress.in_background(lambda: ChatIndex(texts, state))
        deadline = time.monotonic() + 60
        while state.done < search._STEP and time.monotonic() < deadline:
            time.sleep(0.01)
        assert state.done == search._STEP  # and no further: it waits at the checkpoint
        assert not future.done()
    assert future.result(timeout=60).to_blocks() == ChatIndex(texts).to_blocks()
