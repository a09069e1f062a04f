"""``workspace.list_files``, ``workspace.read_file`` and ``workspace.write_file``."""

from __future__ import annotations

import asyncio
import os
import posixpath
from dataclasses import dataclass
from typing import Any

from tavern_agent.core import tool_ids
from tavern_agent.core.descriptors import object_schema
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.results import FileWritten, ToolFailure, ToolOutcome
from tavern_agent.tools.builtin.registry import builtin_tool
from tavern_agent.tools.context import CallContext
from tavern_agent.tools.texts import find_file_hint, past_the_end
from tavern_agent.workspace.read_state import ReadState, settled
from tavern_agent.workspace.store import Workspace, sha256_hex

FULL_READ_BYTES = 256 * 1024
HEAD_BYTES = 1024 * 1024  # a larger file's first page is read from this much of it
MAX_READ_LINES = 1200
MAX_READ_CHARS = 80_000
MAX_LINE_CHARS = 2000
MAX_LIST_DEPTH = 4
MAX_LIST_ENTRIES = 200


def load_file(ws: Workspace, path: str, ctx: CallContext) -> bytes:
    """The file's bytes, with missing files and folders as model-facing errors."""
    try:
        return ws.read_bytes(path)
    except (FileNotFoundError, NotADirectoryError):
        hint = find_file_hint(ctx.snapshot, posixpath.dirname(path))
        raise ToolFailure(
            ErrorCode.WORKSPACE_FILE_NOT_FOUND,
            f"No file at {path}. {hint or 'Check the name and try again.'}",
        ) from None
    except IsADirectoryError:
        raise ToolFailure(
            ErrorCode.WORKSPACE_PATH_IS_DIRECTORY, f"{path} is a folder; name a file in it."
        ) from None


def decode(data: bytes) -> tuple[str, bool]:
    """Text of a file and whether bytes had to be replaced (not UTF-8)."""
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="replace"), True


# ---------------------------------------------------------------- list


@builtin_tool(
    "workspace.list_files",
    description="List files and folders in the workspace.",
    parameters=object_schema(
        {
            "path": {"type": "string", "description": "Folder or file; default the root."},
            "depth": {"type": "integer", "minimum": 1, "description": "Levels, default 2, max 4."},
        }
    ),
    repeatable=True,
)
async def LIST_FILES(args: dict[str, Any], ctx: CallContext) -> ToolOutcome:
    """``workspace.list_files``: the files and folders under a path, to ``depth`` levels."""
    ws = ctx.require_workspace()
    depth = args.get("depth", 2)
    if depth > MAX_LIST_DEPTH:
        raise ToolFailure(
            ErrorCode.WORKSPACE_LIST_DEPTH_TOO_LARGE,
            f"depth {depth} is above the maximum of {MAX_LIST_DEPTH}. Use depth {MAX_LIST_DEPTH} "
            "or less, and list a subfolder to go deeper.",
        )
    path = ws.check(args.get("path", ""), allow_root=True)
    return await asyncio.to_thread(_list, ws, path, depth, ctx)


def _list(ws: Workspace, path: str, depth: int, ctx: CallContext) -> ToolOutcome:
    kind = ws.kind(path)
    if kind is None:
        raise ToolFailure(
            ErrorCode.WORKSPACE_PATH_NOT_FOUND,
            f"Nothing at {path}. {find_file_hint(ctx.snapshot, posixpath.dirname(path))}".strip(),
        )
    if kind == "file":
        entries = [{"path": path, "kind": "file"}]
    else:
        entries = []
        for entry in ws.walk(path, depth):
            entries.append({"path": entry.path, "kind": entry.kind})
            if len(entries) > MAX_LIST_ENTRIES:
                break
    truncated = len(entries) > MAX_LIST_ENTRIES
    entries = entries[:MAX_LIST_ENTRIES]
    lines = [e["path"] + ("/" if e["kind"] == "dir" else "") for e in entries]
    if truncated:
        lines.append(f"[first {MAX_LIST_ENTRIES} entries; list a subfolder to see more]")
    content = "\n".join(lines) if lines else f"{path or 'The workspace'} is empty."
    return ToolOutcome(content, {"path": path, "entries": entries, "truncated": truncated})


# ---------------------------------------------------------------- read


@dataclass(frozen=True, slots=True)
class Page:
    """The lines of a file one read shows: which lines of how many, and what was cut or replaced."""

    start: int
    end: int  # last line shown, 0 when none
    total: int
    lines: list[str]
    cut: int  # lines shortened to MAX_LINE_CHARS
    replaced: bool  # undecodable bytes shown as U+FFFD


