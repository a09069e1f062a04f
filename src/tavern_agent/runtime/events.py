"""The journal's events: every kind a run's ``events.jsonl`` holds, as a frozen value.

Each class is one kind: :attr:`JournalEvent.kind` is the line's ``type``, its
fields the line's ``payload`` (camelCase on disk). A field with a default is
written only when its value differs from it (``auto`` only when true);
:data:`msgspec.UNSET` marks a key some journals lack (see its description).
:attr:`JournalEvent.level` is the line's ``level`` unless the writer chooses.
:func:`~tavern_agent.runtime.journal.decode_event` gives a line's value back;
an unknown kind (a newer writer's) is kept :class:`Opaque`. Import the module
as ``events as ev``: some names (``HandoffAccepted``) are also tool effects'.
Each docstring's ``name: text`` lines describe the fields (a base's, those it
gives its kinds); ``docs/journal.md`` is generated from them by
:mod:`tavern_agent.runtime.journal_doc`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import msgspec
from msgspec import UNSET, UnsetType

Level = Literal["info", "warn", "error"]


class JournalEvent(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True):
    """One event of a run's journal (the classes below are its kinds)."""

    kind: ClassVar[str]
    default_level: ClassVar[Level] = "info"

    @property
    def level(self) -> Level:
        """The line's ``level`` when the writer does not choose one."""
        return self.default_level

    def payload(self) -> dict[str, Any]:
        """The event as the line's ``payload`` object (camelCase keys)."""
        out: dict[str, Any] = msgspec.to_builtins(self, enc_hook=str)
        return out


@dataclass(frozen=True, slots=True)
class Opaque:
    """An event this code cannot type: an unknown kind (a newer writer's), or a payload
    that does not fit its kind. Kept as it was read; readers pass it by."""

    kind: str
    raw: Any

    @property
    def level(self) -> Level:
        """``info``: nothing is known about the event."""
        return "info"


Event = JournalEvent | Opaque
"""What a journal line holds: a typed event, or one kept opaque."""


class RunStarted(JournalEvent, frozen=True, kw_only=True):
    """A run began: what it runs on. The first event of every journal.

    scene: ``chat`` or ``session``
    profile_id: the agent profile the run started with
    protocol: the model protocol (``openai_chat``, ``anthropic``, …)
    chat_file: the chat file the run writes to (none for a session)
    floor_count: the chat's floors when the run read it
    persist_base: the sha of the ``persist/`` version the run started from
    model: the run's model record (its protocol, name, base URL; no secret)
    skipped_chat_lines: the chat file's lines that are not JSON objects, skipped
    as SillyTavern skips them
    """

    kind = "run_started"
    scene: str
    profile_id: str
    protocol: str
    chat_file: str | None
    floor_count: int | None
    persist_base: str | None
    model: Any
    skipped_chat_lines: list[int] | None = None


class RunResumed(JournalEvent, frozen=True, kw_only=True):
    """A stopped run goes on (``run --resume``); open calls are paired first.

    invocation_id: the invocation that goes on
    rounds: the run's rounds so far
    commits: the confirmed commits so far
    pending_calls: the calls of the open turn without a result
    outcome_unknown: those of them that had started: they get the "outcome unknown" result
    """

    kind = "run_resumed"
    invocation_id: str
    rounds: int
    commits: int
    pending_calls: list[str]
    outcome_unknown: list[str]


class Prompt(msgspec.Struct, frozen=True):
    """A delegated child's prompt (it has no prompt file)."""

    system: str
    user: str


class InvocationStarted(JournalEvent, frozen=True, kw_only=True):
    """An agent's part of the run begins: the root, a revision, a handoff's target or a
    delegated child (a child's prompt is here; it has no prompt file).

    invocation_id: the new invocation
    snapshot_id: the tool snapshot it calls through
    invocation_kind: ``root``, ``revision``, ``handoff`` or ``child``
    revision_of: the invocation a revision revises
    tools: the model-facing tool names of its snapshot
    max_calls: its calls budget
    agent_id: its profile, when it has its own (a handoff's or a child's)
    parent_invocation_id: the invocation that handed off or delegated
    task_id: a child's task (null for a handoff's target); written with ``parentInvocationId``
    prompt: a child's system and user prompt
    """

    kind = "invocation_started"
    invocation_id: str
    snapshot_id: str
    invocation_kind: str = msgspec.field(name="kind")
    revision_of: str | None
    tools: list[str]
    max_calls: int
    agent_id: str | None = None
    parent_invocation_id: str | None = None
    task_id: str | UnsetType | None = UNSET
    prompt: Prompt | None = None


