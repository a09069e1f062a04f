"""The journal's events of a run's context window: its window, and its compactions.

Kinds like those of :mod:`~tavern_agent.runtime.events` (the journal knows both
modules); :mod:`~tavern_agent.runtime.context` writes and folds them.
"""

from __future__ import annotations

from typing import ClassVar

from tavern_agent.runtime.events import JournalEvent, Level


class ContextWindow(JournalEvent, frozen=True, kw_only=True):
    """The window the run keeps its requests within; before its first request.

    tokens: the model's context window
    source: ``flag``, ``profile``, ``server``, ``table``, ``default`` or ``recording`` (a replay)
    max_tokens: the room kept for the answer (the request's output cap)
    budget: the most a request's prompt may take: the window less the answer's room and a margin
    scale: the model's tokens per token of the run's estimate until the provider counts (null: 1)
    """

    kind = "context_window"
    tokens: int
    source: str
    max_tokens: int
    budget: int
    scale: float | None = None


class ContextCounted(JournalEvent, frozen=True, kw_only=True):
    """The server counted a request with the model's own tokenizer before it was sent
    (llama.cpp's server can); the run's estimates are scaled to that count from now on.

    invocation_id: the invocation whose request was counted
    round: the round of that request
    estimated: the run's estimate of the request's prompt tokens
    counted: the server's count
    """

    kind = "context_counted"
    invocation_id: str
    round: int
    estimated: int
    counted: int


class ContextCompacted(JournalEvent, frozen=True, kw_only=True):
    """Older parts of an invocation's conversation are collapsed in its requests from now on.

    The transcript keeps everything; requests show the parts before ``collapsedItems`` as short
    stubs naming the file that holds each, and leave out the rounds before ``droppedItems``
    (a note after the task says so). Every call keeps its one result.

    invocation_id: the invocation compacted
    round: the round whose request is compacted first
    reason: ``budget`` (over it), ``window_full`` (during the last answer) or ``overflow`` (refused)
    collapsed_items: transcript items before this index are shown as stubs
    dropped_items: transcript items before this index (after the task) are left out
    results_collapsed: tool results shown as stubs now
    texts_collapsed: assistant texts shown as stubs now
    tokens_before: the request's estimated tokens before
    tokens_after: and after
    floors_dropped: the task's oldest chat floors left out of its chat history
    """

    kind = "context_compacted"
    default_level: ClassVar[Level] = "warn"
    invocation_id: str
    round: int
    reason: str
    collapsed_items: int
    dropped_items: int
    results_collapsed: int
    texts_collapsed: int
    tokens_before: int
    tokens_after: int
    floors_dropped: int = 0
