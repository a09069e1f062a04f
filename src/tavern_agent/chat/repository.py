"""The ``ChatRepository`` port and its adapter for SillyTavern chat files on disk.

Applying a commit appends the run's assistant message, or replaces /
appends to the message this run already created (found by
``extra.agent.runId``). The new message is signed with the character's name
and dated in the format the chat already uses. The write is atomic: the new
file goes to a temporary file beside the chat, is fsynced and renamed over it
(through a symlink, onto the real file), so a crash at any point leaves the
old or the new chat, never a broken one. Only the committed line is
re-encoded; every other line keeps its bytes.

A commit never loses what SillyTavern (or the user) wrote meanwhile: it is
applied to the chat as it is at that moment, so messages added since the run
read the chat stay and the reply follows them; a message of this run that was
edited in SillyTavern is left as edited and the commit becomes a new message;
and if the file is replaced between reading and renaming, the commit is
applied again to the new file. The receipt says when such a merge happened.

Writers serialize on an ``flock`` of the chat file itself (re-checked after
the lock is taken, since a rename swaps the file), so no lock files appear in
the user's chat folder. SillyTavern does not take that lock, hence the
re-check right before the rename.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tavern_agent.chat.dates import chat_date_format, send_date
from tavern_agent.chat.formats import (
    ChatFile,
    ChatFormatError,
    ChatMessage,
    collection_paused,
    new_message,
    parse_chat,
)
from tavern_agent.fsutil import ChangedMeanwhile, atomic_write

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
    floor_count: int | None = None  # how many floors the run read, with their digest:
    prefix_sha256: str | None = None  # to tell what changed in the chat since


@dataclass(frozen=True, slots=True)
class CommitReceipt:
    """What a commit did to the chat: the floor written, whether
    it was new, its length, and what had changed meanwhile."""

    floor: int
    created: bool
    chars: int
    merged: str = ""  # what had changed in the chat since the run read it, if anything


class ChatKeepsChanging(OSError):
    """The chat file was replaced under every one of several commit attempts."""


def prefix_digest(chat: ChatFile, count: int) -> str:
    """SHA-256 of the first ``count`` floors' lines: what a run read of the chat."""
    digest = hashlib.sha256()
    for message in chat.messages[:count]:
        digest.update(message.encoded())
        digest.update(b"\n")
    return digest.hexdigest()


class ChatRepository(Protocol):
    """Where a run's chat lives: read it whole, apply a commit atomically."""

    @property
    def label(self) -> str:
        """A short name of the chat for messages (the file's stem)."""

    def load(self) -> ChatFile:
        """The chat as it is now, read whole."""

    def apply_commit(self, commit: ChatCommit) -> CommitReceipt:
        """Write ``commit`` into the chat atomically, onto its current version."""


class FileChatRepository:
    """A SillyTavern ``.jsonl`` chat file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def label(self) -> str:
        """The chat file's name without its extension."""
        return self.path.stem

    def load(self) -> ChatFile:
        """The chat file, read and parsed."""
        return self._parse(self.path.read_bytes())

    def _parse(self, data: bytes) -> ChatFile:
        try:
            with collection_paused():
                return parse_chat(data)
        except ChatFormatError as exc:  # name the file: a user may pass several
            raise ChatFormatError(f"{self.path}: {exc}") from None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[tuple[bytes, tuple[int, int, int]]]:
        """The chat's bytes and stamp, read under an exclusive lock of the current file."""
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
                yield data, _stamp(os.fstat(fd))
                return
            finally:
                os.close(fd)

    def apply_commit(self, commit: ChatCommit) -> CommitReceipt:
        """Apply ``commit`` under the file's lock and write the chat atomically;
        a SillyTavern save in between is merged, not overwritten."""
        for _ in range(_ATTEMPTS):
            with self._locked() as (data, stamp):
                chat = self._parse(data)
                receipt = apply_to_chat(chat, commit)
                try:
                    atomic_write(
                        self.path,
                        chat.encode(),
                        follow_link=True,
                        unchanged=lambda: _stamp(os.stat(self.path)) == stamp,
                    )
                except ChangedMeanwhile:
                    continue  # SillyTavern saved the chat meanwhile: apply to its version
            return receipt
        raise ChatKeepsChanging(f"{self.path} changed under {_ATTEMPTS} commit attempts")


