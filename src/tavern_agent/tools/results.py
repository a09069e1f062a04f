"""The shared long-result step for MCP, extension and shell output.

Above the snapshot's inline limit the full readable text goes to a read-only
file ``tool-results/<invocation>/round-NNN-call_<hex>.txt``, the raw reply to
an audit ``.raw.json`` beside it, and the model gets the head, the size, the
limit, a plain note that the rest has not been read, the path, and how to read
or search the file with the tools *this* snapshot has, by their model names.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tavern_agent import run_layout
from tavern_agent.core.results import ToolOutcome
from tavern_agent.core.tool_ids import READ_FILE, SEARCH_FILES, SHELL
from tavern_agent.fsutil import AlreadyWritten, write_once
from tavern_agent.tools.context import CallContext, ResultFiles
from tavern_agent.tools.texts import call

PREVIEW_CHARS = 3_000
WRAP_CHARS = 3_000


@dataclass(frozen=True, slots=True)
class DirectoryResultFiles:
    """:class:`ResultFiles` over a plain directory (the workspace root)."""

    root: Path

    def write_once(self, logical_path: str, data: bytes) -> None:
        """Write the spilled result under the root, once."""
        write_once(self.root / logical_path, data)


def wrap_long_lines(text: str, width: int = WRAP_CHARS) -> str:
    """Break lines longer than ``width`` so line-based reads can page through them."""
    if all(len(line) <= width for line in text.split("\n")):
        return text
    out: list[str] = []
    for line in text.split("\n"):
        out.extend(line[i : i + width] for i in range(0, max(len(line), 1), width))
    return "\n".join(out)


@dataclass
class LongResultStep:
    """One per invocation: spills results above the limit, at most once per text."""

    files: ResultFiles | None
    _spilled: dict[str, str] = field(default_factory=dict)  # sha256 of text → path

    def apply(
        self, outcome: ToolOutcome, ctx: CallContext, raw: Any = None, *, limit: int | None = None
    ) -> ToolOutcome:
        """Spill ``outcome`` above the snapshot's inline limit (or a lower ``limit``)."""
        if limit is None or limit > ctx.snapshot.inline_char_limit:
            limit = ctx.snapshot.inline_char_limit
        text = outcome.content
        if len(text) <= limit or self.files is None:
            return outcome
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        readable = wrap_long_lines(text)
        path = self._spilled.get(digest)
        audit_path = None
        if path is None:
            path = run_layout.spilled_text(ctx.invocation_id, ctx.round, ctx.call_id)
            audit_path = run_layout.spilled_audit(ctx.invocation_id, ctx.round, ctx.call_id)
            audit = {"content": text, "structured": outcome.structured, "raw": raw}
            try:
                self.files.write_once(path, readable.encode("utf-8", "surrogatepass"))
                self.files.write_once(
                    audit_path, json.dumps(audit, ensure_ascii=False, default=_audit_form).encode()
                )
            except AlreadyWritten:
                pass  # a resumed call wrote the same files already
            self._spilled[digest] = path
        structured = {
            "externalized": True,
            "path": path,
            "auditPath": audit_path,
            "charCount": len(text),
            "charLimit": limit,
        }
        content = spill_notice(readable, len(text), limit, path, ctx)
        refs = (*outcome.resource_refs, path)
        return replace(outcome, content=content, structured=structured, resource_refs=refs)


def _audit_form(value: Any) -> Any:
    """A raw reply JSON cannot encode as it is: a pydantic model (an MCP
    result) in its wire form, anything else as its ``repr``."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", by_alias=True, exclude_none=True)
    return repr(value)


def spill_notice(readable: str, total_chars: int, limit: int, path: str, ctx: CallContext) -> str:
    """The inline text of a spilled result: a header with its
    size and path, how to read on, and the first part."""
    # The preview never exceeds the inline limit the result went over.
    head = readable[: min(PREVIEW_CHARS, limit)]
    lines = readable.count("\n") + 1
    next_line = head.count("\n") + 1  # the first line not shown in full
    header = (
        f"[Long result: {total_chars:,} characters in {lines:,} lines, over the inline limit of "
        f"{limit:,}. Below are the first {len(head):,} characters; the rest has not been read. "
        f"Full text: {path}]"
    )
    return f"{header}\n{how_to_read(path, next_line, ctx)}\n---\n{head}"


def how_to_read(path: str, next_line: int, ctx: CallContext) -> str:
    """Reading hints naming only tools this snapshot has."""
    snap = ctx.snapshot
    hints: list[str] = []
    read = snap.name_of(READ_FILE)
    if read:
        hints.append(f"read on with {call(read, file_path=path, offset=next_line, limit=200)}")
    search = snap.name_of(SEARCH_FILES)
    if search:
        hints.append(f"search it with {call(search, pattern='<regex>', path=path)}")
    shell = snap.name_of(SHELL)
    if shell:
        hints.append(f"page it with {shell}: sed -n '{next_line},{next_line + 199}p' /{path}")
    if not hints:
        return "No tool here can read files; work from this preview."
    if len(hints) > 1:
        hints[-1] = "or " + hints[-1]
    return "To continue, " + "; ".join(hints) + "."