class ModelRequest(JournalEvent, frozen=True, kw_only=True):
    """The model is asked for an invocation's next turn (not when a stored response is reused).

    round: the round being asked for (a child counts its own)
    invocation_id: the invocation asking
    snapshot_id: the tools offered
    items: the transcript's items sent
    prompt_tokens: the request's estimated tokens (the provider's count is the response's usage)
    """

    kind = "model_request"
    round: int
    invocation_id: str
    snapshot_id: str
    items: int
    prompt_tokens: int | None = None


class ModelResponseStored(JournalEvent, frozen=True, kw_only=True):
    """The model's turn, stored in ``model-responses/`` and added to the transcript.

    round: the round it answers
    invocation_id: the invocation it belongs to
    ref: the stored response file, relative to the run folder
    message: the assistant message as the transcript keeps it (text and calls)
    finish: why the model stopped (``stop``, ``tool_calls``, ``length``, …)
    calls: how many tool calls the turn has
    usage: the provider's token counts
    """

    kind = "model_response_stored"
    round: int
    invocation_id: str
    ref: str
    message: dict[str, Any]
    finish: str
    calls: int
    usage: dict[str, Any]


class ReminderAdded(JournalEvent, frozen=True, kw_only=True):
    """A turn without a tool call: the agent is told how to finish (a user message).

    invocation_id: the invocation reminded
    round: its round
    saved_to: where the turn's text was saved, if it had any
    text: the reminder, as the model reads it
    """

    kind = "reminder_added"
    default_level = "warn"
    invocation_id: str
    round: int
    saved_to: str | None
    text: str


class ToolCallRequested(JournalEvent, frozen=True, kw_only=True):
    """A call of the model's turn is taken up (before the gate sees it).

    round: the round of the turn
    invocation_id: the calling invocation
    call_id: the model's call id
    tool_id: the tool the name resolves to (null: no such tool)
    source: where the tool comes from (``builtin``, an MCP server, an extension); absent
      in journals of older versions
    snapshot_id: the snapshot the name was resolved in
    name: the name the model called
    arguments: the raw arguments (``raw``, ``bytes`` or ``missing``), when small
    arguments_ref: the file in ``tool-args/`` holding larger arguments
    """

    kind = "tool_call_requested"
    round: int
    invocation_id: str
    call_id: str
    tool_id: str | None
    source: str | UnsetType | None = UNSET
    snapshot_id: str
    name: Any
    arguments: dict[str, Any] | None = None
    arguments_ref: str | None = None


class ToolCallStarted(JournalEvent, frozen=True, kw_only=True):
    """The call passed the gate's checks and runs now. After a stop, a started call without
    a result has an unknown outcome (the journal is synced first for non-repeatable tools).

    call_id: the model's call id
    invocation_id: the calling invocation
    round: the round of the turn
    """

    kind = "tool_call_started"
    call_id: str
    invocation_id: str
    round: int


class ToolResultStored(JournalEvent, frozen=True, kw_only=True):
    """A call's result: the journal is its record (a long one points to ``tool-results/``).

    round: the round of the turn
    invocation_id: the calling invocation
    call_id: the model's call id
    ref: the result's file (journals of older versions)
    result: the result as the model sees it (``content``, ``structured``, ``isError``, …)
    gate: the invocation's gate counters after the call; absent in journals of older versions
    """

    kind = "tool_result_stored"
    round: int
    invocation_id: str
    call_id: str
    ref: str | None = None
    result: dict[str, Any]
    gate: dict[str, Any] | UnsetType = UNSET


class ToolCallEnded(JournalEvent, frozen=True):
    """A call's outcome in short, for progress views.

    call_id: the model's call id
    tool_id: the tool (null: no such tool)
    name: the name the model called
    is_error: whether the result is an error
    error_code: the error's code
    message: the result's first line
    elapsed_ms: how long the call took
    resource_refs: the resources the result names
    """

    call_id: str
    tool_id: str | None
    name: Any
    is_error: bool
    error_code: str | None
    message: str
    elapsed_ms: float
    resource_refs: list[Any]


