"""What an invocation has read of each file, for compare-and-swap writes and patches."""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tavern_agent.fsutil import atomic_write

_HASHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="read-sha")


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
        return self.digest if isinstance(self.digest, str) else self.digest.result()

    @classmethod
    def of(cls, data: bytes, full: bool, text: str, *, background: bool = False) -> ReadState:
        """The read state of ``data``; ``background`` hashes it off the caller's thread."""
        digest: str | Future[str] = _HASHER.submit(_sha256, data) if background else _sha256(data)
        return cls(digest, full, text)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load_reads(path: Path) -> dict[str, ReadState]:
    """Read states saved by :func:`save_reads`; a missing file means none."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return {
        key: ReadState(str(v["sha256"]), v["full"], v["text"], v.get("needsFullRead", False))
        for key, v in data.items()
    }


def save_reads(path: Path, reads: dict[str, ReadState]) -> None:
    data = {
        key: {
            "sha256": s.sha256,
            "full": s.full,
            "text": s.text,
            "needsFullRead": s.needs_full_read,
        }
        for key, s in reads.items()
    }
    atomic_write(path, json.dumps(data, ensure_ascii=False).encode("utf-8"))
