"""A chat file with lines SillyTavern skips: read as it reads them, but never silently.

``call`` and ``run`` name the file and the skipped lines on stderr, a run
journals them, the chat tools tell the model which floors are missing, and a
commit keeps those bytes where they are. A chat whose header line cannot be
read is refused by ``run`` before the model is asked.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tavern_agent.chat.formats import parse_chat
from tavern_agent.chat.repository import ChatCommit, FileChatRepository
from tavern_agent.cli import main
from tests.runtime.openai_server import OpenAIServer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BROKEN = {
    "truncated": b'{"name":"Rowan","is_user":true,"mes":"We ford',
    # Not UTF-8 outside a string: no JSON even as Node reads it (bytes as U+FFFD).
    "invalid-utf8": b'{"name":"Rowan",\xff\xfe"mes":"x"}',
    "nul-byte": b'{"name":"Rowan","mes":"a\x00b"}',
    "deep-nesting": b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "huge-integer": b'{"a":' + b"9" * 5000 + b"}",
    "array": b'["not", "a", "message"]',
}


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def with_lines(tmp_path: Path, planted: dict[int, bytes]) -> Path:
    """The example chat with ``planted`` lines inserted before the given line numbers."""
    lines = (EXAMPLES / "chat.jsonl").read_bytes().rstrip(b"\n").split(b"\n")
    for number in sorted(planted):
        lines.insert(number - 1, planted[number])
    chat = tmp_path / "chat.jsonl"
    chat.write_bytes(b"\n".join(lines))
    return chat


@pytest.mark.parametrize("kind", list(BROKEN))
def test_call_names_the_file_and_lines_and_tells_the_model_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    chat = with_lines(tmp_path, {3: BROKEN[kind], 6: b"not json at all"})
    args = ["--data-dir", str(tmp_path / "data"), "call", "chat_read_messages"]
    args += ['{"floors":[{"floor":0},{"floor":1}]}', "--chat", str(chat), "--json"]
    code, out, err = cli(capsys, *args)
    assert code == 0, err
    (warning,) = err.splitlines()
    assert str(chat) in warning and "lines 3, 6" in warning and "SillyTavern skips" in warning
    content = json.loads(out)["content"]
    assert "2 line(s) of the chat file could not be read" in content
    assert "before floor 1; before floor 3" in content


def test_a_commit_keeps_a_truncated_last_line_in_place(tmp_path: Path) -> None:
    chat = with_lines(tmp_path, {})
    good = chat.read_bytes()
    before = good + b"\n" + BROKEN["truncated"]  # SillyTavern died mid-write
    chat.write_bytes(before)
    commit = ChatCommit("run_a", "writer", "output/main.md", "The reply.", "replace")
    FileChatRepository(chat).apply_commit(commit)
    after = chat.read_bytes()
    assert after.startswith(before + b"\n")  # nothing moved; the new line starts fresh
    added = json.loads(after[len(before) + 1 :])
    assert added["mes"] == "The reply."
    parsed = parse_chat(after)
    assert [s.line for s in parsed.skipped] == [len(good.split(b"\n")) + 1]
    assert parsed.messages[-1].mes == "The reply."


def run_args(tmp_path: Path, chat: Path) -> list[str]:
    args = ["--data-dir", str(tmp_path / "data"), "run", str(chat), "--json"]
    args += ["--character", str(EXAMPLES / "seraphina-card.json")]
    args += ["--world", str(EXAMPLES / "eldoria-world.json")]
    args += ["--profile", str(EXAMPLES / "profile.json"), "--seed", "7"]
    return args


def test_a_run_warns_once_and_journals_the_skipped_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chat = with_lines(tmp_path, {4: BROKEN["nul-byte"]})
    replay = ["--replay", str(EXAMPLES / "recorded-run")]
    code, _, err = cli(capsys, *run_args(tmp_path, chat), *replay)
    assert code == 0, err
    (warning,) = err.splitlines()
    assert f"{chat.resolve()}: line 4 is not readable" in warning
    (journal,) = (tmp_path / "data").glob("chats/*/runs/*/events.jsonl")
    started = json.loads(journal.read_text().splitlines()[0])
    assert started["type"] == "run_started"
    assert started["payload"]["skippedChatLines"] == [4]


@pytest.mark.parametrize("header", [b"[1, 2]", b'{"user_name": "Rowan", "chat_me', b"\x00"])
def test_a_run_refuses_a_chat_whose_header_cannot_be_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], header: bytes
) -> None:
    source = (EXAMPLES / "chat.jsonl").read_bytes().split(b"\n", 1)[1]
    chat = tmp_path / "chat.jsonl"
    chat.write_bytes(header + b"\n" + source)
    before = chat.read_bytes()
    with OpenAIServer([]) as upstream:
        model = ["--model", "local", "--base-url", upstream.base_url]
        code, out, err = cli(capsys, *run_args(tmp_path, chat), *model)
        assert not upstream.bodies  # the model was never asked
    assert code == 2 and not out
    (line,) = err.strip().splitlines()
    assert str(chat) in line and "line 1" in line and "header" in line
    assert chat.read_bytes() == before
    assert not list((tmp_path / "data").glob("chats/*/runs/*"))


def test_a_chat_without_a_header_line_is_still_a_group_chat(tmp_path: Path) -> None:
    """SillyTavern 1.12 saved group chats without a header: that is no broken line."""
    shutil.copyfile(EXAMPLES / "chat.jsonl", tmp_path / "c.jsonl")
    data = (tmp_path / "c.jsonl").read_bytes().split(b"\n", 1)[1]
    chat = parse_chat(data)
    assert not chat.has_header and not chat.skipped and not chat.header_unreadable
