"""What an invocation has read of each file, for compare-and-swap writes and patches."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tavern_agent.fsutil import atomic_write

_HASHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="read-sha")
_CHUNK = 1 << 20
# A file whose status changed this recently may change again within the filesystem's
# timestamp granularity, unseen by a status compare: such files are read whole instead.
SETTLED_SECONDS = 1.0
# The digest of a file that changed while it was hashed: equal to no file's sha256, so the
# next write or patch finds the file "changed since you read it" and asks for a new read.
CHANGED_WHILE_READ = "changed-while-read"


@dataclass(slots=True)
class ReadState:
    """The file's sha256 at read time, whether the whole file was returned, and that text.

    ``needs_full_read`` is set by a failed patch after a partial read: the next
    patch of this file is refused until the file is read in full. For a large
    file the sha is computed in the background from the exact bytes that were
    read, so a preview returns at once; whoever compares it waits for it.
    """

    digest: str | Future[str]
    full: bool
    text: str
    needs_full_read: bool = False
    # Set by load_reads on a state another process saved (see save_reads).
    saved_at: int | None = field(default=None, compare=False)

    @property
    def sha256(self) -> str:
        """The file's hash at read time (waits for a background hash to finish)."""
        return self.digest if isinstance(self.digest, str) else self.digest.result()

    @classmethod
    def of(cls, data: bytes, full: bool, text: str, *, background: bool = False) -> ReadState:
        """The read state of ``data``; ``background`` hashes it off the caller's thread."""
        digest: str | Future[str] = _HASHER.submit(_sha256, data) if background else _sha256(data)
        return cls(digest, full, text)

    @classmethod
    def of_open_file(cls, fd: int, before: os.stat_result, text: str) -> ReadState:
        """The state of a partial read of the file open as ``fd`` (a duplicate is taken).

        Only part of the file was read, so the file is hashed in the background
        through its own descriptor. The write rules stay as safe as hashing the
        bytes read: ``before`` is the status taken before reading; if the status
        (inode, size, modification and change times) differs once hashing is done,
        the file changed meanwhile and the digest is :data:`CHANGED_WHILE_READ`.
        The change time cannot be set back by a program, and :func:`settled` keeps
        files changed within the timestamp granularity from coming here at all.
        """
        return cls(_HASHER.submit(_sha256_of_fd, os.dup(fd), before), False, text)


def settled(st: os.stat_result) -> bool:
    """The file's status last changed long enough ago that a new change shows in it."""
    return time.time_ns() - st.st_ctime_ns > SETTLED_SECONDS * 1e9


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _sha256_of_fd(fd: int, before: os.stat_result) -> str:
    try:
        digest, at = hashlib.sha256(), 0
        while chunk := os.pread(fd, _CHUNK, at):
            digest.update(chunk)
            at += len(chunk)
        if _identity(os.fstat(fd)) != _identity(before) or at != before.st_size:
            return CHANGED_WHILE_READ
        return digest.hexdigest()
    except OSError:
        return CHANGED_WHILE_READ
    finally:
        os.close(fd)


def reads_to_json(reads: Mapping[str, ReadState]) -> dict[str, Any]:
    """Read states as JSON (the one form on disk: the checkpoint and the CLI's reads)."""
    return {
        key: {
            "sha256": s.sha256,
            "full": s.full,
            "text": s.text,
            "needsFullRead": s.needs_full_read,
        }
        for key, s in reads.items()
    }


def reads_from_json(data: Mapping[str, Any]) -> dict[str, ReadState]:
    """Read states from :func:`reads_to_json`'s form (``needsFullRead`` may be absent)."""
    return {
        key: ReadState(
            str(v["sha256"]), bool(v["full"]), str(v["text"]), bool(v.get("needsFullRead", False))
        )
        for key, v in data.items()
    }


# Reads saved this soon after a process started count as seen by it: the start time
# is known to about 10 ms, and a call that started then cannot have written yet.
_START_SLACK_NS = 50_000_000
_IMPORTED_NS = time.time_ns()


def process_started_ns() -> int:
    """When this process started (Unix ns); where unknown, when this module was imported."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            ticks = int(handle.read().rsplit(b")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/uptime", "rb") as handle:
            uptime = float(handle.read().split()[0])
        now = time.time_ns()
        return now - int((uptime - ticks / os.sysconf("SC_CLK_TCK")) * 1e9)
    except (OSError, ValueError, IndexError):
        return _IMPORTED_NS


# What load_reads handed out, by reads file: each path's savedAt and needsFullRead.
_LOADED: dict[Path, dict[str, tuple[int, bool]]] = {}


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """The reads file's folder locked: the file itself is replaced on every save."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


def _entries(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load_reads(path: Path) -> dict[str, ReadState]:
    """Read states saved by :func:`save_reads`, as they were when this process started.

    Separate processes on one workspace act as calls of one invocation, but
    only in order: a state saved after this process started (another call's
    write, done while this one was starting) is not this call's. Where the
    path had a state before, the call gets one that matches no file, so its
    write is told the file changed since its read; otherwise it has none.
    """
    started = process_started_ns() + _START_SLACK_NS
    with _locked(path):
        data = _entries(path)
    reads: dict[str, ReadState] = {}
    loaded: dict[str, tuple[int, bool]] = {}
    for key, v in data.items():
        saved = int(v.get("savedAt", 0))
        if int(v.get("firstSavedAt", saved)) > started:
            continue
        if saved > started:
            reads[key] = ReadState(CHANGED_WHILE_READ, True, "")
        else:
            reads[key] = reads_from_json({key: v})[key]
        reads[key].saved_at = saved
        loaded[key] = (saved, reads[key].needs_full_read)
    _LOADED[path] = loaded
    return reads


def save_reads(path: Path, reads: Mapping[str, ReadState]) -> None:
    """Save the states this process changed; other processes' newer ones stay."""
    loaded = _LOADED.pop(path, {})
    now = time.time_ns()
    with _locked(path):
        data = _entries(path)
        for key, (saved, _) in loaded.items():
            if key not in reads and int(data.get(key, {}).get("savedAt", -1)) == saved:
                del data[key]  # forgotten here (an append after a partial read)
        for key, s in reads.items():
            if s.saved_at is not None and loaded.get(key, (0, None))[1] == s.needs_full_read:
                continue  # as loaded: what the file holds now is as new or newer
            first = data.get(key, {}).get("firstSavedAt", data.get(key, {}).get("savedAt", now))
            entry = reads_to_json({key: s})[key]
            data[key] = entry | {"savedAt": now, "firstSavedAt": first}
        atomic_write(path, json.dumps(data, ensure_ascii=False).encode("utf-8"))
