"""A commit killed with SIGKILL leaves the chat file whole: the old chat or the new one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tavern_agent.chat.formats import parse_chat
from tests.chat.helpers import write_chat

CHILD = r"""
import sys
from pathlib import Path
from tavern_agent.chat.repository import ChatCommit, FileChatRepository

repo = FileChatRepository(Path(sys.argv[1]))
print("committing", flush=True)
commit = ChatCommit("run_kill", "writer", "output/main.md", "New reply.", "replace")
receipt = repo.apply_commit(commit)
print("done", receipt.floor, flush=True)
"""


@pytest.mark.slow
@pytest.mark.crash
def test_sigkill_mid_commit_leaves_old_or_new_chat(tmp_path: Path) -> None:
    texts = [f"message {i} " + "lorem ipsum " * 400 for i in range(12_000)]  # ~60 MB
    chat_path = write_chat(tmp_path / "big.jsonl", texts)
    original = chat_path.read_bytes()
    old = original
    root = Path(__file__).resolve().parents[2]
    killed_mid_write = 0
    for pause in (0.0, 0.005, 0.02, 0.05):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(chat_path)], stdout=subprocess.PIPE, cwd=root
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"committing"
        deadline = time.monotonic() + 120
        while not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]:
            if child.poll() is not None:
                break
            assert time.monotonic() < deadline, "the commit never started writing"
            time.sleep(0.0005)
        time.sleep(pause)
        child.send_signal(signal.SIGKILL)
        child.wait()
        leftovers = [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
        killed_mid_write += bool(leftovers)
        data = chat_path.read_bytes()
        chat = parse_chat(data)  # never broken
        if data == old:
            assert len(chat.messages) == len(texts)
        else:
            # the new chat: every original line byte-identical, plus the committed message
            assert data.split(b"\n")[:-1] == original.split(b"\n")
            assert len(chat.messages) == len(texts) + 1
            assert chat.messages[-1].mes == "New reply."
            old = data
        for name in leftovers:
            os.unlink(tmp_path / name)
    assert killed_mid_write, "no kill landed during the write; make the chat bigger"
