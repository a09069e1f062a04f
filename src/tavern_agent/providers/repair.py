"""Interrupted-history repair: every call gets exactly one result.

Runs before any encoding. A call without a result (the run stopped, a reply
never came) gets a synthesized, recoverable result saying its outcome is
unknown and to check state before repeating it. A result whose call is not in
the history before it is dropped. A repeated result for the same call is
dropped too. Calls to tools no longer in the snapshot stay; codecs still replay
them under their recorded names.

The output is a list of *entries*: user text, or an exchange (an assistant
message and the results of its calls, in call order). Codecs only ever see
paired history.

It also reports where the history is *settled*: the longest prefix after which
no call waits for a result. Nothing that follows can change the entries of that
prefix, so an encoder may keep what it made of them (see
:mod:`tavern_agent.providers.incremental`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from tavern_agent.core.results import AgentToolResult
from tavern_agent.providers.transcript import (
    AssistantMessage,
    ToolResultMessage,
    Transcript,
    UserMessage,
    outcome_unknown_result,
)


@dataclass(frozen=True, slots=True)
class Exchange:
    """An assistant message and one result per call, in the order of the calls."""

    message: AssistantMessage
    results: tuple[AgentToolResult, ...]


Entry = UserMessage | Exchange


@dataclass(frozen=True, slots=True)
class RepairedHistory:
    """Paired history plus what the repair did (for the record and for tests)."""

    system: str | None
    entries: tuple[Entry, ...]
    synthesized: tuple[str, ...] = ()  # call ids that got an "outcome unknown" result
    dropped: tuple[str, ...] = ()  # call ids of results that had no call
    settled_items: int = 0  # transcript items in the settled prefix
    settled_entries: int = 0  # entries made from those items

    @property
    def changed(self) -> bool:
        """Whether the repair added or dropped anything."""
        return bool(self.synthesized or self.dropped)


def repair(transcript: Transcript) -> RepairedHistory:
    """Pair every call with exactly one result; see the module docstring."""
    # Per exchange: the message and its result slots, filled as results arrive.
    exchanges: list[tuple[AssistantMessage, list[AgentToolResult | None]]] = []
    waiting: dict[str, deque[tuple[int, int]]] = {}
    dropped: list[str] = []
    order: list[UserMessage | int] = []
    open_slots = 0
    settled = (0, 0)
    for position, item in enumerate(transcript.items, 1):
        if isinstance(item, UserMessage):
            order.append(item)
        elif isinstance(item, AssistantMessage):
            index = len(exchanges)
            exchanges.append((item, [None] * len(item.calls)))
            for slot, call in enumerate(item.calls):
                waiting.setdefault(call.call_id, deque()).append((index, slot))
            open_slots += len(item.calls)
            order.append(index)
        elif isinstance(item, ToolResultMessage):
            queue = waiting.get(item.call_id)
            if not queue:
                dropped.append(item.call_id)
            else:
                index, slot = queue.popleft()
                exchanges[index][1][slot] = item.result
                open_slots -= 1
        if open_slots == 0:
            settled = (position, len(order))
    synthesized: list[str] = []
    out: list[Entry] = []
    for step in order:
        if isinstance(step, UserMessage):
            out.append(step)
            continue
        message, slots = exchanges[step]
        results = []
        for call, found in zip(message.calls, slots, strict=True):
            if found is None:
                synthesized.append(call.call_id)
                found = outcome_unknown_result(call)
            results.append(found)
        out.append(Exchange(message, tuple(results)))
    return RepairedHistory(
        transcript.system, tuple(out), tuple(synthesized), tuple(dropped), *settled
    )
