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
from functools import partial
from typing import Any

import re2

from tavern_agent.core.descriptors import object_schema
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.results import ToolFailure, ToolOutcome
from tavern_agent.tools.builtin import search_worker
from tavern_agent.tools.builtin.registry import builtin_tool
from tavern_agent.tools.builtin.search_scan import (
    MAX_LINES,
    OPTIONS,
    FileHits,
    Hit,
    Scanned,
    prefilter,
    scan_file,
    scan_run,
)
from tavern_agent.tools.context import CallContext
from tavern_agent.workspace import paths
from tavern_agent.workspace.store import Workspace

MAX_DEPTH = 8
MAX_FILES = 20_000
DEFAULT_EXCLUDED = ("tool-results", "skills")

CHUNK = 100  # files per run handed to one reader (see search_worker)


@builtin_tool(
    "workspace.search_files",
    description=(
        "Search file contents with an RE2 regular expression ((?i): any case). Without "
        "path: all files but tool-results/ and skills/."
    ),
    parameters=object_schema(
        {
            "pattern": {"type": "string", "description": "Regex, e.g. (?i)dragon|wyrm"},
            "path": {"type": "string", "description": "A file or folder to search in."},
        },
        "pattern",
    ),
    repeatable=True,
)
async def SEARCH_FILES(args: dict[str, Any], ctx: CallContext) -> ToolOutcome:
    """``workspace.search_files``: the lines of the workspace's files
    that match an RE2 pattern (``path`` narrows the search)."""
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
