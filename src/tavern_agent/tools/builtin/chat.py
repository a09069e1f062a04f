"""``chat.search`` and ``chat.read_messages``: the run's chat, floors ``0 … N-1``."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from tavern_agent.chat.formats import ChatFile, ChatFormatError, ChatMessage
from tavern_agent.chat.mount import floor_path
from tavern_agent.chat.run_input import ChatRun
from tavern_agent.chat.search import snippet, tokenize
from tavern_agent.core.descriptors import Scene, object_schema
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.results import ToolFailure, ToolOutcome
from tavern_agent.core.tool_ids import CHAT_READ_MESSAGES
from tavern_agent.tools.builtin.registry import builtin_tool
from tavern_agent.tools.context import CallContext
from tavern_agent.tools.texts import past_the_end

ITEM_CHARS = 8_000
CALL_CHARS = 20_000
ITEM_LINES = 1_200
MAX_ITEMS = 20
CHAT_ONLY = frozenset({Scene.CHAT})
MAX_SCAN = 100_000
ROLES = ("user", "assistant", "tool", "system")
SPLIT_ROLES = frozenset({"tool", "assistant", "system"})  # roles that tool floors blur
SYSTEM_ROLE_NOTE = (
    ' role "system" finds narrator messages only; for messages hidden from the prompt '
    "(SillyTavern's system messages) search with hidden: true instead."
)


def item_list(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    """The schema of a list of 1 to :data:`MAX_ITEMS` objects to read, each of ``properties``."""
    return {
        "type": "array",
        "minItems": 1,
        "maxItems": MAX_ITEMS,
        "items": object_schema(properties, *required),
    }


def floor_role(message: ChatMessage) -> str:
    """The speaker of a floor: ``tool`` for a floor recording tool calls, else its role."""
    return "tool" if message.extra.get("tool_invocations") else message.role


def require_chat(ctx: CallContext) -> ChatRun:
    """The run's chat; raises ``chat.unavailable`` for a run without one."""
    if ctx.chat is None:
        raise ToolFailure(
            ErrorCode.CHAT_UNAVAILABLE, "This run has no chat to read; go on without it."
        )
    return ctx.chat


def load_chat(run: ChatRun) -> ChatFile:
    """The chat as it is now; raises ``chat.not_found`` if it was moved, deleted or damaged."""
    try:
        return run.chat()
    except (FileNotFoundError, ChatFormatError):
        raise ToolFailure(
            ErrorCode.CHAT_NOT_FOUND,
            "The chat can no longer be read (it was moved, deleted or damaged); "
            "continue without it.",
        ) from None


def floors_text(count: int) -> str:
    """``floors 0-N`` for a chat of ``count`` messages (``no floors`` when empty)."""
    return f"floors 0-{count - 1}" if count else "no floors"


def valid_floors(count: int) -> str:
    """What a repeated floor mistake is told is valid (the run policy's stronger hint)."""
    return f"Only floors 0-{count - 1} exist." if count else "The chat is empty."


# ---------------------------------------------------------------- paging


class PastTheEnd(ValueError):
    """An offset past the last line; :meth:`describe` is the model's text."""

    def __init__(self, offset: int, total: int) -> None:
        super().__init__(f"offset {offset} is past the end ({total} lines)")
        self.offset = offset
        self.total = total

    def describe(self, what: str) -> str:
        """The model's text for an offset past the end of ``what``."""
        return past_the_end(what, self.offset, self.total)


@dataclass(frozen=True, slots=True)
class Segment:
    """Lines ``start…end`` (1-based) of a text with ``total`` lines."""

    start: int
    end: int
    total: int
    body: str  # numbered lines
    chars: int
    cut: bool  # a line longer than the cap was shortened