class ToolCallCompleted(ToolCallEnded, frozen=True, kw_only=True):
    """A call succeeded."""

    kind = "tool_call_completed"


class ToolCallFailed(ToolCallEnded, frozen=True, kw_only=True):
    """A call failed or was refused; the model sees the error and the next step.

    repeated: from the third time on, how many times in a row this call (same name and
      arguments) failed with this error; the third's result is the stronger hint
    """

    kind = "tool_call_failed"
    default_level = "warn"
    repeated: int | None = None


class CommitRequested(JournalEvent, frozen=True, kw_only=True):
    """A commit of the message body to the chat is about to be applied (synced first:
    after a stop, the chat file tells whether it was).

    call_id: the commit call (``auto_round_NNN`` for an auto-publish)
    index: the run's commit number
    path: the file committed
    mode: how the floor is written (``replace``, ``append``)
    auto: true for an auto-publish at a round's end
    """

    kind = "commit_requested"
    call_id: str
    index: int
    path: str
    mode: str
    auto: bool = False


class CommitConfirmed(JournalEvent, frozen=True, kw_only=True):
    """A commit was applied to the chat file (or found applied there on resume).

    call_id: the commit call
    index: the run's commit number
    floor: the chat floor written
    created: whether the floor was new; absent when reconciled
    chars: the characters written; absent when reconciled
    reconciled: true when resume found the commit in the chat file
    auto: true for an auto-publish
    """

    kind = "commit_confirmed"
    call_id: str
    index: int
    floor: int | None
    created: bool | UnsetType = UNSET
    chars: int | UnsetType = UNSET
    reconciled: bool = False
    auto: bool = False


class CommitNotApplied(JournalEvent, frozen=True, kw_only=True):
    """On resume, a requested commit is not in the chat file: it was not applied.

    call_id: the commit call
    index: the commit number that was not applied
    """

    kind = "commit_not_applied"
    default_level = "warn"
    call_id: str
    index: int


class AutoCommitCandidate(JournalEvent, frozen=True, kw_only=True):
    """Whether the message body changed since the last publish (auto-publish's state).

    candidate: the body has unpublished changes
    round: the round whose end published it (with ``candidate`` false)
    """

    kind = "auto_commit_candidate"
    candidate: bool
    round: int | None = None


class FinishAccepted(JournalEvent, frozen=True, kw_only=True):
    """A finishing call was accepted: the run completes at its turn's end.

    call_id: the finishing call
    invocation_id: the invocation finishing
    reason: the reason given, if any
    """

    kind = "finish_accepted"
    call_id: str
    invocation_id: str
    reason: str | None


class PersistOutcome(JournalEvent, frozen=True):
    """What became of the run's ``persist/`` notes at its end.

    version: the version now holding the run's tree (the current one if unchanged)
    sha: the tree's sha
    base: the sha the run started from
    """

    status: ClassVar[str]
    version: str | None
    sha: str
    base: str


class PersistUnchanged(PersistOutcome, frozen=True, kw_only=True):
    """``persist/`` is as the run found it (or as published already): nothing new."""

    kind = "persist_unchanged"
    status = "unchanged"


class PersistPublished(PersistOutcome, frozen=True, kw_only=True):
    """The run's ``persist/`` became the chat's new version."""

    kind = "persist_published"
    status = "published"


class PersistConflict(PersistOutcome, frozen=True, kw_only=True):
    """Another run published since this one started: its tree is kept as a version that
    the head does not name."""

    kind = "persist_conflict"
    status = "conflict"
    default_level = "warn"


PERSIST_OUTCOMES: Mapping[str, type[PersistOutcome]] = {
    c.status: c for c in (PersistUnchanged, PersistPublished, PersistConflict)
}
"""The persist event of each promotion status."""


class RunEnded(JournalEvent, frozen=True):
    """The run's outcome: the last event of an ended run.

    rounds: the rounds the run took
    commits: the commits confirmed
    floor: the chat floor the run's commits wrote
    """

    status: ClassVar[str]
    rounds: int
    commits: int
    floor: int | None


