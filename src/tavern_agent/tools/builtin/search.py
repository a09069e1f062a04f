"""``workspace.search_files``: an RE2 regex search over the visible files.

Patterns are RE2 (what Rust's regex follows), compiled once and run on each
file's bytes in one call, so a model's pattern can never take exponential
time. Backreferences and lookaround are not RE2 and come back as
``workspace.grep_pattern_invalid`` with the reason.

Speed: a file that cannot match costs one read and one RE2 scan in C; lines,
line numbers and text are worked out only for files that match. RE2 finds a
case-sensitive literal with ``memchr`` on its first byte. A case-insensitive
literal cannot use that, so when it holds characters that have no case
(digits, ``_``, ``-``, ``.``) the longest such run is searched for first,
case-sensitively, and only files holding it get the case-insensitive scan.
RE2's Python binding holds the GIL while it scans, so a second thread gains
nothing; a large search hands runs of files to a second process instead
(:mod:`tavern_agent.tools.builtin.search_worker`) and merges the results in
file order, so the answer is the same as from one process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Any

import re2

from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.results import ToolFailure, ToolOutcome
from tavern_agent.tools.builtin import search_worker
from tavern_agent.tools.builtin.registry import builtin_tool
from tavern_agent.tools.context import CallContext
from tavern_agent.workspace import paths
from tavern_agent.workspace.store import Workspace

MAX_LINES = 100
LINE_CHARS = 300
MAX_DEPTH = 8
MAX_FILES = 20_000
MAX_FILE_BYTES = 64 * 1024 * 1024
DEFAULT_EXCLUDED = ("tool-results", "skills")

CHUNK = 100  # files per run handed to one reader (see search_worker)
OPTIONS = re2.Options()
OPTIONS.log_errors = False


@dataclass(frozen=True, slots=True)
class Hit:
    path: str
    line: int
    text: str


@builtin_tool(
    "workspace.search_files",
    description=(
        "Search file contents with a regular expression (RE2 syntax; (?i) for any case). "
        "Without path it searches all files except tool-results/ and skills/."
    ),
    parameters={
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Regex, e.g. (?i)dragon|wyrm"},
            "path": {"type": "string", "description": "A file or folder to search in."},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    },
    repeatable=True,
)
async def SEARCH_FILES(args: dict[str, Any], ctx: CallContext) -> ToolOutcome:
    ws = ctx.require_workspace()
    pattern_text: str = args["pattern"]
    try:
        pattern = re2.compile(pattern_text.encode("utf-8", "surrogatepass"), OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ToolFailure(
            ErrorCode.WORKSPACE_GREP_PATTERN_INVALID,
            f"Invalid pattern: {reason}. Use RE2 syntax: no backreferences or lookaround.",
        ) from None
    scope = ws.check(args["path"], allow_root=True) if "path" in args else ""
    return await asyncio.to_thread(search, ws, pattern, scope, "path" in args)


def _sources(ws: Workspace, scope: str, explicit: bool) -> Iterator[tuple[str, list[str]]]:
    """The files of a folder ``scope`` as ``(folder, names)`` runs of at most :data:`CHUNK`.

    At most :data:`MAX_FILES` files in all.
    """

    def skip(path: str) -> bool:
        return not explicit and paths.top(path) in DEFAULT_EXCLUDED

    left = MAX_FILES
    for folder, names in ws.file_runs(scope, MAX_DEPTH, skip):
        for at in range(0, min(len(names), left), CHUNK):
            yield folder, names[at : min(at + CHUNK, left)]
        left -= min(len(names), left)
        if not left:
            return


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


def search(ws: Workspace, pattern: Any, scope: str, explicit: bool) -> ToolOutcome:
    """Search every file of ``scope``; runs of files go to the worker process while it keeps up."""
    kind = ws.kind(scope)
    if kind is None:
        raise ToolFailure(
            ErrorCode.WORKSPACE_PATH_NOT_FOUND,
            f"Nothing at {scope}. Search without path to cover every file.",
        )
    if kind == "file":  # a file named on its own is read whole, whatever its size
        one = scan_file(scope, ws.read_bytes(scope), pattern, prefilter(pattern.pattern))
        return _outcome(scope, 1, [] if one is None else [one])
    parts: list[tuple[str, list[str], Scanned | Future[Scanned]]] = []
    helper = search_worker.helper()
    for folder, names in _sources(ws, scope, explicit):
        job = helper.submit(ws, folder, names, pattern.pattern) if helper else None
        parts.append((folder, names, scan_run(ws, folder, names, pattern) if job is None else job))
        if helper is None and len(parts) > 1:
            helper = search_worker.helper(start=True)  # a search of many files: start it
    searched, found = 0, []
    for folder, names, part in parts:
        if isinstance(part, Future):
            part = search_worker.result(part, partial(scan_run, ws, folder, names, pattern))
        searched += part[0]
        found.extend(part[1])
    return _outcome(scope, searched, found)


def _outcome(scope: str, searched: int, found: list[FileHits]) -> ToolOutcome:
    """The model's result: the first matching lines in file order, and the totals."""
    total = sum(f.total for f in found)
    if total == 0:
        where = scope or "the searchable files"
        return ToolOutcome(
            f"No matches in {where} ({searched} files searched).", _summary(0, 0, [])
        )
    hits = [h for f in found for h in f.hits][:MAX_LINES]
    lines = [f"{h.path}:{h.line}: {h.text}" for h in hits]
    more = (
        f" (showing the first {MAX_LINES}; narrow the pattern or path)" if total > MAX_LINES else ""
    )
    lines.append(f"[{total} matching lines in {len(found)} files{more}]")
    return ToolOutcome("\n".join(lines), _summary(total, len(found), hits))


def _summary(total: int, files: int, hits: list[Hit]) -> dict[str, Any]:
    return {
        "totalLines": total,
        "files": files,
        "hits": [{"path": h.path, "line": h.line} for h in hits],
        "truncated": total > len(hits),
    }
