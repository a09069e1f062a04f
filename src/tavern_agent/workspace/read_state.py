"""What an invocation has read of each file, for compare-and-swap writes and patches."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
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


def load_reads(path: Path) -> dict[str, ReadState]:
    """Read states saved by :func:`save_reads`; a missing file means none."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return reads_from_json(data)


def save_reads(path: Path, reads: Mapping[str, ReadState]) -> None:
    """Save read states atomically, for :func:`load_reads` in a later process."""
    atomic_write(path, json.dumps(reads_to_json(reads), ensure_ascii=False).encode("utf-8"))