class RunCompleted(RunEnded, frozen=True, kw_only=True):
    """The run finished: its reply was committed (a chat) or given (a session).

    final_text: a session run's answer
    """

    kind = "run_completed"
    status = "completed"
    final_text: str | None = None


class RunStopped(RunEnded, frozen=True):
    """A run that ended without finishing.

    error_code: why (``model.request_failed``, ``run.storage_failed``, ``run.cancelled``, …)
    message: the error, for a person
    """

    default_level = "error"
    error_code: str
    message: str


class RunFailed(RunStopped, frozen=True, kw_only=True):
    """The run ended without a finish and without a commit."""

    kind = "run_failed"
    status = "failed"


class RunPartialSuccess(RunStopped, frozen=True, kw_only=True):
    """The run ended without a finish after at least one commit."""

    kind = "run_partial_success"
    status = "partial_success"


class RunCancelled(RunStopped, frozen=True, kw_only=True):
    """The run was cancelled (Ctrl-C, ``runs cancel``, a client gone); open calls were paired."""

    kind = "run_cancelled"
    status = "cancelled"


class TaskStarted(JournalEvent, frozen=True, kw_only=True):
    """A delegated task began: a child invocation (its ``invocation_started`` follows).

    task_id: the task
    agent_id: the agent doing it
    key: its result's file key
    mode: ``return_to_parent``
    invocation_id: the child invocation
    parent_invocation_id: the delegating invocation
    call_id: the delegate call
    title: the task's title
    """

    kind = "task_started"
    task_id: str
    agent_id: str
    key: str
    mode: str
    invocation_id: str
    parent_invocation_id: str
    call_id: str
    title: str


class TaskFinished(JournalEvent, frozen=True, kw_only=True):
    """A task ended: returned, failed, or cancelled with its run (level ``warn`` unless
    completed).

    task_id: the task
    agent_id: the agent that did it
    invocation_id: the child invocation
    parent_invocation_id: the delegating invocation
    status: ``completed``, ``partial``, ``failed`` or ``cancelled``
    reason: how it ended (``returned``, ``no_return``, ``rounds_used``, ``run_ended``, …)
    summary_path: the result's markdown file
    result: the result record the caller reads
    """

    kind = "task_finished"
    task_id: str
    agent_id: str
    invocation_id: str
    parent_invocation_id: str
    status: str
    reason: str
    summary_path: str
    result: dict[str, Any]

    @property
    def level(self) -> Level:
        """``info`` for a completed task, ``warn`` for any other ending."""
        return "info" if self.status == "completed" else "warn"


class TaskResultsInjected(JournalEvent, frozen=True, kw_only=True):
    """Ended tasks' results, added to their caller's transcript before its next turn.

    invocation_id: the caller
    task_ids: the tasks reported
    text: the user message added
    """

    kind = "task_results_injected"
    invocation_id: str
    task_ids: list[str]
    text: str


class AwaitEffect(msgspec.Struct, frozen=True, rename="camel"):
    """The await call's request, as a fresh engine continues it."""

    task_ids: list[str] | None
    mode: str


class TaskAwaitWaiting(JournalEvent, frozen=True, kw_only=True):
    """An await call left waiting (durable engines): the host continues it once the tasks
    ended or the timeout passed.

    invocation_id: the waiting invocation
    call_id: the await call
    task_ids: the tasks waited for
    mode: ``any`` or ``all``
    timeout_ms: the longest wait
    gate: the invocation's gate counters (the call was counted)
    effect: the await call's request (``taskIds`` as asked, ``mode``)
    """

    kind = "task_await_waiting"
    invocation_id: str
    call_id: str
    task_ids: list[str]
    mode: str
    timeout_ms: int
    gate: dict[str, Any]
    effect: AwaitEffect


class HandoffAccepted(JournalEvent, frozen=True, kw_only=True):
    """The run is handed to another agent; its invocation starts next.

    call_id: the handoff call
    from_invocation_id: the invocation handing off
    to_invocation_id: the target's new invocation
    agent_id: the target agent
    depth: handoffs in this run so far
    """

    kind = "handoff_accepted"
    call_id: str
    from_invocation_id: str
    to_invocation_id: str
    agent_id: str
    depth: int
