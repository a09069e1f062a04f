"""``worldinfo.read_activated``: the world info entries active in the run's input."""

from __future__ import annotations

from typing import Any

from tavern_agent.chat.activation import ActivatedEntry
from tavern_agent.core.descriptors import object_schema
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.results import ToolFailure, ToolOutcome
from tavern_agent.core.tool_ids import WORLDINFO_READ_ACTIVATED
from tavern_agent.tools.builtin.chat import (
    CALL_CHARS,
    CHAT_ONLY,
    ITEM_CHARS,
    ITEM_LINES,
    PastTheEnd,
    continuation,
    item_list,
    segment,
)
from tavern_agent.tools.builtin.registry import builtin_tool
from tavern_agent.tools.context import CallContext


@builtin_tool(
    "worldinfo.read_activated",
    description=(
        "World info entries active for this reply. No arguments: an index; "
        "with entries: their text."
    ),
    parameters=object_schema(
        {
            "entries": item_list(
                {
                    "ref": {"type": "string", "description": "From the index."},
                    "offset": {"type": "integer", "minimum": 1},
                    "limit": {"type": "integer", "minimum": 1},
                },
                "ref",
            )
        }
    ),
    scenes=CHAT_ONLY,
    repeatable=True,
)
async def READ_ACTIVATED(args: dict[str, Any], ctx: CallContext) -> ToolOutcome:
    """``worldinfo.read_activated``: the index of the run's active
    world info entries, or the text of the ones asked for."""
    run = ctx.chat
    activation = None if run is None else run.input.activation
    if activation is None:
        raise ToolFailure(
            ErrorCode.WORLDINFO_ACTIVATION_UNAVAILABLE,
            "This run's input has no world info activation; continue without world info.",
        )
    if "entries" not in args:
        return _index(activation, ctx)
    return _read(activation, args["entries"], ctx)


def _index(activation: tuple[ActivatedEntry, ...], ctx: CallContext) -> ToolOutcome:
    if not activation:
        return ToolOutcome("No world info entries are active for this reply.", {"entries": []})
    name = ctx.model_name(WORLDINFO_READ_ACTIVATED, "worldinfo_read_activated")
    lines = [f"{len(activation)} active entries (ref | label | world | chars | position):"]
    for a in activation:
        flag = " | constant" if a.constant else ""
        lines.append(f"{a.ref} | {a.label} | {a.world} | {len(a.content)} | {a.position}{flag}")
    lines.append(f'Read text with {name} entries=[{{"ref":"…"}}].')
    records = [
        {
            "ref": a.ref,
            "label": a.label,
            "world": a.world,
            "chars": len(a.content),
            "position": a.position,
            "constant": a.constant,
        }
        for a in activation
    ]
    return ToolOutcome("\n".join(lines), {"entries": records})


def _read(
    activation: tuple[ActivatedEntry, ...], items: list[dict[str, Any]], ctx: CallContext
) -> ToolOutcome:
    by_ref = {a.ref: a for a in activation}
    for item in items:
        if item["ref"] not in by_ref:
            name = ctx.model_name(WORLDINFO_READ_ACTIVATED, "worldinfo_read_activated")
            raise ToolFailure(
                ErrorCode.WORLDINFO_ENTRY_NOT_FOUND,
                f"No active entry has ref {item['ref']!r}. Call {name} without arguments "
                "for the refs.",
            )
    cap = min(ITEM_CHARS, CALL_CHARS // len(items))
    parts: list[str] = []
    more: list[dict[str, Any]] = []
    for item in items:
        entry = by_ref[item["ref"]]
        offset = item.get("offset", 1)
        try:
            seg = segment(entry.content, offset, item.get("limit"), cap)
        except PastTheEnd as exc:
            raise ToolFailure(
                ErrorCode.WORLDINFO_INVALID_ENTRY_RANGE, exc.describe(f"Entry {entry.ref}")
            ) from None
        head = f"{entry.ref} ({entry.label}, {entry.world}): lines {seg.start}-{seg.end} of "
        parts.append(head + f"{seg.total}\n{seg.body}")
        wanted_end = seg.start + min(item.get("limit") or seg.total, ITEM_LINES) - 1
        if seg.end < min(wanted_end, seg.total):
            more.append({"ref": entry.ref, "offset": seg.end + 1})
    if more:
        parts.append(continuation(more, "entries"))
    return ToolOutcome("\n".join(parts), {"more": more})