_ATTEMPTS = 5


def _stamp(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def find_run_message(chat: ChatFile, run_id: str) -> int | None:
    """The floor of the message a run created, if any (the newest one)."""
    for index in range(len(chat.messages) - 1, -1, -1):
        agent = chat.messages[index].extra.get(AGENT_KEY)
        if isinstance(agent, dict) and agent.get("runId") == run_id:
            return index
    return None


def apply_to_chat(chat: ChatFile, commit: ChatCommit) -> CommitReceipt:
    """Change ``chat`` in memory as the commit asks; only one message changes."""
    merged = _changes_since_read(chat, commit)
    floor = find_run_message(chat, commit.run_id)
    if floor is not None and _edited_elsewhere(chat.messages[floor]):
        merged = f"floor {floor}, which this run wrote, was edited since; it stays as it is"
        floor = None
    if floor is None:
        return _append(chat, commit, merged)
    message: ChatMessage = chat.messages[floor]
    text = commit.text if commit.mode == "replace" else message.mes + commit.text
    message.set_text(text)
    previous = message.extra.get(AGENT_KEY)
    count = previous.get("commits", 1) if isinstance(previous, dict) else 1
    extra = message.raw.setdefault("extra", {})
    extra[AGENT_KEY] = _agent_meta(commit, text, commits=int(count) + 1)
    return CommitReceipt(floor, False, len(text), merged)


def _append(chat: ChatFile, commit: ChatCommit, merged: str) -> CommitReceipt:
    """The commit as a new message at the end, signed and dated as the chat's own."""
    name = commit.name or chat.speaker(user=False) or "Assistant"
    if not chat.has_header and not chat.messages:  # an empty file: give it a header
        user = chat.speaker(user=True) or "User"
        chat.header = {"user_name": user, "character_name": name, "chat_metadata": {}}
        chat.has_header = True
    dates = (m.raw.get("send_date") for m in reversed(chat.messages))
    date = send_date(fmt=chat_date_format(dates))
    agent = _agent_meta(commit, commit.text, commits=1)
    chat.messages.append(new_message(name, commit.text, extra={AGENT_KEY: agent}, date=date))
    return CommitReceipt(len(chat.messages) - 1, True, len(commit.text), merged)


def _changes_since_read(chat: ChatFile, commit: ChatCommit) -> str:
    """What changed in the chat's floors since the run read them ("" for nothing)."""
    if commit.floor_count is None:
        return ""
    read = commit.floor_count
    if commit.prefix_sha256 and prefix_digest(chat, read) != commit.prefix_sha256:
        return f"floors 0-{read - 1}, which the run read, were edited or deleted since"
    added = len(chat.messages) - read
    if added > 0 and find_run_message(chat, commit.run_id) is None:
        return f"{added} message(s) were added since the run read the chat; the reply follows them"
    return ""


def _text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _edited_elsewhere(message: ChatMessage) -> bool:
    """Whether a message this run wrote no longer holds the text the run gave it."""
    agent = message.extra.get(AGENT_KEY)
    wrote = agent.get("textSha256") if isinstance(agent, dict) else None
    mes = message.raw.get("mes")
    return isinstance(wrote, str) and isinstance(mes, str) and _text_digest(mes) != wrote


def _agent_meta(commit: ChatCommit, text: str, *, commits: int) -> dict[str, Any]:
    return {
        "runId": commit.run_id,
        "profileId": commit.profile_id,
        "file": commit.file_path,
        "mode": commit.mode,
        "reason": commit.reason,
        "commits": commits,
        "textSha256": _text_digest(text),  # tells an edit made in SillyTavern
    }
