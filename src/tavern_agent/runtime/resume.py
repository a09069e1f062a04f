"""Run start and resume: the first events of a run, and its state as the journal's fold.

A run's state is the fold of its journal's events (plus the checkpoint's
read states): the invocations' transcripts, requested and resulted calls and
gate counts, the run's counters, the delegated tasks, and where the main line
stands (a finish or a handoff accepted but not yet acted on). A commit that
the journal shows as requested but not confirmed is confirmed (or not) from
the chat file itself; if the chat file cannot tell, the run is not resumed.
"""

from __future__ import annotations

from msgspec import UNSET, UnsetType

from tavern_agent import run_layout
from tavern_agent.chat.repository import find_run_message
from tavern_agent.core.errors import ErrorCode
from tavern_agent.providers.transcript import (
    AssistantMessage,
    ToolResultMessage,
    Transcript,
    UserMessage,
)
from tavern_agent.runtime import events as ev
from tavern_agent.runtime.endings import RunResult
from tavern_agent.runtime.invocation import Invocation
from tavern_agent.runtime.journal import JournalRecord, read_journal
from tavern_agent.runtime.parts import RunPart
from tavern_agent.runtime.turns import Finished, HandedOff

# The tasks' events, folded by AgentTasks (a child's invocation_started too). The
# last two also change the caller's invocation (its transcript, its gate counts),
# which the engine's own fold applies after.
AGENT_EVENTS = (ev.TaskStarted, ev.TaskFinished, ev.TaskResultsInjected, ev.TaskAwaitWaiting)
CALLER_EVENTS = (ev.TaskResultsInjected, ev.TaskAwaitWaiting)


# The events that fold onto a live state as they do onto a fresh one (see
# Resumer.catch_up): the main line's model turns and calls. Not commits and persists
# (the chat file and the run's notes changed too), tasks and invocations (state a live
# engine holds beyond the fold), nor the run's endings and resumes.
LIVE_FOLDS = (
    ev.ModelRequest,
    ev.ModelResponseStored,
    ev.ReminderAdded,
    ev.ToolCallRequested,
    ev.ToolCallStarted,
    ev.ToolResultStored,
    ev.ToolCallEnded,
    ev.AutoCommitCandidate,
    ev.FinishAccepted,
)


class ResumeRefused(RuntimeError):
    """The run cannot continue: an effect's outcome cannot be confirmed."""


