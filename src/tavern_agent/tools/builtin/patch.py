"""``workspace.apply_patch``: exact text replacement in one file.

The ten checks run in the documented order. A failure after a partial read
sets the file's ``needs_full_read`` flag: the model saw only part of the file
and must read all of it before the next patch. A file too long for one read
(over 1,200 lines, 80,000 characters or 256 KiB) can never be read in full, so
there the flag is not set and the error says which lines to read instead.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tavern_agent.core.descriptors import object_schema
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.results import FilePatched, ToolFailure, ToolOutcome
from tavern_agent.core.tool_ids import READ_FILE
from tavern_agent.tools.builtin.registry import builtin_tool
from tavern_agent.tools.builtin.workspace_files import fits_one_read, load_file
from tavern_agent.tools.context import CallContext
from tavern_agent.tools.texts import call
from tavern_agent.workspace.read_state import ReadState
from tavern_agent.workspace.store import Workspace, sha256_hex

CONTEXT_LINES = 5  # lines before and after old_string that a hint asks to read


@builtin_tool(
    "workspace.apply_patch",
    description=(
        "Replace exact text (no line numbers) in a file you have read; old_string must be "
        "unique unless replace_all is true."
    ),
    parameters=object_schema(
        {
            "file_path": {"type": "string"},
            "old_string": {"type": "string", "description": "Exact text to replace."},
            "new_string": {"type": "string", "description": "Replacement; empty deletes."},
            "replace_all": {"type": "boolean", "description": "Replace every match."},
        },
        "file_path",
        "old_string",
        "new_string",
    ),
)
async def APPLY_PATCH(args: dict[str, Any], ctx: CallContext) -> ToolOutcome:
    """``workspace.apply_patch``: replaces exact text in a file the
    agent has read whole (or every match with ``replace_all``)."""
    old, new = args["old_string"], args["new_string"]
    if old == "":
        raise ToolFailure(
            ErrorCode.WORKSPACE_PATCH_EMPTY_OLD_STRING,
            "old_string is empty. Quote the exact text to replace.",
        )
    if old == new:
        raise ToolFailure(
            ErrorCode.WORKSPACE_PATCH_NO_CHANGE,
            "old_string equals new_string, so nothing would change. "
            "Put the new text in new_string.",
        )
    ws = ctx.require_workspace()
    path = ws.check(args["file_path"], write=True)
    return await asyncio.to_thread(_patch, ws, path, old, new, bool(args.get("replace_all")), ctx)


def _patch(
    ws: Workspace, path: str, old: str, new: str, replace_all: bool, ctx: CallContext
) -> ToolOutcome:
    reader = ctx.model_name(READ_FILE, "a file read")
    state = ctx.reads.get(path)
    if state is None:
        step = (
            f"Read {path} with {reader} before patching it."
            if ctx.snapshot.name_of(READ_FILE)
            else f"Patching needs a read of {path} first, and this agent cannot read files."
        )
        raise ToolFailure(ErrorCode.WORKSPACE_PATCH_REQUIRES_READ, step)
    with ws.mutation():
        data = load_file(ws, path, ctx)
        # The full-read rule holds only where one read can return the whole file;
        # for a longer file the next step is to read the lines the patch touches.
        whole = fits_one_read(data)
        text = data.decode("utf-8", errors="surrogateescape")
        _check_read(state, path, old, replace_all, text, whole, ctx)
        old_sha = sha256_hex(data)
        if old_sha != state.sha256:
            if not state.full and whole:
                state.needs_full_read = True
            raise ToolFailure(
                ErrorCode.WORKSPACE_PATCH_STALE_FILE,
                f"{path} changed since you read it. Read it again with {reader}, then patch.",
            )
        count = text.count(old)
        if count == 0 or (count > 1 and not replace_all):
            if not state.full and whole:
                state.needs_full_read = True
            if count == 0:
                raise ToolFailure(
                    ErrorCode.WORKSPACE_PATCH_OLD_STRING_NOT_FOUND,
                    f"old_string is not in {path}. Read it again with {reader} and copy the "
                    "text exactly (no line numbers).",
                )
            raise ToolFailure(
                ErrorCode.WORKSPACE_PATCH_OLD_STRING_NOT_UNIQUE,
                f"old_string occurs {count} times in {path}. Add surrounding text to make it "
                "unique, or set replace_all to true.",
                count=count,
            )
        patched = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        out = patched.encode("utf-8", errors="surrogateescape")
        ws.write_atomic(path, out)
    sha = sha256_hex(out)
    shown = out.decode("utf-8", errors="replace")
    # The read stays as wide as it was: after a partial read the model has seen
    # the part it read (now patched), not the rest of the file.
    seen = shown if state.full else state.text.replace(old, new, -1 if replace_all else 1)
    ctx.reads[path] = ReadState(sha, state.full, seen)  # digest known: no need to hash again
    replacements = count if replace_all else 1
    words = len(shown.split())
    return ToolOutcome(
        f"Patched {path} with {replacements} replacement(s); file now has "
        f"{len(shown):,} chars / {words:,} words.",
        {"path": path, "oldSha256": old_sha, "sha256": sha, "replacements": replacements},
        effect=FilePatched(path, old_sha, sha, replacements),
    )


def _check_read(
    state: ReadState,
    path: str,
    old: str,
    replace_all: bool,
    text: str,
    whole: bool,
    ctx: CallContext,
) -> None:
    """Checks 5-7: what a partial read allows (``whole``: one read can return the file)."""
    if state.full:
        return
    reader = ctx.model_name(READ_FILE, "a file read")
    full_read = f"Read all of {path} with {call(reader, file_path=path)}, then patch."

    def need_full(why: str) -> ToolFailure:
        state.needs_full_read = True
        return ToolFailure(ErrorCode.WORKSPACE_PATCH_REQUIRES_FULL_READ, f"{why} {full_read}")

    if state.needs_full_read and whole:
        raise ToolFailure(ErrorCode.WORKSPACE_PATCH_REQUIRES_FULL_READ, full_read)
    if replace_all:
        if whole:
            raise need_full("replace_all needs the whole file, and you read only part of it.")
        raise ToolFailure(
            ErrorCode.WORKSPACE_PATCH_REQUIRES_FULL_READ,
            f"replace_all needs the whole file, and {path} is too long to read at once. "
            "Patch each place on its own, without replace_all.",
        )
    if old in state.text:
        return
    if whole:
        raise need_full("old_string is not in the part of the file you read.")
    at = text.find(old)
    if at < 0:
        raise ToolFailure(
            ErrorCode.WORKSPACE_PATCH_OLD_STRING_NOT_FOUND,
            f"old_string is not in {path}. Read the lines you want to change with {reader} "
            "and copy the text exactly (no line numbers).",
        )
    line = text.count("\n", 0, at) + 1
    offset = max(1, line - CONTEXT_LINES)
    limit = old.count("\n") + 2 * CONTEXT_LINES + 1
    raise ToolFailure(
        ErrorCode.WORKSPACE_PATCH_REQUIRES_FULL_READ,
        f"old_string is not in the part of {path} you read; it starts at line {line:,}. "
        f"Read those lines with {call(reader, file_path=path, offset=offset, limit=limit)}, "
        "then patch.",
        line=line,
    )
