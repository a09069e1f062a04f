"""The ``ChatRepository`` port and its adapter for SillyTavern chat files on disk.

Applying a commit appends the run's assistant message, or replaces /
appends to the message this run already created (found by
``extra.agent.runId``). The write is atomic: the new file goes to a temporary
file beside the chat, is fsynced and renamed over it, so a crash at any point
leaves the old or the new chat, never a broken one. Only the committed line is
re-encoded; every other line keeps its bytes.

Writers serialize on an ``flock`` of the chat file itself (re-checked after
the lock is taken, since a rename swaps the file), so no lock files appear in
the user's chat folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tavern_agent.chat.formats import (
    ChatFile,
    ChatMessage,
    collection_paused,
    new_message,
    parse_chat,
)
from tavern_agent.fsutil import atomic_write

AGENT_KEY = "agent"  # extra.agent holds the run's metadata on a committed message


@dataclass(frozen=True, slots=True)
class ChatCommit:
    """What one ``workspace.commit`` asks the chat to show."""

    run_id: str
    profile_id: str
    file_path: str
    text: str
    mode: str  # "replace" or "append"
    reason: str = ""
    name: str | None = None  # the speaker; default the chat's character


@dataclass(frozen=True, slots=True)
class CommitReceipt:
    floor: int
    created: bool
    chars: int


class ChatRepository(Protocol):
    """Where a run's chat lives: read it whole, apply a commit atomically."""

    @property
    def label(self) -> str: ...

    def load(self) -> ChatFile: ...

    def apply_commit(self, commit: ChatCommit) -> CommitReceipt: ...


class FileChatRepository:
    """A SillyTavern ``.jsonl`` chat file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def label(self) -> str:
        return self.path.stem

    def load(self) -> ChatFile:
        data = self.path.read_bytes()
        with collection_paused():
            return parse_chat(data)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[bytes]:
        """The chat's bytes, read under an exclusive lock of the current file."""
        while True:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
                except FileNotFoundError:
                    same = False
                if not same:
                    continue  # replaced while we waited: lock the new file
                with os.fdopen(os.dup(fd), "rb") as handle:
                    data = handle.read()
                yield data
                return
            finally:
                os.close(fd)

    def apply_commit(self, commit: ChatCommit) -> CommitReceipt:
        with self._locked() as data:
            chat = parse_chat(data)
            receipt = apply_to_chat(chat, commit)
            atomic_write(self.path, chat.encode(), follow_link=True)
        return receipt


def find_run_message(chat: ChatFile, run_id: str) -> int | None:
    """The floor of the message a run created, if any (the newest one)."""
    for index in range(len(chat.messages) - 1, -1, -1):
        agent = chat.messages[index].extra.get(AGENT_KEY)
        if isinstance(agent, dict) and agent.get("runId") == run_id:
            return index
    return None


def apply_to_chat(chat: ChatFile, commit: ChatCommit) -> CommitReceipt:
    """Change ``chat`` in memory as the commit asks; only one message changes."""
    floor = find_run_message(chat, commit.run_id)
    if floor is None:
        agent = _agent_meta(commit, commits=1)
        name = commit.name or chat.character_name or "Assistant"
        chat.messages.append(new_message(name, commit.text, extra={AGENT_KEY: agent}))
        return CommitReceipt(len(chat.messages) - 1, True, len(commit.text))
    message: ChatMessage = chat.messages[floor]
    text = commit.text if commit.mode == "replace" else message.mes + commit.text
    message.set_text(text)
    previous = message.extra.get(AGENT_KEY)
    count = previous.get("commits", 1) if isinstance(previous, dict) else 1
    extra = message.raw.setdefault("extra", {})
    extra[AGENT_KEY] = _agent_meta(commit, commits=int(count) + 1)
    return CommitReceipt(floor, False, len(text))


def _agent_meta(commit: ChatCommit, *, commits: int) -> dict[str, Any]:
    return {
        "runId": commit.run_id,
        "profileId": commit.profile_id,
        "file": commit.file_path,
        "mode": commit.mode,
        "reason": commit.reason,
        "commits": commits,
    }
