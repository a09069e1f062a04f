"""An MCP ``CallToolResult`` as an :class:`ExternalReceipt`.

Text blocks in order; ``structured_content`` kept as structured data and
rendered briefly under "Details" unless the text already says the same;
images, audio and embedded resources saved as files under ``tool-results/``
and returned as resource refs; resource links listed by URI. Long text is left
to the shared long-result step.

A result larger than ``MAX_RESULT_BYTES`` (4 MiB, counting text as UTF-8 and
binary blocks decoded) is cut to that size first, and its text says so.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import mimetypes
from typing import Any

from mcp import types

from tavern_agent import run_layout
from tavern_agent.core.errors import ErrorCode
from tavern_agent.fsutil import AlreadyWritten
from tavern_agent.tools.catalog import ExternalReceipt
from tavern_agent.tools.context import CallContext, ResultFiles

DETAILS_CHARS = 1_500
MAX_RESULT_BYTES = 4 * 1024 * 1024
_EXTENSIONS = {"image/png": ".png", "image/jpeg": ".jpg", "text/plain": ".txt"}


def _extension(mime: str | None, fallback: str = ".bin") -> str:
    if not mime:
        return fallback
    return _EXTENSIONS.get(mime) or mimetypes.guess_extension(mime) or fallback


def _media_note(label: str, mime: str, data: bytes, path: str | None) -> str:
    """How a media block reads in the result text: where it was saved, or that it was not."""
    size = f"{mime}, {len(data):,} bytes"
    return f"[{label} ({size}) not saved]" if path is None else f"[{label} saved: {path} ({size})]"


def _save(
    files: ResultFiles | None, ctx: CallContext, index: int, data: bytes, mime: str | None
) -> str | None:
    if files is None:
        return None
    path = run_layout.reply_file(ctx.invocation_id, ctx.round, ctx.call_id, index, _extension(mime))
    with contextlib.suppress(AlreadyWritten):  # a resumed call saved it already
        files.write_once(path, data)
    return path


def render_details(structured: Any) -> str:
    """A short markdown rendering of structured content for the model."""
    if isinstance(structured, dict):
        lines = [
            f"- {key}: {json.dumps(value, ensure_ascii=False, separators=(',', ':'))}"
            for key, value in structured.items()
        ]
        text = "\n".join(lines)
    else:
        text = json.dumps(structured, ensure_ascii=False, separators=(",", ":"))
    if len(text) > DETAILS_CHARS:
        text = text[:DETAILS_CHARS] + " … (cut; the full data is in the structured result)"
    return f"Details:\n{text}"


def _says_the_same(texts: list[str], structured: Any) -> bool:
    """Whether the text already carries the structured data: its JSON, or the text
    itself wrapped in a one-key object (``{"result": text}``, ``{"content": text}``)."""
    if isinstance(structured, dict) and len(structured) == 1:
        (value,) = structured.values()
        if "\n".join(texts) == value:
            return True
        if not isinstance(value, str) and _says_the_same(texts, value):
            return True
    for text in texts:
        try:
            if json.loads(text) == structured:
                return True
        except ValueError:
            continue
    return False


def _block_bytes(block: Any) -> int:
    if isinstance(block, types.TextContent):
        return len(block.text.encode("utf-8", "surrogatepass"))
    if isinstance(block, types.ImageContent | types.AudioContent):
        return len(block.data) * 3 // 4
    if isinstance(block, types.EmbeddedResource):
        res = block.resource
        if isinstance(res, types.TextResourceContents):
            return len(res.text.encode("utf-8", "surrogatepass"))
        return len(res.blob) * 3 // 4
    return len(block.model_dump_json())


def _cut_text(text: str, limit: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 form fits ``limit`` bytes."""
    return text.encode("utf-8", "surrogatepass")[:limit].decode("utf-8", "ignore")


def _surely_small(result: types.CallToolResult) -> bool:
    """Whether ``result`` is text only and under the cap at 4 bytes a character,
    the common case, told without encoding anything."""
    if result.structured_content:
        return False
    chars = 0
    for block in result.content:
        if type(block) is not types.TextContent:
            return False
        chars += len(block.text)
    return chars * 4 <= MAX_RESULT_BYTES


