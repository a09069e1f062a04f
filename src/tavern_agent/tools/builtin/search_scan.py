"""The scan of ``workspace.search_files``: one file, or one run of files, against an RE2 pattern.

Shared by the search (:mod:`tavern_agent.tools.builtin.search`) and its second
process (:mod:`tavern_agent.tools.builtin.search_worker`), which scan the same
way so that the merged answer is the one a single process would give.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import re2

from tavern_agent.workspace.store import Workspace

MAX_LINES = 100
LINE_CHARS = 300
MAX_FILE_BYTES = 64 * 1024 * 1024
OPTIONS = re2.Options()
OPTIONS.log_errors = False


@dataclass(frozen=True, slots=True)
class Hit:
    """One matching line of a file search: the file, the line number and the line's text."""

    path: str
    line: int
    text: str


_META = frozenset(b"\\.^$|?*+()[]{}")
_FOLD = b"(?i)"
# Bytes that have no other case under RE2's case folding: ASCII that is not a letter.
_CASELESS = re2.compile(rb"[\x21-\x40\x5b-\x60\x7b-\x7e][\x20-\x40\x5b-\x60\x7b-\x7e]*")


def prefilter(pattern: bytes) -> Any | None:
    """A case-sensitive RE2 every file matching ``pattern`` also matches, when cheaper.

    Only for a case-insensitive literal (``(?i)`` then plain text): its longest
    run of caseless characters must appear as written. ``None`` otherwise.
    """
    body = pattern.removeprefix(_FOLD)
    if body is pattern or not body or _META.intersection(body):
        return None
    runs = [m.group() for m in _CASELESS.finditer(body)]
    if not runs:
        return None
    return re2.compile(max(runs, key=len), OPTIONS)


def _cut(line: bytes, start: int) -> str:
    """The line around the first match, about LINE_CHARS characters."""
    if len(line) > LINE_CHARS * 4:
        lo = max(0, start - LINE_CHARS // 2)
        line = line[lo : lo + LINE_CHARS * 4]
        start -= lo
    text = line.decode("utf-8", errors="replace")
    if len(text) <= LINE_CHARS:
        return text
    at = len(line[:start].decode("utf-8", errors="replace"))
    lo = max(0, min(at - LINE_CHARS // 3, len(text) - LINE_CHARS))
    return ("…" if lo else "") + text[lo : lo + LINE_CHARS] + "…"


@dataclass(frozen=True, slots=True)
class FileHits:
    """One matching file: how many of its lines match, and the first :data:`MAX_LINES`."""

    path: str
    total: int
    hits: list[Hit]


def scan_file(path: str, data: bytes, pattern: Any, cheap: Any | None) -> FileHits | None:
    """The file's matching lines (one hit per line), ``None`` when nothing matches."""
    if cheap is not None and cheap.search(data) is None:
        return None
    first = pattern.search(data)
    if first is None or b"\0" in data[:8192]:
        return None
    hits: list[Hit] = []
    total, line_no, line_start, match = 0, 1, 0, first
    while match is not None:  # one hit per line: resume after the matched line
        pos = match.start()
        line_no += data.count(b"\n", line_start, pos)
        line_start = data.rfind(b"\n", 0, pos) + 1
        end = data.find(b"\n", pos)
        total += 1
        if len(hits) < MAX_LINES:
            line = data[line_start : end if end >= 0 else len(data)]
            hits.append(Hit(path, line_no, _cut(line, pos - line_start)))
        if end < 0:
            break
        match = pattern.search(data, end + 1)
    return FileHits(path, total, hits)


Scanned = tuple[int, list[FileHits]]  # files searched, matching files in order


def scan_run(ws: Workspace, folder: str, names: list[str], pattern: Any) -> Scanned:
    """Read and search one run of files."""
    cheap = prefilter(pattern.pattern)
    searched, found = 0, []
    for path, data in ws.read_files(folder, names, MAX_FILE_BYTES):
        searched += 1
        if (hits := scan_file(path, data, pattern, cheap)) is not None:
            found.append(hits)
    return searched, found