def count_lines(data: bytes) -> int:
    """The number of lines in ``data`` (a last line without a newline counts)."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def fits_one_read(data: bytes) -> bool:
    """Whether a read without offset or limit returns all of ``data`` uncut."""
    if len(data) > FULL_READ_BYTES or count_lines(data) > MAX_READ_LINES:
        return False
    page = page_lines(data, 1, None)
    return page.end == page.total and page.cut == 0


def page_lines(data: bytes, offset: int, limit: int | None) -> Page:
    """Lines ``offset``… of ``data``, within the line, char and line-length limits.

    Works on bytes and decodes only the lines it returns, so a preview of a
    very large file costs little more than reading it.
    """
    total = count_lines(data)
    pos = 0
    for _ in range(min(offset, total + 1) - 1):
        pos = data.find(b"\n", pos) + 1
    wanted = min(limit or MAX_READ_LINES, MAX_READ_LINES)
    shown: list[str] = []
    chars = cut = 0
    replaced = False
    number = offset
    while len(shown) < wanted and number <= total:
        end = data.find(b"\n", pos)
        end = len(data) if end < 0 else end
        raw = data[pos : min(end, pos + MAX_LINE_CHARS * 4)]
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            line, replaced = raw.decode("utf-8", errors="replace"), True
        if len(line) > MAX_LINE_CHARS or end - pos > MAX_LINE_CHARS * 4:
            line, cut = line[:MAX_LINE_CHARS], cut + 1
        if shown and chars + len(line) + 1 > MAX_READ_CHARS:
            break
        shown.append(line)
        chars += len(line) + 1
        pos, number = end + 1, number + 1
    return Page(offset, offset + len(shown) - 1 if shown else 0, total, shown, cut, replaced)


def head_page(head: bytes, offset: int, limit: int | None) -> Page | None:
    """The page of a file starting with ``head`` when ``head`` alone decides it, else ``None``.

    Only lines that end inside ``head`` count, and the page must stop at a
    limit before the last of them: then reading more of the file would not
    change it. ``Page.total`` is the number of lines in ``head``, a lower bound.
    """
    complete = head[: head.rfind(b"\n") + 1]
    page = page_lines(complete, offset, limit)
    return page if page.lines and page.end < page.total else None


@builtin_tool(
    "workspace.read_file",
    description=(
        "Read a text file with numbered lines. Large files come back in pages; "
        "continue with offset and limit."
    ),
    parameters=object_schema(
        {
            "file_path": {"type": "string", "description": "e.g. output/main.md"},
            "offset": {"type": "integer", "minimum": 1, "description": "First line, 1-based."},
            "limit": {"type": "integer", "minimum": 1, "description": "Number of lines."},
        },
        "file_path",
    ),
    repeatable=True,
)
async def READ_FILE(args: dict[str, Any], ctx: CallContext) -> ToolOutcome:
    """``workspace.read_file``: a page of numbered lines,
    remembering what was read for later patches."""
    ws = ctx.require_workspace()
    path = ws.check(args["file_path"])
    offset, limit = args.get("offset"), args.get("limit")
    head = await asyncio.to_thread(_read_head, ws, path, offset or 1, limit, ctx)
    if head is not None:
        return head
    data = await asyncio.to_thread(load_file, ws, path, ctx)
    return read_outcome(path, data, offset, limit, ctx)


def _read_head(
    ws: Workspace, path: str, offset: int, limit: int | None, ctx: CallContext
) -> ToolOutcome | None:
    """A page of a large file read from its first :data:`HEAD_BYTES` only, when that suffices.

    A 50 MB file is not read whole and line-counted to show its first lines;
    its read state is hashed in the background (:meth:`ReadState.of_open_file`).
    ``None`` sends the call to the whole-file read: a small file, a page past
    the head, or a file changed in the last second.
    """
    try:
        with ws.open_file(path) as fd:
            st = os.fstat(fd)
            if st.st_size <= HEAD_BYTES or not settled(st):
                return None
            page = head_page(os.pread(fd, HEAD_BYTES, 0), offset, limit)
            if page is None:
                return None
            text = "\n".join(page.lines)
            state = ReadState.of_open_file(fd, st, text)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None  # the whole-file read reports it
    _remember(ctx, path, state)
    return _page_outcome(path, page, st.st_size, None, full=False, counted=False)


def _remember(ctx: CallContext, path: str, state: ReadState) -> None:
    # A failed patch after a partial read asks for a full read; only that clears it.
    before = ctx.reads.get(path)
    state.needs_full_read = before is not None and before.needs_full_read and not state.full
    ctx.reads[path] = state


def read_outcome(
    path: str, data: bytes, offset: int | None, limit: int | None, ctx: CallContext
) -> ToolOutcome:
    """The read result for a file's bytes: the page asked for, noting the read state of ``path``."""
    page = page_lines(data, offset or 1, limit)
    small = len(data) <= FULL_READ_BYTES
    if page.total == 0:
        ctx.reads[path] = ReadState.of(data, True, "")
        return ToolOutcome(f"{path} is empty.", {"path": path, "lines": 0, "full": True})
    if page.start > page.total:
        raise ToolFailure(
            ErrorCode.WORKSPACE_INVALID_LINE_RANGE,
            past_the_end(path, page.start, page.total),
        )
    full = page.start == 1 and page.end == page.total and page.cut == 0 and small
    _remember(ctx, path, ReadState.of(data, full, "\n".join(page.lines), background=not small))
    chars = len(data.decode("utf-8", errors="replace")) if small else None
    return _page_outcome(path, page, len(data), chars, full=full, counted=True)


