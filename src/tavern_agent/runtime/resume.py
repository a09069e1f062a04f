"""Run start and resume: the first events of a run, and its state as the journal's fold.

A run's state is the fold of its journal's events (plus the checkpoint's
read states): the invocations' transcripts, requested and resulted calls and
gate counts, the run's counters, the delegated tasks, and where the main line
stands (a finish or a handoff accepted but not yet acted on). A commit that
the journal shows as requested but not confirmed is confirmed (or not) from
the chat file itself; if the chat file cannot tell, the run is not resumed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tavern_agent import run_layout
from tavern_agent.chat.repository import find_run_message
from tavern_agent.core.errors import ErrorCode
from tavern_agent.providers.transcript import (
    AssistantMessage,
    ToolResultMessage,
    Transcript,
    UserMessage,
)
from tavern_agent.runtime.agents import AgentTasks
from tavern_agent.runtime.checkpoint import Checkpoints
from tavern_agent.runtime.endings import TERMINAL, RunResult
from tavern_agent.runtime.invocation import Invocation
from tavern_agent.runtime.journal import Event, Journal, read_events
from tavern_agent.runtime.run import Run
from tavern_agent.runtime.state import RunState
from tavern_agent.runtime.turns import Finished, HandedOff

# The tasks' events, folded by AgentTasks (a child's invocation_started too). The
# last two also change the caller's invocation (its transcript, its gate counts),
# which the engine's own fold applies after.
AGENT_EVENTS = frozenset(
    {"task_started", "task_finished", "task_results_injected", "task_await_waiting"}
)
CALLER_EVENTS = frozenset({"task_results_injected", "task_await_waiting"})


class ResumeRefused(RuntimeError):
    """The run cannot continue: an effect's outcome cannot be confirmed."""