def segment(text: str, offset: int, limit: int | None, cap: int) -> Segment:
    """Numbered lines from ``offset``, at most ``limit`` lines and ``cap`` chars of text."""
    lines = text.split("\n")
    total = len(lines)
    if offset > total:
        raise PastTheEnd(offset, total)
    wanted = min(limit or ITEM_LINES, ITEM_LINES)
    shown: list[str] = []
    chars, cut = 0, False
    for number in range(offset, min(offset + wanted, total + 1)):
        line = lines[number - 1]
        if chars + len(line) > cap:
            if shown:
                break
            line, cut = line[: max(cap, 0)], True
        shown.append(f"{number}\t{line}")
        chars += len(line) + 1
    end = offset + len(shown) - 1
    return Segment(offset, end, total, "\n".join(shown), chars, cut)


def continuation(items: list[dict[str, Any]], key: str) -> str:
    """The note telling the model how to get the items it did
    not see (a ``key`` argument value to call again with)."""
    text = json.dumps(items, ensure_ascii=False, separators=(",", ":"))
    return f"[more: continue with {key}={text}]"


# ---------------------------------------------------------------- search


@builtin_tool(
    "chat.search",
    description=(
        "Search this chat's messages (floors) by relevance; any language. "
        "Returns floors with snippets to read in full."
    ),
    parameters=object_schema(
        {
            "query": {"type": "string"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "Default 20."},
            "role": {
                "type": "string",
                "enum": list(ROLES),
                "description": "Only floors by this speaker.",
            },
            "hidden": {"type": "boolean", "description": "Only hidden/visible floors."},
            "start_floor": {"type": "integer", "minimum": 0},
            "end_floor": {"type": "integer", "minimum": 0, "description": "Inclusive."},
            "scan_limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_SCAN,
                "description": "Search only the newest N floors.",
            },
        },
        "query",
    ),
    scenes=CHAT_ONLY,
    repeatable=True,
)
async def SEARCH(args: dict[str, Any], ctx: CallContext) -> ToolOutcome:
    """``chat.search``: ranked floors with snippets, searched on a worker thread."""
    run = require_chat(ctx)
    return await asyncio.to_thread(_search, run, args, ctx)


def _search(run: ChatRun, args: dict[str, Any], ctx: CallContext) -> ToolOutcome:
    count = run.floor_count
    start = args.get("start_floor", 0)
    end = args.get("end_floor", count - 1)
    if count == 0 or start >= count or start > end:
        raise ToolFailure(
            ErrorCode.CHAT_INVALID_RANGE,
            f"start_floor {start} / end_floor {end} select nothing; this chat has "
            f"{floors_text(count)}."
            + (" Search within those floors." if count else " Go on without searching it."),
            valid=valid_floors(count),
        )
    end = min(end, count - 1)
    if "scan_limit" in args:
        start = max(start, end - args["scan_limit"] + 1)
    query: str = args["query"]
    if not tokenize(query):
        raise ToolFailure(
            ErrorCode.TOOL_INVALID_ARGUMENTS, "query has no words to search for; give some words."
        )
    chat = load_chat(run)
    role: str | None = args.get("role")
    limit: int = args.get("limit", 20)
    searcher = run.searcher()  # the index, or a scan of the chat while it is being built
    hits = searcher.search(
        query,
        # Tool floors are told apart here, not by the index: take every match, then filter.
        limit=count if role in SPLIT_ROLES else limit,
        start=start,
        end=end + 1,
        role=None if role == "tool" else role,
        hidden=args.get("hidden"),
    )
    if role in SPLIT_ROLES:
        hits = [h for h in hits if floor_role(chat.messages[h.floor]) == role][:limit]
    scope = f"floors {start}-{end}"
    note = SYSTEM_ROLE_NOTE if role == "system" else ""
    if not hits:
        missing = f"\n{chat.missing_floors()}" if chat.skipped else ""
        return ToolOutcome(
            f'No floors match "{query}" in {scope}. Try other words or a wider range.{note}'
            + missing,
            {"query": query, "hits": []},
        )
    reader = ctx.model_name(CHAT_READ_MESSAGES, "chat_read_messages")
    lines = [f'{len(hits)} floor(s) match "{query}" ({scope}, best first):']
    records = []
    terms = tokenize(query)
    for hit in hits:
        message = chat.messages[hit.floor]
        path = floor_path(hit.floor)
        hidden = ", hidden" if message.hidden else ""
        text = snippet(message.mes, [hit.term, *terms])
        speaker = floor_role(message)
        lines.append(f"floor {hit.floor} ({speaker}{hidden}, {message.name}) {path}")
        lines.append(f"  {text}")
        records.append(
            {
                "floor": hit.floor,
                "role": speaker,
                "name": message.name,
                "hidden": message.hidden,
                "score": round(hit.score, 4),
                "path": path,
                "ref": f"chat:current#{hit.floor}",
            }
        )
    lines.append(f"Read floors with {reader}.{note}")
    if chat.skipped:
        lines.append(chat.missing_floors())
    return ToolOutcome("\n".join(lines), {"query": query, "hits": records})


