"""Keeping a run's requests within its model's context window.

The window is resolved once per run, before its first request (the
``--context-window`` flag, the profile's ``limits.context_window``, what the
server says, the table of known models, the default; see
:mod:`tavern_agent.providers.window`) and journaled (``context_window``). A
request's prompt may take the window less the answer's room and a margin.

Each request is counted before it is sent: a fast estimate per transcript item
(cached, so a round costs only its new items), times the ratio of the
provider's own count (a response's ``usage``) to the estimate of the request
it answered. When a request would go over the budget, the invocation's older
rounds are compacted in the *request*, never in the transcript: tool results
and assistant texts before a cut become stubs naming the file that holds them
(written under ``tool-results/`` if the result was inline); when that is not
enough, the oldest rounds are left out whole (a note after the task says so),
and then the oldest floors of the task's chat history (the model can still
read them with ``chat_read_messages``).
The system prompt, the tools, the task and the last round are never cut; every
call keeps its one result. A compaction leaves the request well under the
budget, so the next rounds grow on the same prefix (the incremental encoder
stays incremental) until the next one.

The cut points are journaled (``context_compacted``) and every input of a
decision is too (the window, each request's estimate, each response's usage),
so resume, which folds the journal, and replay, which gets the recorded usage
and the recorded window, make the same requests.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from tavern_agent import run_layout
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.ids import ToolId
from tavern_agent.core.profile import Profile
from tavern_agent.core.results import AgentToolResult
from tavern_agent.core.tool_ids import READ_FILE
from tavern_agent.providers.gateway import ModelError, ModelGateway, ModelRequest
from tavern_agent.providers.registry import codec_for
from tavern_agent.providers.transcript import (
    AssistantMessage,
    RecordedCall,
    ToolResultMessage,
    Transcript,
    TranscriptItem,
    UserMessage,
)
from tavern_agent.providers.window import (
    WindowFacts,
    estimate_tokens,
    output_tokens,
    prompt_tokens,
)
from tavern_agent.runtime import context_events as cev
from tavern_agent.runtime import events as ev
from tavern_agent.runtime.invocation import Invocation
from tavern_agent.runtime.journal import Journal, JournalRecord
from tavern_agent.tools.snapshot import ToolSnapshot
from tavern_agent.tools.texts import call
from tavern_agent.workspace.store import Workspace

MESSAGE_TOKENS = 4  # what a message's role and framing cost beside its text
STUB_MIN_CHARS = 600  # shorter results and texts are kept as they are
LOW_WATER = 0.6  # a compaction leaves the request at this share of the budget …
STRONG_WATER = 0.4  # … or at this one after an overflow or a full window
MIN_RATIO, MAX_RATIO = 0.5, 4.0
MIN_ROOM = 256  # what a small window leaves the answer: a call with a short reply
ARGS_WEIGHT = 1.06


def margin_of(window: int) -> int:
    """Room kept for what the estimate may miss and for the provider's own framing: the
    estimate is calibrated by the provider's count of each request, so what it may miss is
    a share of the newest round only."""
    return 32 + window // 40


@dataclass(frozen=True, slots=True)
class Window:
    """The window a run keeps: its tokens, where they came from, the answer's room, the budget."""

    tokens: int
    source: str
    max_tokens: int  # the output cap the requests send
    budget: int  # the most a request's prompt may take

    @classmethod
    def of(cls, tokens: int, source: str, max_tokens: int) -> Window:
        """The window of ``tokens``: the answer keeps ``max_tokens``, at most a quarter of
        the window; under 3,072 tokens less, down to :data:`MIN_ROOM` at 2,048, so a small
        model's prompt keeps most of its window."""
        room = min(max_tokens, tokens // 4, max(MIN_ROOM, tokens // 2 - 768))
        budget = tokens - room - margin_of(tokens)
        return cls(tokens, source, room, budget)


class ContextTooSmall(ModelError):
    """The parts of a request that are never cut do not fit the window."""


@dataclass(slots=True)
class _Cuts:
    """One invocation's compaction: items before ``collapsed`` are stubs, before ``dropped``
    (after the task) left out."""

    collapsed: int = 0
    dropped: int = 0
    floors: int = 0  # the oldest chat floors left out of the task's chat history
    force: str | None = None  # a stronger compaction is due: "window_full" or "overflow"
    asked: int | None = None  # the estimate of the request in flight


@dataclass(slots=True)
class _Counts:
    """Per-item estimates of one invocation's transcript, and what it was."""

    items: tuple[TranscriptItem, ...] = ()
    raw: list[int] = field(default_factory=list)
    stub: list[int] = field(default_factory=list)  # what the item costs collapsed
    views: dict[tuple[int, int, int], tuple[TranscriptItem, ...]] = field(default_factory=dict)
    tasks: dict[int, tuple[str, int]] = field(default_factory=dict)  # floors left out → task


@dataclass(frozen=True, slots=True)
class Full:
    """An answer cut off because the window filled: the provider's counts."""

    prompt: int
    output: int


class ContextKeeper:
    """A run's window and its invocations' compactions; fed by the journal's events."""

    def __init__(self) -> None:
        self.window: Window | None = None
        self.ratio = 1.0  # the provider's count over the estimate, from the last usage
        self.counted = False  # whether the provider has counted a request yet
        self._cuts: dict[str, _Cuts] = {}
        self._counts: dict[str, _Counts] = {}
        self._fixed: dict[tuple[int, str | None], int] = {}
        self._full: dict[str, Full] = {}  # an invocation's last answer, cut off by a full window

    # ------------------------------------------------------------ the journal's fold

    def listen(self, record: JournalRecord) -> None:
        """A journal listener: the live run feeds the keeper as its fold does."""
        self.fold(record.event)

    def fold(self, event: ev.Event) -> None:
        """Apply one journal event (written now, or read back on resume)."""
        match event:
            case cev.ContextWindow():
                self.window = Window.of(event.tokens, event.source, event.max_tokens)
                self.ratio = 1.0 if event.scale is None else event.scale
            case cev.ContextCounted():
                self._calibrate(event.counted, event.estimated)
            case cev.ContextCompacted():
                cuts = self._cuts.setdefault(event.invocation_id, _Cuts())
                cuts.collapsed, cuts.dropped = event.collapsed_items, event.dropped_items
                cuts.floors = event.floors_dropped
                cuts.force = None
            case ev.ModelRequest() if event.prompt_tokens is not None:
                self._cuts.setdefault(event.invocation_id, _Cuts()).asked = event.prompt_tokens
            case ev.ModelResponseStored():
                self._answered(event)

    def _answered(self, event: ev.ModelResponseStored) -> None:
        cuts = self._cuts.setdefault(event.invocation_id, _Cuts())
        asked, cuts.asked = cuts.asked, None
        counted = prompt_tokens(event.usage)
        if counted is None or self.window is None:
            return
        if asked:
            self._calibrate(counted, asked)
        out = output_tokens(event.usage) or 0
        self._full.pop(event.invocation_id, None)
        if event.finish == "length" and counted + out >= self.window.tokens - 16:
            self._full[event.invocation_id] = Full(counted, out)
            cuts.force = "window_full"

    def _calibrate(self, counted: int, estimated: int) -> None:
        """The next estimates are scaled by what this one (``estimated``) missed."""
        self.ratio = min(max(self.ratio * counted / estimated, MIN_RATIO), MAX_RATIO)
        self.counted = True

    # ------------------------------------------------------------ the window

    async def resolve(
        self, gateway: ModelGateway, profile: Profile, journal: Journal
    ) -> Window | None:
        """The run's window, journaled the first time; ``None`` for a gateway without one."""
        if self.window is not None:
            return self.window
        facts_of = getattr(gateway, "window_facts", None)
        facts: WindowFacts | None = await facts_of() if facts_of is not None else None
        own = profile.limits.context_window
        if own is not None and (facts is None or facts.source != "flag"):
            facts = WindowFacts(
                own, "profile", facts.max_tokens if facts else 4096, facts.scale if facts else 1.0
            )
        if facts is None:
            return None
        window = Window.of(facts.tokens, facts.source, facts.max_tokens)
        self.window = window
        journal.write(
            cev.ContextWindow(
                tokens=window.tokens,
                source=window.source,
                max_tokens=window.max_tokens,
                budget=window.budget,
                scale=None if facts.scale == 1.0 else facts.scale,
            )
        )
        return window

    async def count(
        self, gateway: ModelGateway, inv: Invocation, request: ModelRequest, journal: Journal
    ) -> None:
        """Before the provider has counted any request, have the server count this one with
        the model's own tokenizer where it can (journaled; the estimates follow it)."""
        count_of = getattr(gateway, "count_tokens", None)
        if self.counted or self.window is None or count_of is None:
            return
        counted: int | None = await count_of(request)
        if counted is None:
            return
        counts = self._count(inv)
        head = _head_end(counts.items)
        estimated = self._total(inv, self._fixed_tokens(inv), counts, head, _Cut(0, 0, 0))
        journal.write(
            cev.ContextCounted(
                invocation_id=inv.id, round=request.round, estimated=estimated, counted=counted
            )
        )

    # ------------------------------------------------------------ a request

    def force(self, inv_id: str, reason: str) -> None:
        """The next request of ``inv_id`` is compacted more strongly (an overflow)."""
        self._cuts.setdefault(inv_id, _Cuts()).force = reason

    def request_view(
        self, inv: Invocation, round: int, workspace: Workspace, journal: Journal
    ) -> tuple[Transcript, int]:
        """The transcript to send for ``inv``'s next request, within the budget, and its tokens.

        Compacts (and journals it) when the request would go over the budget or
        a stronger compaction is due; raises :class:`ContextTooSmall` when the
        parts that are never cut do not fit.
        """
        window = self.window
        assert window is not None
        items = inv.transcript.items
        counts = self._count(inv)
        fixed = self._fixed_tokens(inv)
        cuts = self._cuts.setdefault(inv.id, _Cuts())
        head, last = _head_end(items), _last_turn(items)
        now = _Cut(cuts.collapsed, cuts.dropped, cuts.floors)
        before = self._total(inv, fixed, counts, head, now)
        if before > window.budget or cuts.force is not None:
            strong = cuts.force is not None
            target = int(window.budget * (STRONG_WATER if strong else LOW_WATER))
            cut = self._choose(inv, counts, fixed, head, last, now, target)
            collapsed, dropped = cut.collapsed, cut.dropped
            after = self._total(inv, fixed, counts, head, cut)
            if after > window.budget and head == len(items):  # the first request
                raise ContextTooSmall(self._too_small(inv, after, window))
            reason = cuts.force or "budget"
            if cut != now:
                journal.write(
                    cev.ContextCompacted(
                        invocation_id=inv.id,
                        round=round,
                        reason=reason,
                        collapsed_items=collapsed,
                        dropped_items=dropped,
                        results_collapsed=_collapsible(items, dropped, collapsed, results=True),
                        texts_collapsed=_collapsible(items, dropped, collapsed, results=False),
                        tokens_before=before,
                        tokens_after=after,
                        floors_dropped=cut.floors,
                    )
                )
            cuts.collapsed, cuts.dropped, cuts.floors, cuts.force = (*cut, None)
        now = _Cut(cuts.collapsed, cuts.dropped, cuts.floors)
        return self._view(inv, counts, head, now, workspace), self._total(
            inv, fixed, counts, head, now
        )

    def full_result(self, inv_id: str, rc: RecordedCall) -> AgentToolResult | None:
        """The result of a call of ``inv_id``'s last answer when the window filled during it
        (not the output cap); ``None`` otherwise."""
        full = self._full.get(inv_id)
        window = self.window
        if full is None or window is None:
            return None
        text = (
            f"Not run: the context window ({window.tokens:,} tokens) filled up during your "
            f"answer ({full.prompt:,} prompt + {full.output:,} answer tokens), so this call was "
            "cut off. Older rounds are collapsed from the next request on: send the call again."
        )
        return AgentToolResult.failure(rc.call_id, None, ErrorCode.MODEL_TOOL_CALL_TRUNCATED, text)

    # ------------------------------------------------------------ counting

    def _count(self, inv: Invocation) -> _Counts:
        """The invocation's per-item estimates, extended over the items added since."""
        counts = self._counts.get(inv.id)
        items = inv.transcript.items
        known = 0 if counts is None else len(counts.items)
        if counts is None or items[:known] != counts.items:
            counts = self._counts[inv.id] = _Counts()
            known = 0
        for item in items[known:]:
            counts.raw.append(_item_tokens(item, inv.id))
            stub = _stub_of(item, inv, 999, _spill_path(inv, item, 999)) if _big(item) else None
            counts.stub.append(-1 if stub is None else _item_tokens(stub, inv.id))
        counts.items = items
        return counts

    def _fixed_tokens(self, inv: Invocation) -> int:
        """The system text and the tool definitions (counted once per snapshot)."""
        key = (id(inv.snapshot), inv.transcript.system)
        if key not in self._fixed:
            self._fixed[key] = fixed_tokens(inv.snapshot, inv.transcript.system)
        return self._fixed[key]

    def _scaled(self, raw: int) -> int:
        return math.ceil(raw * self.ratio)

    def _task(self, inv: Invocation, counts: _Counts, floors: int) -> tuple[str, int]:
        """The task's text with its ``floors`` oldest chat floors left out, and its tokens."""
        if floors not in counts.tasks:
            first = counts.items[0]
            assert isinstance(first, UserMessage)
            read = inv.snapshot.name_of(READ_MESSAGES)
            text = _fewer_floors(first.text, floors, read)
            counts.tasks[floors] = (text, _item_tokens(UserMessage(text), inv.id))
        return counts.tasks[floors]

    def _total(self, inv: Invocation, fixed: int, counts: _Counts, head: int, cut: _Cut) -> int:
        collapsed, dropped = cut.collapsed, cut.dropped
        raw = fixed + sum(counts.raw[:head])
        if cut.floors:
            raw += self._task(inv, counts, cut.floors)[1] - counts.raw[0]
        start = max(head, dropped)
        if start > head:
            raw += NOTE_TOKENS
        for index in range(start, len(counts.raw)):
            stub = counts.stub[index]
            raw += stub if index < collapsed and stub >= 0 else counts.raw[index]
        return self._scaled(raw)

    def _choose(
        self,
        inv: Invocation,
        counts: _Counts,
        fixed: int,
        head: int,
        last: int,
        now: _Cut,
        target: int,
    ) -> _Cut:
        """The smallest cuts past the current ones that bring the request to ``target``:
        older rounds collapsed, then left out, then the task's oldest chat floors."""
        items = counts.items
        turns = [
            i for i in range(head, last + 1) if i == last or isinstance(items[i], AssistantMessage)
        ]
        for index in turns:
            cut = _Cut(index, now.dropped, now.floors)
            if index >= now.collapsed and self._total(inv, fixed, counts, head, cut) <= target:
                return cut
        collapsed = max(now.collapsed, last)
        for index in turns:
            cut = _Cut(collapsed, index, now.floors)
            if index >= now.dropped and self._total(inv, fixed, counts, head, cut) <= target:
                return cut
        dropped = max(now.dropped, last)
        first = items[0] if items else None
        shown = _floor_starts(first.text)[1] if isinstance(first, UserMessage) else []
        for floors in range(now.floors, len(shown)):  # the newest floor stays
            cut = _Cut(collapsed, dropped, floors)
            if self._total(inv, fixed, counts, head, cut) <= target:
                return cut
        return _Cut(collapsed, dropped, max(now.floors, len(shown) - 1, 0))

    # ------------------------------------------------------------ the request's view

    def _view(
        self, inv: Invocation, counts: _Counts, head: int, cut: _Cut, workspace: Workspace
    ) -> Transcript:
        transcript = inv.transcript
        collapsed, dropped = cut.collapsed, cut.dropped
        if collapsed <= head and dropped <= head and not cut.floors:
            return transcript
        key = (cut.collapsed, cut.dropped, cut.floors)
        prefix = counts.views.get(key)
        if prefix is None:
            items = transcript.items
            shown: list[TranscriptItem] = list(items[:head])
            if cut.floors:
                shown[0] = UserMessage(self._task(inv, counts, cut.floors)[0])
            start = max(head, dropped)
            if start > head:
                rounds = sum(1 for i in items[head:start] if isinstance(i, AssistantMessage))
                note = _dropped_note(inv, rounds)
                last = shown[-1] if shown else None
                if isinstance(last, UserMessage):
                    shown[-1] = UserMessage(f"{last.text}\n\n{note}")
                else:
                    shown.append(UserMessage(note))
            turn = sum(1 for i in items[:start] if isinstance(i, AssistantMessage))
            for item in items[start:collapsed]:
                turn += isinstance(item, AssistantMessage)
                if _big(item):
                    path = _spill(inv, item, turn, workspace)
                    shown.append(_stub_of(item, inv, turn, path))
                else:
                    shown.append(item)
            prefix = counts.views[key] = tuple(shown)
        return Transcript(prefix + transcript.items[max(collapsed, head) :], transcript.system)

    def _too_small(self, inv: Invocation, needed: int, window: Window) -> str:
        return (
            f"the request does not fit the model's context window: the system prompt, the "
            f"tool definitions, the task and the last round need about {needed:,} tokens, and "
            f"a {window.tokens:,}-token window ({window.source}) leaves {window.budget:,} after "
            f"{window.max_tokens:,} for the answer. Use a profile with fewer tools or less "
            "chat history, or a model with a bigger context (--context-window N if the "
            "server's window is bigger than that)."
        )


NOTE_TOKENS = 40
READ_MESSAGES = ToolId.builtin("chat.read_messages")
_CHAT = re.compile(r"^## Chat \(\d+ floors\)\n", re.MULTILINE)
_FLOOR = re.compile(r"^\[(\d+)\] ", re.MULTILINE)


class _Cut(NamedTuple):
    """Where a request is cut: items before ``collapsed`` shown as stubs, before ``dropped``
    left out, and the task's ``floors`` oldest chat floors left out."""

    collapsed: int
    dropped: int
    floors: int


def _floor_starts(text: str) -> tuple[int, list[tuple[int, int]]]:
    """Where the task's chat history begins, and where each floor's line starts (with its
    index), oldest first; no floors when the text has no chat section."""
    found = _CHAT.search(text)
    if found is None:
        return 0, []
    end = text.find("\n\n## Skills\n", found.end())
    starts: list[tuple[int, int]] = []
    for line in _FLOOR.finditer(text, found.end(), len(text) if end < 0 else end):
        index = int(line.group(1))
        if not starts or index > starts[-1][1]:  # a message's own "[n] " line is not a floor
            starts.append((line.start(), index))
    return found.end(), starts


def _fewer_floors(text: str, floors: int, read: str | None) -> str:
    """The task's text without its ``floors`` oldest chat floors, and a line saying so."""
    begin, starts = _floor_starts(text)
    if floors <= 0 or floors >= len(starts):
        return text
    position, index = starts[floors]
    more = f"; read them with {read}" if read else ""
    return f"{text[:begin]}(floors 0-{index - 1} are not shown{more})\n{text[position:]}"


def fixed_tokens(snapshot: ToolSnapshot, system: str | None) -> int:
    """The estimated tokens of a request's tool definitions and system text."""
    codec = codec_for(snapshot.protocol)
    tools = json.dumps(codec.encode_tools(snapshot), ensure_ascii=False)
    return estimate_tokens(tools) + estimate_tokens(system or "") + MESSAGE_TOKENS


def request_tokens(transcript: Transcript, snapshot: ToolSnapshot) -> int:
    """The estimated prompt tokens of a request (uncalibrated): what the keeper counts."""
    return fixed_tokens(snapshot, transcript.system) + sum(map(_item_tokens, transcript.items))


def _head_end(items: Sequence[TranscriptItem]) -> int:
    """Where the task ends: the items before the first assistant turn."""
    for index, item in enumerate(items):
        if isinstance(item, AssistantMessage):
            return index
    return len(items)


def _last_turn(items: Sequence[TranscriptItem]) -> int:
    """Where the last round begins: the newest assistant turn."""
    for index in range(len(items) - 1, -1, -1):
        if isinstance(items[index], AssistantMessage):
            return index
    return len(items)


def _item_tokens(item: TranscriptItem, inv_id: str = "") -> int:
    """The item's estimate. The invocation's id (random) is counted as a fixed word, so a
    replay, whose ids differ, decides as the recorded run did."""
    if isinstance(item, UserMessage):
        return estimate_tokens(_without(item.text, inv_id)) + MESSAGE_TOKENS
    if isinstance(item, ToolResultMessage):
        return estimate_tokens(_without(item.result.content, inv_id)) + MESSAGE_TOKENS + 8
    total = estimate_tokens(item.text) + MESSAGE_TOKENS
    for rc in item.calls:
        raw = rc.call.raw_arguments
        args = raw if isinstance(raw, str) else json.dumps(raw, default=str, ensure_ascii=False)
        # JSON text (escapes, quotes) costs a little more per piece than prose
        total += int(estimate_tokens(args) * ARGS_WEIGHT) + estimate_tokens(rc.name) + 12
    return total


def _without(text: str, inv_id: str) -> str:
    return text.replace(inv_id, "inv_id") if inv_id and inv_id in text else text


def _big(item: TranscriptItem) -> bool:
    if isinstance(item, ToolResultMessage):
        return len(item.result.content) > STUB_MIN_CHARS
    return isinstance(item, AssistantMessage) and len(item.text) > STUB_MIN_CHARS


def _text_of(item: TranscriptItem) -> str:
    if isinstance(item, ToolResultMessage):
        return item.result.content
    return item.text


def _spill_path(inv: Invocation, item: TranscriptItem, turn: int) -> str:
    if isinstance(item, ToolResultMessage):
        return run_layout.spilled_text(inv.id, turn, item.call_id)
    return f"{run_layout.RESULTS_DIR}/{inv.id}/round-{turn:03d}-text.txt"


def _spill(inv: Invocation, item: TranscriptItem, turn: int, workspace: Workspace) -> str:
    """The file that holds the item's text: a long result's own spill file, or one written now."""
    path = _spill_path(inv, item, turn)
    if workspace.kind_or_none(path) is None:
        workspace.write_atomic(path, _text_of(item).encode("utf-8"), durable=False)
    return path


def _stub_of(item: TranscriptItem, inv: Invocation, turn: int, path: str) -> TranscriptItem:
    """A short stand-in for an older long item, naming where it is and how to read it."""
    size = len(_text_of(item))
    read = inv.snapshot.name_of(READ_FILE)
    how = f"; read it with {call(read, file_path=path)}" if read else ""
    if isinstance(item, ToolResultMessage):
        text = f"[Collapsed to fit the context window: {size:,} characters, in {path}{how}.]"
        result = replace(item.result, content=text, structured=None, resource_refs=())
        return ToolResultMessage(result)
    assert isinstance(item, AssistantMessage)
    text = f"[Your earlier text, collapsed to fit the context window: {size:,} characters: {path}.]"
    return AssistantMessage(text, item.calls, item.finish)


def _dropped_note(inv: Invocation, rounds: int) -> str:
    where = f"{run_layout.RESULTS_DIR}/{inv.id}/"
    return (
        f"[The first {rounds} rounds of this conversation are left out to fit the context "
        f"window; their long results are in {where}.]"
    )


def _collapsible(
    items: Sequence[TranscriptItem], dropped: int, collapsed: int, *, results: bool
) -> int:
    kind: Any = ToolResultMessage if results else AssistantMessage
    return sum(1 for i in items[dropped:collapsed] if isinstance(i, kind) and _big(i))
