"""What an invocation has read of each file, for compare-and-swap writes and patches."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tavern_agent.fsutil import atomic_write


@dataclass(slots=True)
class ReadState:
    """The file's sha256 at read time, whether the whole file was returned, and that text.

    ``needs_full_read`` is set by a failed patch after a partial read: the next
    patch of this file is refused until the file is read in full.
    """

    sha256: str
    full: bool
    text: str
    needs_full_read: bool = False


def load_reads(path: Path) -> dict[str, ReadState]:
    """Read states saved by :func:`save_reads`; a missing file means none."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return {
        key: ReadState(v["sha256"], v["full"], v["text"], v.get("needsFullRead", False))
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