# ---------------------------------------------------------------- read


@builtin_tool(
    "chat.read_messages",
    description="Read chat messages by floor (0-based); long ones in line pages.",
    parameters=object_schema(
        {
            "floors": item_list(
                {
                    "floor": {"type": "integer", "minimum": 0},
                    "offset": {"type": "integer", "minimum": 1, "description": "First line."},
                    "limit": {"type": "integer", "minimum": 1, "description": "Lines."},
                },
                "floor",
            )
        },
        "floors",
    ),
    scenes=CHAT_ONLY,
    repeatable=True,
)
async def READ_MESSAGES(args: dict[str, Any], ctx: CallContext) -> ToolOutcome:
    """``chat.read_messages``: the asked floors' text, long ones in line pages."""
    run = require_chat(ctx)
    return await asyncio.to_thread(_read, run, args["floors"], ctx)


def _read(run: ChatRun, items: list[dict[str, Any]], ctx: CallContext) -> ToolOutcome:
    count = run.floor_count
    for item in items:
        if item["floor"] >= count:
            raise ToolFailure(
                ErrorCode.CHAT_FLOOR_NOT_FOUND,
                f"Floor {item['floor']} is not in this chat ({floors_text(count)}). "
                + (f"Use a floor from 0 to {count - 1}." if count else "Go on without it."),
                valid=valid_floors(count),
            )
    chat = load_chat(run)
    if len(chat.messages) < count:
        raise ToolFailure(
            ErrorCode.CHAT_NOT_FOUND,
            "The chat lost floors since this run started; continue without it.",
        )
    parts: list[str] = []
    more: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    budget = CALL_CHARS
    for item in items:
        floor, offset = item["floor"], item.get("offset", 1)
        if budget <= 0:
            more.append({"floor": floor, "offset": offset})
            continue
        message = chat.messages[floor]
        try:
            seg = segment(message.mes, offset, item.get("limit"), min(ITEM_CHARS, budget))
        except PastTheEnd as exc:
            raise ToolFailure(
                ErrorCode.CHAT_INVALID_RANGE, exc.describe(f"Floor {floor}")
            ) from None
        budget -= seg.chars
        hidden = ", hidden" if message.hidden else ""
        head = f"floor {floor} ({message.role}{hidden}, {message.name}): "
        parts.append(head + f"lines {seg.start}-{seg.end} of {seg.total}\n{seg.body}")
        if seg.cut:
            parts.append(f"[line {seg.start} was cut at {ITEM_CHARS} chars]")
        wanted_end = seg.start + min(item.get("limit") or seg.total, ITEM_LINES) - 1
        if seg.end < min(wanted_end, seg.total):
            more.append({"floor": floor, "offset": seg.end + 1})
        records.append({"floor": floor, "startLine": seg.start, "endLine": seg.end})
    if more:
        parts.append(continuation(more, "floors"))
    if chat.skipped:
        parts.append(chat.missing_floors())
    return ToolOutcome("\n".join(parts), {"floors": records, "more": more})