def cap_result(result: types.CallToolResult) -> tuple[types.CallToolResult, str | None]:
    """``result`` cut to ``MAX_RESULT_BYTES``, and a note saying what was cut (or ``None``)."""
    if _surely_small(result):
        return result, None
    sizes = [_block_bytes(b) for b in result.content]
    structured = result.structured_content
    structured_size = len(json.dumps(structured, ensure_ascii=False)) if structured else 0
    total = sum(sizes) + structured_size
    if total <= MAX_RESULT_BYTES:
        return result, None
    room = MAX_RESULT_BYTES
    kept: list[Any] = []
    dropped = 0
    for block, size in zip(result.content, sizes, strict=True):
        if size <= room:
            kept.append(block)
            room -= size
        elif isinstance(block, types.TextContent) and room > 0:
            kept.append(block.model_copy(update={"text": _cut_text(block.text, room)}))
            room = 0
        else:
            dropped += 1
    if structured_size > room:
        structured, dropped = None, dropped + 1
    note = (
        f"[The MCP server sent {total / 2**20:.1f} MiB; results are capped at 4 MiB, "
        "so the end of this one was cut"
        + (f" ({dropped} part{'s' if dropped != 1 else ''} left out)" if dropped else "")
        + ". Ask the tool for less, e.g. a page or a range.]"
    )
    capped = result.model_copy(update={"content": kept, "structured_content": structured})
    return capped, note


def convert_result(
    result: types.CallToolResult,
    ctx: CallContext,
    files: ResultFiles | None,
    *,
    server: str,
    tool: str,
) -> ExternalReceipt:
    """An MCP tool result as a receipt: text blocks in order, structured content kept,
    media saved under ``tool-results/`` as resource refs, an oversized result cut."""
    texts: list[str] = []
    parts: list[str] = []
    refs: list[str] = []
    result, cap_note = cap_result(result)
    if cap_note is not None:
        parts.append(cap_note)
    for index, block in enumerate(result.content, start=1):
        if isinstance(block, types.TextContent):
            texts.append(block.text)
            parts.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            kind = "image" if isinstance(block, types.ImageContent) else "audio"
            try:
                data = base64.b64decode(block.data, validate=True)
            except (binascii.Error, ValueError):
                parts.append(f"[{kind} ({block.mime_type}) could not be decoded]")
                continue
            path = _save(files, ctx, index, data, block.mime_type)
            refs.extend([path] if path is not None else [])
            parts.append(_media_note(kind, block.mime_type, data, path))
        elif isinstance(block, types.EmbeddedResource):
            res = block.resource
            if isinstance(res, types.TextResourceContents):
                data = res.text.encode("utf-8", "surrogatepass")
                mime = res.mime_type or "text/plain"
            else:
                try:
                    data = base64.b64decode(res.blob, validate=True)
                except (binascii.Error, ValueError):
                    parts.append(f"[resource {res.uri} could not be decoded]")
                    continue
                mime = res.mime_type or "application/octet-stream"
            path = _save(files, ctx, index, data, mime)
            refs.extend([path] if path is not None else [])
            parts.append(_media_note(f"resource {res.uri}", mime, data, path))
        elif isinstance(block, types.ResourceLink):
            label = f" ({block.description})" if block.description else ""
            parts.append(f"[resource link: {block.uri} {block.name}{label}]")
        else:
            parts.append(f"[unsupported {getattr(block, 'type', 'content')} block omitted]")
    structured = result.structured_content
    if structured is not None and not _says_the_same(texts, structured):
        parts.append(render_details(structured))
    content = "\n".join(parts)
    # The reply itself is the raw record: only a spilled result's audit file writes
    # it out (in its wire form), so most calls never serialize it.
    raw = result
    if result.is_error:
        message = content or "no error text"
        return ExternalReceipt.failure(
            ErrorCode.MCP_TOOL_ERROR,
            f"{tool} failed: {message}",
            raw,
            structured=structured,
            resource_refs=tuple(refs),
        )
    return ExternalReceipt(
        content=content or "(the tool returned no content)",
        structured=structured,
        raw=raw,
        resource_refs=tuple(refs),
    )