class Resumer(RunPart):
    """Starts one run's journal, and rebuilds the run's state from it."""

    # ------------------------------------------------------------ start

    def start(self) -> None:
        """Journal the run's start and its current invocation's."""
        run = self.run
        self.journal.write(
            ev.RunStarted(
                scene=run.scene.value,
                profile_id=run.profile.id,
                protocol=run.protocol.value,
                chat_file=run.record.get("chatFile"),
                floor_count=None if run.chat is None else run.chat.floor_count,
                persist_base=None if run.persist_base is None else run.persist_base.sha,
                model=run.record.get("model"),
                skipped_chat_lines=run.record.get("skippedChatLines") or None,
            )
        )
        self.invocation_started(self.state.current)

    def invocation_started(self, inv: Invocation) -> None:
        """Journal a new invocation (the root, a revision, a handoff's target, a child)."""
        prompt = None
        if inv.is_child:  # a child has no prompt file (see Run.add_invocation)
            first = inv.transcript.items[0]
            user = first.text if isinstance(first, UserMessage) else ""
            prompt = ev.Prompt(inv.transcript.system or "", user)  # a child's is never empty
        self.journal.write(
            ev.InvocationStarted(
                invocation_id=inv.id,
                snapshot_id=inv.snapshot.id,
                invocation_kind=inv.kind,
                revision_of=inv.revision_of,
                tools=list(inv.snapshot.model_names),
                max_calls=inv.snapshot.max_calls_per_invocation,
                agent_id=None if inv.profile is None else inv.profile.id,
                parent_invocation_id=inv.parent_id,
                # written with the parent: null for a handoff's target
                task_id=UNSET if inv.parent_id is None else inv.task_id,
                prompt=prompt,
            )
        )
        if not inv.is_child:  # a child's start is journaled; its turns checkpoint
            self.checkpoints.save(self.run.invocations)

    def resumed(self) -> None:
        """Journal that the run goes on (after :meth:`rebuild` and :meth:`reconcile_commit`)."""
        inv, state = self.state.current, self.state
        unknown = [c for c in inv.pending_calls() if c in inv.requested]
        self.journal.write(
            ev.RunResumed(
                invocation_id=inv.id,
                rounds=state.rounds,
                commits=state.commits_confirmed,
                pending_calls=inv.pending_calls(),
                outcome_unknown=[c for c in unknown if c not in state.confirmed_calls],
            )
        )

    # ------------------------------------------------------------ the fold

    def rebuild(self) -> RunResult | None:
        """Live state as the fold of the journal's events (plus the checkpoint's read states).

        Sets where the journal left the main line (a finish or a handoff accepted
        but not yet acted on). Returns the run's result if it had ended.
        """
        records = read_journal(self.run.run_dir / run_layout.JOURNAL_FILE)
        by_id = {inv.id: inv for inv in self.run.invocations}
        for record in records:
            self._fold(record.event, by_id)
        self.checkpoints.restore(by_id)
        for record in reversed(records):
            event = record.event
            if isinstance(event, ev.RunEnded):
                if (
                    isinstance(event, ev.RunStopped)
                    and event.error_code == ErrorCode.RUN_STORAGE_FAILED.value
                ):
                    break  # the storage failed, not the run: it goes on once there is room
                return RunResult.from_ended(record.run_id, event)
            if isinstance(event, ev.RunResumed | ev.InvocationStarted | ev.RunStarted):
                break
        return None

    def catch_up(self, records: list[JournalRecord]) -> bool:
        """Fold ``records`` (appended by another engine) onto the live state, if all are
        main-line events of :data:`LIVE_FOLDS`; then the read states are the checkpoint's,
        as on a fresh engine. False (nothing folded) for any other: the caller folds the
        whole journal on a fresh engine instead."""
        by_id = {inv.id: inv for inv in self.run.invocations if not inv.is_child}
        for record in records:
            event = record.event
            inv_id: str | None = getattr(event, "invocation_id", None)
            if not isinstance(event, LIVE_FOLDS) or (inv_id is not None and inv_id not in by_id):
                return False
        for record in records:
            self._fold(record.event, by_id)
        self.checkpoints.restore(by_id, replace=True)
        return True

    def _fold(self, event: ev.Event, by_id: dict[str, Invocation]) -> None:
        """Apply one journal event to the run's state (resume replays them all).

        The event of an invocation that ``by_id`` lacks (a child whose records a power
        failure took: it is not resumed) changes nothing.
        """
        if isinstance(event, AGENT_EVENTS) or (
            isinstance(event, ev.InvocationStarted) and event.invocation_kind == "child"
        ):
            child = self.tasks.fold(event, by_id)
            if child is not None:
                by_id[child.id] = child
            if not isinstance(event, CALLER_EVENTS):
                return
        inv_id: str | None = getattr(event, "invocation_id", None)
        if inv_id is not None and inv_id not in by_id:
            return
        self.state.context.fold(event)
        self._fold_invocation(event, by_id)
        self._fold_run(event, by_id)

    def _fold_invocation(self, event: ev.Event, by_id: dict[str, Invocation]) -> None:
        """The events that change an invocation."""
        match event:
            case ev.ModelResponseStored():
                inv = by_id[event.invocation_id]
                message = Transcript.from_json({"items": [event.message]}).items[0]
                assert isinstance(message, AssistantMessage)
                inv.add_turn(message)
                if not inv.is_child:
                    self.state.round_stored(event.round)
            case ev.ToolCallRequested():
                by_id[event.invocation_id].call_requested(event.call_id)
            case ev.ToolResultStored():
                inv = by_id[event.invocation_id]
                if not isinstance(event.gate, UnsetType):  # older journals lack it
                    inv.gate.restore(event.gate)
                result = {"type": "result", **event.result}
                item = Transcript.from_json({"items": [result]}).items[0]
                assert isinstance(item, ToolResultMessage)
                inv.add_result(item)
                self.tasks.fold_result(event.result)
            case ev.ReminderAdded() | ev.TaskResultsInjected():
                inv = by_id[event.invocation_id]
                inv.add_user(UserMessage(event.text))
                if inv.is_child:
                    self.tasks.remind(inv)
            case ev.TaskAwaitWaiting():
                by_id[event.invocation_id].gate.restore(event.gate)

    def _fold_run(self, event: ev.Event, by_id: dict[str, Invocation]) -> None:
        """The events that change the run's counters, or where its main line stands."""
        state = self.state
        match event:
            case ev.InvocationStarted():
                state.started(by_id[event.invocation_id])
            case ev.CommitRequested():
                state.commit_journaled(event)
            case ev.CommitConfirmed():
                state.confirm_commit(event.index, event.floor, auto=event.auto)
                state.commit_settled()
            case ev.AutoCommitCandidate():
                published = state.published_round if event.round is None else event.round
                state.set_candidate(event.candidate, published)
            case ev.FinishAccepted():
                state.stand_at(Finished())
            case ev.HandoffAccepted():
                state.stand_at(HandedOff(by_id[event.to_invocation_id]))

    def reconcile_commit(self) -> None:
        """A commit journaled as requested but not confirmed: ask the chat file."""
        state = self.state
        pending = state.pending_commit
        chat = self.run.chat
        if pending is None or chat is None:
            return
        index = pending.index
        current = chat.repository.load()
        floor = find_run_message(current, self.run.id)
        applied = 0
        if floor is not None:
            meta = current.messages[floor].extra.get("agent") or {}
            applied = int(meta.get("commits", 1))
        if applied == index:
            state.confirm_commit(index, floor, auto=pending.auto)
            state.confirm_on_resume(pending.call_id, pending.path)
            self.journal.write(
                ev.CommitConfirmed(
                    call_id=pending.call_id,
                    index=index,
                    floor=floor,
                    reconciled=True,
                    auto=pending.auto,
                )
            )
        elif applied == index - 1:
            state.commit_not_applied(index)
            self.journal.write(ev.CommitNotApplied(call_id=pending.call_id, index=index))
        else:
            raise ResumeRefused(
                f"commit {index} of run {self.run.id}: the chat shows {applied} commits; "
                "its outcome cannot be confirmed"
            )
        state.commit_settled()