class Resumer:
    """Starts one run's journal, and rebuilds the run's state from it."""

    def __init__(
        self,
        run: Run,
        journal: Journal,
        state: RunState,
        tasks: AgentTasks,
        checkpoints: Checkpoints,
    ) -> None:
        self.run = run
        self.journal = journal
        self.state = state
        self.tasks = tasks
        self.checkpoints = checkpoints

    # ------------------------------------------------------------ start

    def start(self) -> None:
        """Journal the run's start and its current invocation's."""
        self.journal.append("run_started", self._started_payload())
        self.invocation_started(self.state.current)

    def _started_payload(self) -> dict[str, Any]:
        run = self.run
        return {
            "scene": run.scene.value,
            "profileId": run.profile.id,
            "protocol": run.protocol.value,
            "chatFile": run.record.get("chatFile"),
            "floorCount": None if run.chat is None else run.chat.floor_count,
            "persistBase": None if run.persist_base is None else run.persist_base.sha,
            "model": run.record.get("model"),
        }

    def invocation_started(self, inv: Invocation) -> None:
        """Journal a new invocation (the root, a revision, a handoff's target, a child)."""
        links: dict[str, Any] = {}
        if inv.profile is not None:
            links["agentId"] = inv.profile.id
        if inv.parent_id is not None:
            links |= {"parentInvocationId": inv.parent_id, "taskId": inv.task_id}
        if inv.is_child:  # a child has no prompt file (see Run.add_invocation)
            first = inv.transcript.items[0]
            user = first.text if isinstance(first, UserMessage) else ""
            links["prompt"] = {"system": inv.transcript.system, "user": user}
        self.journal.append(
            "invocation_started",
            {
                "invocationId": inv.id,
                "snapshotId": inv.snapshot.id,
                "kind": inv.kind,
                "revisionOf": inv.revision_of,
                "tools": inv.snapshot.model_names,
                "maxCalls": inv.snapshot.max_calls_per_invocation,
            }
            | links,
        )
        if not inv.is_child:  # a child's start is journaled; its turns checkpoint
            self.checkpoints.save(self.run.invocations)

    def resumed(self) -> None:
        """Journal that the run goes on (after :meth:`rebuild` and :meth:`reconcile_commit`)."""
        inv, state = self.state.current, self.state
        unknown = [c for c in inv.pending_calls() if c in inv.requested]
        self.journal.append(
            "run_resumed",
            {
                "invocationId": inv.id,
                "rounds": state.rounds,
                "commits": state.commits_confirmed,
                "pendingCalls": inv.pending_calls(),
                "outcomeUnknown": [c for c in unknown if c not in state.confirmed_calls],
            },
        )

    # ------------------------------------------------------------ the fold

    def rebuild(self) -> RunResult | None:
        """Live state as the fold of the journal's events (plus the checkpoint's read states).

        Sets where the journal left the main line (a finish or a handoff accepted
        but not yet acted on). Returns the run's result if it had ended.
        """
        events = read_events(self.run.run_dir / run_layout.JOURNAL_FILE)
        by_id = {inv.id: inv for inv in self.run.invocations}
        for event in events:
            self._fold(event, by_id)
        self.checkpoints.restore(by_id)
        for event in reversed(events):
            if event["type"] in TERMINAL:
                if event["payload"].get("errorCode") == ErrorCode.RUN_STORAGE_FAILED.value:
                    break  # the storage failed, not the run: it goes on once there is room
                return RunResult.from_event(event)
            if event["type"] in ("run_resumed", "invocation_started", "run_started"):
                break
        return None

    def _fold(self, event: Event, by_id: dict[str, Invocation]) -> None:
        """Apply one journal event to the run's state (resume replays them all)."""
        kind, p = event["type"], event["payload"]
        if kind in AGENT_EVENTS or (kind == "invocation_started" and p.get("kind") == "child"):
            child = self.tasks.fold(kind, p, by_id)
            if child is not None:
                by_id[child.id] = child
            if kind not in CALLER_EVENTS:
                return
        if "invocationId" in p and p["invocationId"] not in by_id:
            return  # a child whose records a power failure took: it is not resumed
        self._fold_invocation(kind, p, by_id)
        self._fold_run(kind, p, by_id)

    def _fold_invocation(
        self, kind: str, p: Mapping[str, Any], by_id: dict[str, Invocation]
    ) -> None:
        """The events that change an invocation."""
        if kind == "model_response_stored":
            inv = by_id[p["invocationId"]]
            message = Transcript.from_json({"items": [p["message"]]}).items[0]
            assert isinstance(message, AssistantMessage)
            inv.add_turn(message)
            if not inv.is_child:
                self.state.round_stored(int(p["round"]))
        elif kind == "tool_call_requested":
            by_id[p["invocationId"]].call_requested(p["callId"])
        elif kind == "tool_result_stored":
            inv = by_id[p["invocationId"]]
            if "gate" in p:
                inv.gate.restore(p["gate"])
            item = Transcript.from_json({"items": [{"type": "result", **p["result"]}]}).items[0]
            assert isinstance(item, ToolResultMessage)
            inv.add_result(item)
            self.tasks.fold_result(p["result"])
        elif kind in ("reminder_added", "task_results_injected"):
            inv = by_id[p["invocationId"]]
            inv.add_user(UserMessage(p["text"]))
            if inv.is_child:
                self.tasks.remind(inv)
        elif kind == "task_await_waiting":
            by_id[p["invocationId"]].gate.restore(p["gate"])

    def _fold_run(self, kind: str, p: Mapping[str, Any], by_id: dict[str, Invocation]) -> None:
        """The events that change the run's counters, or where its main line stands."""
        state = self.state
        if kind == "invocation_started":
            state.started(by_id[p["invocationId"]])
        elif kind == "commit_requested":
            state.commit_journaled(dict(p))
        elif kind == "commit_confirmed":
            state.confirm_commit(int(p["index"]), p.get("floor"), auto=p.get("auto", False))
            state.commit_settled()
        elif kind == "auto_commit_candidate":
            state.set_candidate(bool(p["candidate"]), int(p.get("round", state.published_round)))
        elif kind == "finish_accepted":
            state.stand_at(Finished())
        elif kind == "handoff_accepted":
            state.stand_at(HandedOff(by_id[p["toInvocationId"]]))

    def reconcile_commit(self) -> None:
        """A commit journaled as requested but not confirmed: ask the chat file."""
        state = self.state
        pending = state.pending_commit
        chat = self.run.chat
        if pending is None or chat is None:
            return
        index = int(pending["index"])
        current = chat.repository.load()
        floor = find_run_message(current, self.run.id)
        applied = 0
        if floor is not None:
            meta = current.messages[floor].extra.get("agent") or {}
            applied = int(meta.get("commits", 1))
        if applied == index:
            state.confirm_commit(index, floor, auto=bool(pending.get("auto", False)))
            state.confirm_on_resume(pending["callId"], pending["path"])
            auto = {"auto": True} if pending.get("auto") else {}
            self.journal.append(
                "commit_confirmed",
                {"callId": pending["callId"], "index": index, "floor": floor, "reconciled": True}
                | auto,
            )
        elif applied == index - 1:
            state.commit_not_applied(index)
            self.journal.append(
                "commit_not_applied", {"callId": pending["callId"], "index": index}, level="warn"
            )
        else:
            raise ResumeRefused(
                f"commit {index} of run {self.run.id}: the chat shows {applied} commits; "
                "its outcome cannot be confirmed"
            )
        state.commit_settled()