def _page_outcome(
    path: str, page: Page, size: int, chars: int | None, *, full: bool, counted: bool
) -> ToolOutcome:
    """The numbered page; ``chars`` for a small file, else its size in bytes is shown.

    ``counted``: ``page.total`` is the file's line count (a page of the whole
    file); otherwise only the file's start was read and the text says so.
    """
    amount = f"{chars:,} chars" if chars is not None else f"{size:,} bytes"
    if counted:
        header = f"{path}: lines {page.start}-{page.end} of {page.total} ({amount})"
    else:
        header = f"{path}: lines {page.start}-{page.end} ({amount}; only its start was read)"
    notes = []
    if page.replaced:
        notes.append("[not valid UTF-8: undecodable bytes shown as \ufffd]")
    if page.cut:
        notes.append(f"[{page.cut} line(s) longer than {MAX_LINE_CHARS} chars were cut]")
    if page.end < page.total:
        more = f"{page.total - page.end} more lines" if counted else "more lines follow"
        notes.append(
            f"[{more}; continue with offset={page.end + 1}, "
            f"limit={min(MAX_READ_LINES, page.total - page.end) if counted else MAX_READ_LINES}]"
        )
    width = len(str(page.end))
    numbered = "\n".join(f"{n:>{width}}\t{line}" for n, line in enumerate(page.lines, page.start))
    content = "\n".join([header, numbered, *notes])
    structured = {
        "path": path,
        "bytes": size,
        "startLine": page.start,
        "endLine": page.end,
        "lines": page.total if counted else None,
        "full": full,
    }
    return ToolOutcome(content, structured)


# ---------------------------------------------------------------- write


@builtin_tool(
    "workspace.write_file",
    description=(
        "Create or replace a file, or append to it. Read an existing file before replacing it."
    ),
    parameters=object_schema(
        {
            "file_path": {"type": "string", "description": "e.g. output/main.md"},
            "content": {"type": "string", "description": "The text, written as is."},
            "mode": {"type": "string", "description": "replace (default) or append."},
        },
        "file_path",
        "content",
    ),
)
async def WRITE_FILE(args: dict[str, Any], ctx: CallContext) -> ToolOutcome:
    """``workspace.write_file``: creates, replaces or appends
    to a file (replacing a file needs a read first)."""
    ws = ctx.require_workspace()
    mode = args.get("mode", "replace")
    if mode not in ("replace", "append"):
        raise ToolFailure(
            ErrorCode.WORKSPACE_WRITE_MODE_INVALID,
            f"mode {mode!r} is not a write mode. Use mode replace or append.",
        )
    path = ws.check(args["file_path"], write=True)
    return await asyncio.to_thread(_write, ws, path, args["content"], mode, ctx)


def _current(ws: Workspace, path: str) -> bytes | None:
    try:
        return ws.read_bytes(path)
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise ToolFailure(
            ErrorCode.WORKSPACE_PATH_IS_DIRECTORY, f"{path} is a folder; name a file in it."
        ) from None


def _write(ws: Workspace, path: str, content: str, mode: str, ctx: CallContext) -> ToolOutcome:
    data = content.encode("utf-8", "surrogatepass")
    reader = ctx.snapshot.name_of(tool_ids.READ_FILE)
    with ws.mutation():
        old = _current(ws, path)
        state = ctx.reads.get(path)
        old_sha = None if old is None else sha256_hex(old)
        if mode == "append":
            ws.append(path, data)
            new = (old or b"") + data
            if old is None or (state is not None and state.full and state.sha256 == old_sha):
                ctx.reads[path] = ReadState.of(new, True, decode(new)[0])
            else:
                ctx.reads.pop(path, None)
        else:
            if old is not None and state is None:
                step = (
                    f"Read it with {reader} before replacing it, or use mode=append."
                    if reader
                    else "Add to it with mode=append instead."
                )
                raise ToolFailure(ErrorCode.WORKSPACE_WRITE_REQUIRES_READ, f"{path} exists. {step}")
            if old is not None and state is not None and state.sha256 != old_sha:
                step = (
                    f"Read it again with {reader}, then write."
                    if reader
                    else "Add to it with mode=append instead."
                )
                raise ToolFailure(
                    ErrorCode.WORKSPACE_WRITE_STALE_FILE,
                    f"{path} changed since you read it. {step}",
                )
            ws.write_atomic(path, data)
            new = data
            ctx.reads[path] = ReadState.of(new, True, content)
    sha = sha256_hex(new)
    verb = "Appended to" if mode == "append" else ("Created" if old is None else "Replaced")
    text = decode(new)[0]
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    structured = {"path": path, "sha256": sha, "oldSha256": old_sha, "mode": mode, "lines": lines}
    return ToolOutcome(
        f"{verb} {path}: now {len(text):,} chars, {lines} lines.",
        structured,
        effect=FileWritten(path, sha),
    )
