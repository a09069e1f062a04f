"""The run loop: prompt → model → calls in order → results → next round, until finish.

One :class:`Engine` drives one run. Per round it asks the gateway for a
response (stored in ``model-responses/round-NNN.json`` before it is used),
runs the turn's calls in order through the invocation's gate (each call sees
the effects of those before), pairs every call with a result, and feeds the
results back. Each step returns a :data:`~tavern_agent.runtime.turns.Next`
value (another round, finished, handed off, stopped) that the loop acts on;
each call's effect is applied by the handler registered for its type; the
refusal and finishing rules are in :mod:`tavern_agent.runtime.policy`.

Every step is journaled; with the checkpoint this lets :meth:`Engine.resume`
continue a killed run: stored responses are not requested again, calls with
a stored result are not run again, a call that started without a result gets
the "outcome unknown: check state before repeating" result, and a commit whose outcome the journal
does not know is confirmed (or not) from the chat file itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tavern_agent import run_layout
from tavern_agent.chat.repository import CommitReceipt, find_run_message
from tavern_agent.core.arguments import MISSING
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.results import (
    AgentToolEffect,
    AgentToolResult,
    AwaitRequested,
    CommitRequested,
    DelegateRequested,
    FilePatched,
    FileWritten,
    Finish,
    HandoffAccepted,
    TaskReturned,
)
from tavern_agent.core.tool_ids import HANDOFF
from tavern_agent.fsutil import AlreadyWritten, write_once
from tavern_agent.providers.gateway import (
    ModelError,
    ModelGateway,
    ModelReply,
    ModelRequest,
    reply_from_json,
    reply_to_json,
)
from tavern_agent.providers.transcript import (
    AssistantMessage,
    RecordedCall,
    ToolResultMessage,
    Transcript,
    UserMessage,
    outcome_unknown_result,
    truncated_result,
)
from tavern_agent.runtime.agents import (
    AgentTask,
    AgentTasks,
    AwaitingTasks,
    ProfileSource,
)
from tavern_agent.runtime.checkpoint import load_checkpoint, save_checkpoint
from tavern_agent.runtime.invocation import Invocation
from tavern_agent.runtime.journal import Event, Journal, Listener, read_events
from tavern_agent.runtime.persist import PersistStore
from tavern_agent.runtime.policy import (
    AUTO_PUBLISH_REASON,
    after_finish_result,
    budget_stop,
    cancelled_result,
    candidate_after,
    confirmed_commit_result,
    finish_refusal,
    rounds_stop,
    second_handoff_result,
    should_auto_publish,
    silent_task_failure,
    task_return_reminder,
    task_rounds_failure,
)
from tavern_agent.runtime.prompt import text_turn_reminder
from tavern_agent.runtime.run import Run
from tavern_agent.runtime.turns import (
    Awaiting,
    Finished,
    HandedOff,
    Next,
    NextCall,
    NextRound,
    Stopped,
)
from tavern_agent.tools.snapshot import ToolBinding
from tavern_agent.workspace.read_state import reads_from_json, reads_to_json
from tavern_agent.workspace.roots import MESSAGE_BODY
from tavern_agent.workspace.store import WorkspaceEscape

TERMINAL = {
    "run_completed": "completed",
    "run_partial_success": "partial_success",
    "run_failed": "failed",
    "run_cancelled": "cancelled",
}
# The tasks' events, folded by AgentTasks (a child's invocation_started too). The
# last two also change the caller's invocation (its transcript, its gate counts),
# which the engine's own fold applies after.
AGENT_EVENTS = frozenset(
    {"task_started", "task_finished", "task_results_injected", "task_await_waiting"}
)
CALLER_EVENTS = frozenset({"task_results_injected", "task_await_waiting"})
# Raw arguments up to this size are journaled inline; larger ones get a file.
INLINE_ARGUMENTS_CHARS = 4_096
# An effect handler: (invocation, call, binding, result, effect, failed calls of the
# turn so far) -> the result the model sees, and what happens next (None: go on).
EffectHandler = Callable[
    [Invocation, RecordedCall, ToolBinding, AgentToolResult, Any, Sequence[str]],
    Awaitable[tuple[AgentToolResult, Next | None]],
]


class ResumeRefused(RuntimeError):
    """The run cannot continue: an effect's outcome cannot be confirmed."""


@dataclass(frozen=True, slots=True)
class RunResult:
    run_id: str
    status: str  # completed, partial_success, failed, cancelled
    rounds: int
    commits: int
    error_code: str | None = None
    message: str = ""
    floor: int | None = None  # the chat floor this run's commits wrote
    final_text: str | None = None  # a session run's answer

    @classmethod
    def from_event(cls, event: Event) -> RunResult:
        p = event["payload"]
        return cls(
            event["runId"],
            TERMINAL[event["type"]],
            int(p.get("rounds", 0)),
            int(p.get("commits", 0)),
            p.get("errorCode"),
            p.get("message", ""),
            p.get("floor"),
            p.get("finalText"),
        )


def write_audit(path: Path, data: bytes) -> None:
    """Create an audit file once, atomically (temp file + link), without an fsync.

    The journal, which is fsync'd, carries what resume needs inline (each
    assistant message and each result), so an audit file lost to a power
    failure loses no run state; a killed process loses nothing at all.
    """
    write_once(path, data, durable=False)


def _first_line(text: str, limit: int = 200) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _failed_names(inv: Invocation, turn: AssistantMessage) -> list[str]:
    """Names of the calls of ``turn`` whose stored result is an error."""
    names = {rc.call_id: str(rc.name) for rc in turn.calls}
    failed: list[str] = []
    for item in reversed(inv.transcript.items):
        if item is turn:
            break
        if isinstance(item, ToolResultMessage) and item.result.is_error:
            failed.append(names.get(item.result.call_id, "?"))
    return failed[::-1]


def _raw_json(raw: Any) -> Any:
    if raw is MISSING:
        return {"missing": True}
    if isinstance(raw, bytes):
        return {"bytes": raw.decode("utf-8", "replace")}
    return {"raw": raw}


class Engine:
    """Drives one run with one gateway; ``listeners`` see every journal event."""

    def __init__(
        self,
        run: Run,
        gateway: ModelGateway,
        *,
        listeners: tuple[Listener, ...] = (),
        fsync: bool = True,
        profiles: ProfileSource | None = None,
        background_children: bool = True,
    ) -> None:
        self.run = run
        self.gateway = gateway
        self.journal = Journal(run.run_dir / run_layout.JOURNAL_FILE, run.id, fsync=fsync)
        self.journal.listeners.extend(listeners)
        self.rounds = 0
        self.commits_requested = 0
        self.commits_confirmed = 0
        self.explicit_commits = 0  # commits made by a commit call (not auto-published)
        self.candidate = False  # the message body was edited since the last publish
        self.published_round = 0  # the last round whose end auto-published the body
        self.floor: int | None = None
        self.current: Invocation = run.invocations[-1]
        self.confirmed_calls: dict[str, str] = {}  # commit call id → path, confirmed on resume
        self.resume_at: Next | None = None  # where the journal's fold says the run stands
        self.pending_commit: dict[str, Any] | None = None
        # A durable engine's host drives delegated children itself (step_task).
        self.agents = AgentTasks(
            self, profiles or ProfileSource(run.data.path), background=background_children
        )
        self._repeatable = run.assembly.catalog.builtins.repeatable
        self._saved_state: dict[str, Any] | None = None  # the checkpoint last written
        # True once this engine's state is the fold of the journal (it started the run,
        # folded it, or took a step): the next step_once need not fold it again.
        self._live = False
        self._effects: dict[type, EffectHandler] = {
            CommitRequested: self._on_commit,
            DelegateRequested: self._on_agent,
            AwaitRequested: self._on_agent,
            TaskReturned: self._on_agent,
            HandoffAccepted: self._on_handoff,
            Finish: self._on_finish,
        }

    # ------------------------------------------------------------ entry points

    async def start(self) -> RunResult:
        try:
            self.journal.append("run_started", self._started_payload())
            self._invocation_started(self.current)
        except OSError as exc:
            return self._storage_failed(exc)
        return await self._execute(self.current)

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

    async def revise(self, instruction: str) -> RunResult:
        """Run an output revision: a new invocation on the same snapshot."""
        self._rebuild()
        inv = self.run.revise(instruction)
        self.current = inv
        self._invocation_started(inv)
        return await self._execute(inv)

    async def resume(self) -> RunResult:
        """Continue a run that stopped without an outcome (see the module docstring)."""
        ended = self._rebuild()
        if ended is not None:
            return ended
        inv = self.current
        try:
            self._reconcile_commit()
            unknown = [c for c in inv.pending_calls() if c in inv.requested]
            self.journal.append(
                "run_resumed",
                {
                    "invocationId": inv.id,
                    "rounds": self.rounds,
                    "commits": self.commits_confirmed,
                    "pendingCalls": inv.pending_calls(),
                    "outcomeUnknown": [c for c in unknown if c not in self.confirmed_calls],
                },
            )
        except OSError as exc:
            return self._storage_failed(exc)
        self.agents.restart()  # the children that were running go on too
        return await self._execute(inv, self.resume_at)

    async def step_once(
        self,
        *,
        cancel: bool = False,
        end_when_cancelled: bool = True,
        one_call: bool = False,
        call_id: str | None = None,
    ) -> Next | NextCall | Awaiting | RunResult:
        """Do one step of the run; a :class:`RunResult` once it has ended.

        A step is one model request, or one turn's calls. With ``one_call`` it
        is one model request (``call_id`` None) or the one call ``call_id`` of
        the open turn (see :meth:`_one_step`), and a :class:`NextCall` says
        which call runs next; the local engine runs whole turns.

        The unit of work of a durable engine (one activity each): the state is
        the fold of the journal, so any worker can take the next step. A fresh
        engine folds the journal first; one that took the previous step itself
        (:attr:`live`, a worker's cached engine) goes on from its state. A run with
        an empty journal is started; a step cut off before its end is finished as
        :meth:`resume` would (open calls paired, a pending commit confirmed from
        the chat file), without a ``run_resumed`` event. A handoff starts its
        target here; Finished and Stopped end the run. ``cancel`` ends the run as
        cancelled instead (its open calls paired), unless it had ended already.

        A step whose task is cancelled ends the run as cancelled too, unless
        ``end_when_cancelled`` is false: then it stops and leaves the journal as
        a lost process would (a durable engine's step is also cancelled when its
        worker stops or is taken as lost, and the run then goes on elsewhere;
        a cancelled run is ended by a ``cancel`` step).

        With ``background_children=False`` an ``agent.await`` call that would
        wait ends the step instead: the :class:`Awaiting` value names the tasks;
        the host runs the next step once they ended or the timeout passed.
        """
        try:
            ended = self._prepare()
            if ended is not None:
                return ended
            if cancel:
                raise asyncio.CancelledError
            inv, step_at = self.current, self.resume_at
            self.resume_at = None  # acted on now; a live engine's next step must not repeat it
            step: Next | NextCall
            if one_call:
                step = await self._one_step(inv, step_at, call_id)
            elif step_at is None:
                step = await self._step(inv)
            else:  # the journal ended after a finish or a handoff was accepted
                turn = inv.last_turn()
                if turn is not None and inv.pending_calls():
                    await self._run_calls(inv, turn)
                step = step_at
            if isinstance(step, Finished):
                return self._complete(step.final_text)
            if isinstance(step, Stopped):
                return self._fail(step.code, step.message)
            if isinstance(step, HandedOff):
                self.current = step.target
                self._invocation_started(step.target)
            return step
        except AwaitingTasks as waiting:
            return Awaiting(waiting.call_id, waiting.task_ids, waiting.mode, waiting.timeout_ms)
        except asyncio.CancelledError:
            if not cancel and not end_when_cancelled:
                raise
            self._pair_pending(self.current, cancelled=True)
            self._end("run_cancelled", ErrorCode.RUN_CANCELLED, "The run was cancelled.")
            if not cancel:
                raise
            return RunResult(
                self.run.id,
                "cancelled",
                self.rounds,
                self.commits_confirmed,
                ErrorCode.RUN_CANCELLED.value,
                "The run was cancelled.",
                self.floor,
            )
        except ModelError as exc:
            return self._fail(ErrorCode.MODEL_REQUEST_FAILED, str(exc))
        except (OSError, WorkspaceEscape) as exc:
            return self._storage_failed(exc)

    def _prepare(self) -> RunResult | None:
        """Make the state the journal's fold (a step's start); the result of an ended run."""
        if self.journal.seq == 0:
            self.journal.append("run_started", self._started_payload())
            self._invocation_started(self.current)
        elif not self._live:
            ended = self._rebuild()
            if ended is not None:
                return ended
            self._reconcile_commit()
        self._live = True
        return None

    async def step_task(self, task_id: str) -> str | None:
        """One step of a delegated task (durable engines); its status once it has ended.

        A child workflow's unit of work: one model request of the task, or its
        open turn's next call (as :meth:`step_once` with ``one_call``; the turn's
        end follows its last call). Like :meth:`step_once`, it folds the journal first when this
        engine did not take the previous step of the run. A task that the fold
        does not know (its records lost to a power failure) reads as failed.
        """
        self._prepare()
        task = self.agents.tasks.get(task_id)
        if task is None:
            return "failed"
        if task.live:
            await self._child_step(task, one_call=True)
        return None if task.live else task.status

    @property
    def live(self) -> bool:
        """Whether the engine's state is the fold of the journal as this engine wrote it."""
        return self._live

    def close(self) -> None:
        if self.run.chat is not None:
            self.run.chat.settle()
        self.journal.close()

    # ------------------------------------------------------------ the loop

    def _invocation_started(self, inv: Invocation) -> None:
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
            self._checkpoint()

    invocation_started = _invocation_started

    def pair_pending(self, inv: Invocation) -> None:
        """Pair a stopped invocation's open calls (a child cancelled with its run)."""
        self._pair_pending(inv, cancelled=True)

    def cancel_task(self, task_id: str) -> bool:
        """Stop one delegated task; its caller sees it as failed."""
        return self.agents.cancel(task_id)

    async def _execute(self, inv: Invocation, first: Next | None = None) -> RunResult:
        try:
            return await self._drive(inv, first)
        except asyncio.CancelledError:
            self._pair_pending(self.current, cancelled=True)
            self._end("run_cancelled", ErrorCode.RUN_CANCELLED, "The run was cancelled.")
            raise
        except ModelError as exc:
            return self._fail(ErrorCode.MODEL_REQUEST_FAILED, str(exc))
        except (OSError, WorkspaceEscape) as exc:
            return self._storage_failed(exc)

    def _storage_failed(self, exc: Exception) -> RunResult:
        return self._fail(ErrorCode.RUN_STORAGE_FAILED, f"{type(exc).__name__}: {exc}")

    async def _drive(self, inv: Invocation, first: Next | None) -> RunResult:
        step: Next | NextCall  # a NextCall only from a step of one call; never here
        if first is not None:  # resumed where the journal ended: pair what was cut off
            turn = inv.last_turn()
            if turn is not None and inv.pending_calls():
                await self._run_calls(inv, turn)
            step = first
        else:
            step = await self._step(inv)
        while True:
            if isinstance(step, Finished):
                return self._complete(step.final_text)
            if isinstance(step, Stopped):
                return self._fail(step.code, step.message)
            if isinstance(step, HandedOff):  # the caller's part ended; the target goes on
                inv = self.current = step.target
                self._invocation_started(inv)
            step = await self._step(inv)

    async def _one_step(
        self, inv: Invocation, step_at: Next | None, call_id: str | None
    ) -> Next | NextCall:
        """One model request (``call_id`` None), or the open turn's call ``call_id``.

        The call runs only if it is the turn's next call without a result: a
        retried step never runs a call it was not asked for. The turn's end
        (auto-publish, the budget stop, the journal barrier) follows its last
        call in the same step; a step whose call has a result already does the
        turn's end again, which changes nothing if it was done. A model step
        asks nothing while calls are open (its reply was stored before the step
        was cut off): it says which call runs next.
        """
        turn = inv.last_turn()
        if turn is not None and any(rc.call_id == call_id for rc in turn.calls):
            return await self._run_calls(inv, turn, only=call_id, after=step_at)
        pending = inv.pending_calls()
        if pending:
            self.resume_at = step_at
            return NextCall(pending[0])
        if step_at is not None:  # a finish or a handoff accepted at the turn's end
            return step_at
        if call_id is not None:  # the call's turn has ended (a handoff's target goes on)
            return NextRound()
        step = await self._step(inv)
        pending = inv.pending_calls()
        return NextCall(pending[0]) if isinstance(step, NextRound) and pending else step

    async def _step(self, inv: Invocation) -> Next | NextCall:
        """One step of a root invocation: run its open turn, or ask the model again."""
        turn = inv.last_turn()
        if turn is not None and inv.pending_calls():
            return await self._run_calls(inv, turn)
        last = inv.transcript.items[-1] if inv.transcript.items else None
        if isinstance(last, AssistantMessage) and not last.calls:
            if self.run.scene is Scene.SESSION:
                return Finished(last.text)
            self._remind(inv, last)
        stop = rounds_stop(inv.round, (inv.profile or self.run.profile).limits.max_rounds)
        if stop is not None:
            return stop
        self.agents.inject(inv)
        await self._request(inv)
        return NextRound()

    async def drive_child(self, task: AgentTask) -> None:
        """A delegated task's own loop, in the background, until it returns or ends."""
        try:
            while task.live:
                await self._child_step(task)
        except asyncio.CancelledError:
            if task.live:  # stopped on its own, not with the run
                self._pair_pending(task.inv, cancelled=True)
                self.agents.fail(task, "cancelled", "The task was stopped before it returned.")
            raise

    async def _child_step(self, task: AgentTask, *, one_call: bool = False) -> None:
        """One step of a delegated task: its open turn's calls (``one_call``: the next
        one), or one model request."""
        inv = task.inv
        try:
            turn = inv.last_turn()
            pending = inv.pending_calls()
            if turn is not None and pending:
                await self._run_calls(inv, turn, inv.round, only=pending[0] if one_call else None)
                return
            last = inv.transcript.items[-1]
            if isinstance(last, AssistantMessage) and not last.calls:
                if task.reminded:
                    failure = silent_task_failure(last.text)
                    self.agents.fail(task, failure.reason, failure.summary)
                    return
                self._remind_child(inv)
            rounds_used = task_rounds_failure(inv.round, task.profile.limits.max_rounds)
            if rounds_used is not None:
                self.agents.fail(task, rounds_used.reason, rounds_used.summary)
                return
            await self._request(inv)
        except ModelError as exc:
            self.agents.fail(task, "model_error", f"The agent's model failed: {exc}")
        except (OSError, WorkspaceEscape) as exc:
            self.agents.fail(task, "storage_error", f"{type(exc).__name__}: {exc}")

    def _remind_child(self, inv: Invocation) -> None:
        text = task_return_reminder(inv.snapshot)
        self.journal.append(
            "reminder_added",
            {"invocationId": inv.id, "round": inv.round, "savedTo": None, "text": text},
            level="warn",
        )
        inv.transcript = inv.transcript.append(UserMessage(text))
        self.agents.by_inv[inv.id].reminded = True

    async def _request(self, inv: Invocation) -> None:
        child: int | None = None
        if inv.is_child:  # children count their own rounds and store their own responses
            number = inv.round + 1
            child = [i.id for i in self.run.invocations if i.is_child].index(inv.id)
            path = self.run.run_dir / run_layout.model_response(number, inv.id)
        else:
            number = self.rounds + 1
            path = self.run.run_dir / run_layout.model_response(number)
        if path.exists():  # stored before an interruption: never ask twice
            reply = reply_from_json(json.loads(path.read_text(encoding="utf-8")))
        else:
            self.journal.append(
                "model_request",
                {
                    "round": number,
                    "invocationId": inv.id,
                    "snapshotId": inv.snapshot.id,
                    "items": len(inv.transcript.items),
                },
            )
            request = ModelRequest(self.run.id, inv.id, number, inv.transcript, inv.snapshot, child)
            started = time.monotonic()
            reply = await self.gateway.respond(request)
            reply = ModelReply(reply.response, reply.raw, reply.attempts)
            record = reply_to_json(request, reply) | {
                "elapsedMs": round((time.monotonic() - started) * 1000, 1)
            }
            with contextlib.suppress(AlreadyWritten):
                write_audit(path, json.dumps(record, ensure_ascii=False).encode("utf-8"))
        message = reply.response.message
        if not inv.is_child:
            self.rounds = number
        inv.round += 1
        self.journal.append(
            "model_response_stored",
            {
                "round": number,
                "invocationId": inv.id,
                "ref": path.relative_to(self.run.run_dir).as_posix(),
                "message": Transcript((message,)).to_json()["items"][0],
                "finish": message.finish.value,
                "calls": len(message.calls),
                "usage": dict(reply.response.usage),
            },
        )
        inv.transcript = inv.transcript.append(message)

    async def _run_calls(
        self,
        inv: Invocation,
        message: AssistantMessage,
        number: int | None = None,
        *,
        only: str | None = None,
        after: Next | None = None,
    ) -> Next | NextCall:
        """Run a turn's calls in order (those without a result yet); say what comes next.

        ``only`` runs that call alone: the calls stop at the first one without
        a result that is another, which is returned as the :class:`NextCall`;
        the turn's end runs once no call is left. ``after`` is a finish or a
        handoff accepted by an earlier call of the turn (in an earlier step).
        """
        number = self.rounds if number is None else number
        calls = message.calls
        if message.finish.truncated:
            for rc in calls:
                if rc.call_id not in inv.resulted:
                    self._store(inv, rc, truncated_result(rc), number, 0.0)
            return self._turn_end(inv, number, NextRound())
        last_index = len(calls) - 1
        # Calls of this turn that failed, by name (results stored before an interruption too).
        failed = _failed_names(inv, message) if inv.resulted else []
        # One handoff per turn: a second is refused without disturbing the first,
        # which counts as the turn's last call when only handoffs follow it.
        handoff = inv.snapshot.name_of(HANDOFF)
        handoffs_seen = 0
        step: Next = NextRound() if after is None else after
        for index, rc in enumerate(calls):
            is_handoff = handoff is not None and rc.name == handoff
            handoffs_seen += is_handoff
            if rc.call_id in inv.resulted:
                continue
            if only is not None and rc.call_id != only:
                return self._call_end(inv, step, rc.call_id)
            if (inv.id, rc.call_id) in self.agents.awaiting:  # a durable step left it waiting
                result = await self._continue_await(inv, rc)
                self._store(inv, rc, result, number, 0.0)
                if result.is_error:
                    failed.append(str(rc.name))
                continue
            if rc.call_id in inv.requested:  # started before an interruption
                path = self.confirmed_calls.get(rc.call_id)
                result = (
                    confirmed_commit_result(rc, path)
                    if path is not None
                    else outcome_unknown_result(rc)
                )
                self._store(inv, rc, result, number, 0.0)
                continue
            only_handoffs_after = is_handoff and all(c.name == handoff for c in calls[index + 1 :])
            result, after = await self._run_call(
                inv,
                rc,
                number,
                failed,
                is_last=index == last_index or only_handoffs_after,
                second_handoff=is_handoff and handoffs_seen > 1,
            )
            if result.is_error:
                failed.append(str(rc.name))
            if after is not None:
                step = after
        return self._turn_end(inv, number, step)

    def _call_end(self, inv: Invocation, step: Next, next_call: str) -> NextCall:
        """The end of a step of one call, when more calls of the turn are open."""
        # An accepted finish or handoff waits for the turn's end, as the journal's
        # fold would find it on a fresh engine. (A delegated task's step never
        # touches where the run's main line stands.)
        if not inv.is_child:
            self.resume_at = None if isinstance(step, NextRound) else step
        # The step's end is recorded elsewhere (a durable engine's activity completes)
        # and the next call may run on a fresh engine: the journal must be durable and
        # the read states saved now, not at the turn's end.
        self.journal.sync()
        self._checkpoint()
        return NextCall(next_call)

    def _turn_end(self, inv: Invocation, number: int, step: Next) -> Next:
        """Auto-publish and the no-stranding rule (root invocations), then a checkpoint."""
        if not inv.is_child:
            if should_auto_publish(
                foreground=self.run.foreground,
                explicit_commits=self.explicit_commits,
                candidate=self.candidate,
                published_round=self.published_round,
                round=number,
            ):
                self._auto_publish(number)
            stop = budget_stop(
                inv.snapshot,
                inv.gate.calls_used,
                foreground=self.run.foreground,
                explicit_commits=self.explicit_commits,
            )
            if stop is not None and isinstance(step, NextRound):
                step = stop
        self.journal.sync()  # the end of a turn: one barrier for its repeatable calls
        self._checkpoint()
        return step

    async def _run_call(
        self,
        inv: Invocation,
        rc: RecordedCall,
        number: int,
        failed: Sequence[str],
        *,
        is_last: bool,
        second_handoff: bool = False,
    ) -> tuple[AgentToolResult, Next | None]:
        snapshot = inv.snapshot
        name = rc.name if isinstance(rc.name, str) else None
        binding = snapshot.by_name(name) if name is not None else None
        self.journal.append(
            "tool_call_requested",
            {
                "round": number,
                "invocationId": inv.id,
                "callId": rc.call_id,
                "toolId": None if binding is None else str(binding.tool_id),
                "source": None if binding is None else self.run.assembly.source_of(binding.tool_id),
                "snapshotId": snapshot.id,
                "name": rc.name,
            }
            | self._arguments_record(inv, rc, number),
        )
        inv.requested.add(rc.call_id)
        started = time.monotonic()
        after: Next | None = None
        if binding is not None and second_handoff:
            result = second_handoff_result(rc, binding)
        elif binding is not None and binding.tool_id in inv.gate.finishing and not is_last:
            result = after_finish_result(rc, binding)
        else:
            # A call whose effect must not be repeated blindly is preceded by a
            # barrier: after a power loss the journal then shows it as started.
            self.journal.append(
                "tool_call_started",
                {"callId": rc.call_id, "invocationId": inv.id, "round": number},
                sync=binding is None or binding.tool_id not in self._repeatable,
            )
            executed = await inv.gate.handle(rc.call, round=number)
            result, effect = executed.result, executed.effect
            handler = self._effects.get(type(effect))
            if handler is not None:
                assert binding is not None  # effects come only from dispatched tools
                result, after = await handler(inv, rc, binding, result, effect, failed)
            if not inv.is_child:
                self._note_candidate(result, effect)
            self._store(inv, rc, result, number, time.monotonic() - started)
            if isinstance(effect, FileWritten | FilePatched | CommitRequested):
                self._checkpoint()  # state-changing effects are followed by a checkpoint
            return result, after
        self._store(inv, rc, result, number, time.monotonic() - started)
        return result, None

    async def _continue_await(self, inv: Invocation, rc: RecordedCall) -> AgentToolResult:
        """The result of an await call whose waiting its host did (it has no effect to repeat)."""
        binding = inv.snapshot.by_name(str(rc.name))
        assert binding is not None  # it was dispatched to the await tool
        effect = self.agents.awaiting[inv.id, rc.call_id]
        # In one process (a durable run resumed locally) the wait blocks as usual.
        return await self.agents.wait(inv, rc, binding, effect, block=self.agents.background)

    def _arguments_record(self, inv: Invocation, rc: RecordedCall, number: int) -> dict[str, Any]:
        """The raw arguments as the journal keeps them: inline, or in a file when large.

        Inline is the common case and writes no file; a large argument (a whole
        chapter for write_file) goes to ``tool-args/`` so the journal stays small.
        """
        raw = _raw_json(rc.call.raw_arguments)
        text = json.dumps(raw, ensure_ascii=False)
        if len(text) <= INLINE_ARGUMENTS_CHARS:
            return {"arguments": raw}
        ref = run_layout.tool_arguments(inv.id, number, rc.call_id)
        record = {"callId": rc.call_id, "name": rc.name} | raw
        with contextlib.suppress(AlreadyWritten):  # written before an interruption
            write_audit(self.run.run_dir / ref, json.dumps(record, ensure_ascii=False).encode())
        return {"argumentsRef": ref}

    # ------------------------------------------------------------ effect handlers

    async def _on_commit(
        self,
        inv: Invocation,
        rc: RecordedCall,
        binding: ToolBinding,
        result: AgentToolResult,
        effect: CommitRequested,
        failed: Sequence[str],
    ) -> tuple[AgentToolResult, Next | None]:
        await self._commit(rc.call_id, effect)
        return result, None

    async def _on_agent(
        self,
        inv: Invocation,
        rc: RecordedCall,
        binding: ToolBinding,
        result: AgentToolResult,
        effect: DelegateRequested | AwaitRequested | TaskReturned,
        failed: Sequence[str],
    ) -> tuple[AgentToolResult, Next | None]:
        return await self.agents.apply(inv, rc, binding, effect), None

    async def _on_handoff(
        self,
        inv: Invocation,
        rc: RecordedCall,
        binding: ToolBinding,
        result: AgentToolResult,
        effect: HandoffAccepted,
        failed: Sequence[str],
    ) -> tuple[AgentToolResult, Next | None]:
        answer, target = self.agents.handoff(inv, rc, binding, effect)
        return answer, None if target is None else HandedOff(target)

    async def _on_finish(
        self,
        inv: Invocation,
        rc: RecordedCall,
        binding: ToolBinding,
        result: AgentToolResult,
        effect: Finish,
        failed: Sequence[str],
    ) -> tuple[AgentToolResult, Next | None]:
        refusal = finish_refusal(
            rc,
            inv.snapshot,
            is_child=inv.is_child,
            foreground=self.run.foreground,
            explicit_commits=self.explicit_commits,
            failed_before=failed,
        )
        if refusal is not None:
            return refusal, None
        self.journal.append(
            "finish_accepted",
            {"callId": rc.call_id, "invocationId": inv.id, "reason": effect.reason},
        )
        return result, Finished()

    # ------------------------------------------------------------ commits

    def _note_candidate(self, result: AgentToolResult, effect: AgentToolEffect) -> None:
        candidate = candidate_after(result, effect, self.candidate)
        if candidate != self.candidate:
            self.candidate = candidate
            self.journal.append("auto_commit_candidate", {"candidate": candidate})

    def _auto_publish(self, number: int) -> None:
        """Publish the message body (the policy decided it is due this round)."""
        self.published_round = number
        self.candidate = False
        self.journal.append("auto_commit_candidate", {"candidate": False, "round": number})
        try:
            if not self.run.workspace.read_bytes(MESSAGE_BODY).strip():
                return  # an emptied body is not a reply
        except FileNotFoundError:  # removed by a later call of the turn
            return
        chat = self.run.chat
        if chat is None:
            return
        call_id = f"auto_round_{number:03d}"
        effect = CommitRequested(MESSAGE_BODY, "replace", AUTO_PUBLISH_REASON)
        index = self._commit_requested(call_id, effect, auto=True)
        receipt = chat.apply_effect(effect, self.run.workspace)
        self._commit_confirmed(call_id, index, receipt, auto=True)

    async def _commit(self, call_id: str, effect: CommitRequested) -> None:
        chat = self.run.chat
        if chat is None:  # the commit tool refuses without a chat; defensive
            return
        index = self._commit_requested(call_id, effect, auto=False)
        receipt = await asyncio.to_thread(chat.apply_effect, effect, self.run.workspace)
        self._commit_confirmed(call_id, index, receipt, auto=False)

    def _commit_requested(self, call_id: str, effect: CommitRequested, *, auto: bool) -> int:
        self.commits_requested += 1
        payload = {
            "callId": call_id,
            "index": self.commits_requested,
            "path": effect.path,
            "mode": effect.mode,
        }
        self.journal.append(
            "commit_requested", payload | ({"auto": True} if auto else {}), sync=True
        )
        return self.commits_requested

    def _commit_confirmed(
        self, call_id: str, index: int, receipt: CommitReceipt, *, auto: bool
    ) -> None:
        self.commits_confirmed = index
        self.explicit_commits += not auto
        self.floor = receipt.floor
        payload = {
            "callId": call_id,
            "index": index,
            "floor": receipt.floor,
            "created": receipt.created,
            "chars": receipt.chars,
        }
        self.journal.append("commit_confirmed", payload | ({"auto": True} if auto else {}))

    def _store(
        self,
        inv: Invocation,
        rc: RecordedCall,
        result: AgentToolResult,
        number: int,
        elapsed: float,
    ) -> None:
        # The journal is the result's record (a long one was spilled to a file in
        # tool-results/ by the gate, and the record holds its preview); the gate's
        # counters ride along so that resume folds them back.
        self.journal.append(
            "tool_result_stored",
            {
                "round": number,
                "invocationId": inv.id,
                "callId": rc.call_id,
                "result": result.to_json(),
                "gate": inv.gate.state(),
            },
        )
        outcome = {
            "callId": rc.call_id,
            "toolId": None if result.tool_id is None else str(result.tool_id),
            "name": rc.name,
            "isError": result.is_error,
            "errorCode": None if result.error_code is None else result.error_code.value,
            "message": _first_line(result.content),
            "elapsedMs": round(elapsed * 1000, 2),
            "resourceRefs": list(result.resource_refs),
        }
        if result.is_error:
            self.journal.append("tool_call_failed", outcome, level="warn")
        else:
            self.journal.append("tool_call_completed", outcome)
        inv.resulted.add(rc.call_id)
        inv.transcript = inv.transcript.append(ToolResultMessage(result))

    def _remind(self, inv: Invocation, message: AssistantMessage) -> None:
        saved = None
        if message.text.strip():
            saved = run_layout.turn_text(self.rounds)
            self.run.workspace.write_atomic(saved, message.text.encode("utf-8"))
        text = text_turn_reminder(inv.snapshot, saved)
        self.journal.append(
            "reminder_added",
            {"invocationId": inv.id, "round": self.rounds, "savedTo": saved, "text": text},
            level="warn",
        )
        inv.transcript = inv.transcript.append(UserMessage(text))
        self._checkpoint()

    def _pair_pending(self, inv: Invocation, *, cancelled: bool) -> None:
        last = inv.last_turn()
        if last is None:
            return
        for rc in last.calls:
            if rc.call_id in inv.resulted:
                continue
            if rc.call_id in inv.requested or not cancelled:
                result = outcome_unknown_result(rc)
            else:
                result = cancelled_result(rc)
            self._store(inv, rc, result, self.rounds, 0.0)

    # ------------------------------------------------------------ endings

    def _summary(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "commits": self.commits_confirmed, "floor": self.floor}

    def _complete(self, final_text: str | None = None) -> RunResult:
        run = self.run
        chat_ws = run.chat_workspace
        if chat_ws is not None and run.persist_base is not None:
            promotion = PersistStore(chat_ws).promote(
                run.workspace.root / "persist", run.persist_base, run.id
            )
            level = "warn" if promotion.status == "conflict" else "info"
            self.journal.append(
                f"persist_{promotion.status}",
                {"version": promotion.version, "sha": promotion.sha, "base": run.persist_base.sha},
                level=level,
            )
        payload = self._summary() | ({"finalText": final_text} if final_text is not None else {})
        self._end("run_completed", None, "", payload)
        return RunResult(
            run.id,
            "completed",
            self.rounds,
            self.commits_confirmed,
            floor=self.floor,
            final_text=final_text,
        )

    def _fail(self, code: ErrorCode, message: str) -> RunResult:
        kind = "run_partial_success" if self.commits_confirmed else "run_failed"
        try:
            self._end(kind, code, message)
        except OSError as exc:
            # A full disk may not take the ending either. The outcome is still reported;
            # the journal shows an interrupted run, which --resume continues.
            if code is not ErrorCode.RUN_STORAGE_FAILED:
                code, message = ErrorCode.RUN_STORAGE_FAILED, f"{type(exc).__name__}: {exc}"
        return RunResult(
            self.run.id,
            TERMINAL[kind],
            self.rounds,
            self.commits_confirmed,
            code.value,
            message,
            self.floor,
        )

    def _end(
        self, kind: str, code: ErrorCode | None, message: str, payload: dict[str, Any] | None = None
    ) -> None:
        self.agents.stop_all("the run ended" if code is None else message.rstrip("."))
        body = payload or self._summary()
        if code is not None:
            body = body | {"errorCode": code.value, "message": message}
        self.journal.append(kind, body, level="info" if code is None else "error", sync=True)
        self._checkpoint()

    # ------------------------------------------------------------ state

    def _checkpoint(self) -> None:
        """Save the read states when they changed (the rest of the state is in the journal)."""
        state = {
            "invocations": {
                inv.id: {"reads": reads_to_json(inv.gate.reads)} for inv in self.run.invocations
            }
        }
        if state == self._saved_state:
            return
        # Not fsync'd: the journal is the record. A checkpoint lost to a power
        # failure is older or missing, which only asks the model to read a file
        # again (a stale read state refuses writes).
        save_checkpoint(self.run.run_dir, state, durable=False)
        self._saved_state = state

    def _rebuild(self) -> RunResult | None:
        """Live state as the fold of the journal's events (plus the checkpoint's gate counts).

        Sets :attr:`resume_at` where the journal left the run (a finish or a handoff
        accepted but not yet acted on). Returns the run's result if it had ended.
        """
        events = read_events(self.run.run_dir / run_layout.JOURNAL_FILE)
        by_id = {inv.id: inv for inv in self.run.invocations}
        for event in events:
            self._fold(event, by_id)
        checkpoint = load_checkpoint(self.run.run_dir)
        if checkpoint is not None:
            for inv_id, state in checkpoint.get("invocations", {}).items():
                found = by_id.get(inv_id)
                if found is None:
                    continue
                if "gate" in state and found.gate.calls_used == 0:  # written by older versions
                    found.gate.restore(state["gate"])
                found.gate.reads.update(reads_from_json(state.get("reads", {})))
        for event in reversed(events):
            if event["type"] in TERMINAL:
                if event["payload"].get("errorCode") == ErrorCode.RUN_STORAGE_FAILED.value:
                    break  # the storage failed, not the run: it goes on once there is room
                return RunResult.from_event(event)
            if event["type"] in ("run_resumed", "invocation_started", "run_started"):
                break
        return None

    def _fold(self, event: Event, by_id: dict[str, Invocation]) -> None:
        """Apply one journal event to the engine's state (resume replays them all)."""
        kind, p = event["type"], event["payload"]
        if kind in AGENT_EVENTS or (kind == "invocation_started" and p.get("kind") == "child"):
            self.agents.fold(kind, p, by_id)
            if kind not in CALLER_EVENTS:
                return
        if "invocationId" in p and p["invocationId"] not in by_id:
            return  # a child whose records a power failure took: it is not resumed
        if kind == "invocation_started":
            self.current = by_id[p["invocationId"]]
            self.resume_at = None
        elif kind == "model_response_stored":
            inv = by_id[p["invocationId"]]
            item = Transcript.from_json({"items": [p["message"]]}).items[0]
            inv.transcript = inv.transcript.append(item)
            inv.round += 1
            if not inv.is_child:
                self.rounds = int(p["round"])
        elif kind == "tool_call_requested":
            by_id[p["invocationId"]].requested.add(p["callId"])
        elif kind == "tool_result_stored":
            inv = by_id[p["invocationId"]]
            if "gate" in p:
                inv.gate.restore(p["gate"])
            item = Transcript.from_json({"items": [{"type": "result", **p["result"]}]}).items[0]
            inv.transcript = inv.transcript.append(item)
            inv.resulted.add(p["callId"])
            self.agents.fold_result(p["result"])
        elif kind in ("reminder_added", "task_results_injected"):
            inv = by_id[p["invocationId"]]
            inv.transcript = inv.transcript.append(UserMessage(p["text"]))
            if inv.is_child:
                self.agents.by_inv[inv.id].reminded = True
        elif kind == "task_await_waiting":
            by_id[p["invocationId"]].gate.restore(p["gate"])
        elif kind == "commit_requested":
            self.commits_requested = int(p["index"])
            self.pending_commit = p
        elif kind == "commit_confirmed":
            self.commits_confirmed = int(p["index"])
            self.explicit_commits += not p.get("auto", False)
            self.floor = p.get("floor")
            self.pending_commit = None
        elif kind == "auto_commit_candidate":
            self.candidate = bool(p["candidate"])
            self.published_round = int(p.get("round", self.published_round))
        elif kind == "finish_accepted":
            self.resume_at = Finished()
        elif kind == "handoff_accepted":
            self.resume_at = HandedOff(by_id[p["toInvocationId"]])

    def _reconcile_commit(self) -> None:
        """A commit journaled as requested but not confirmed: ask the chat file."""
        pending = self.pending_commit
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
            self.commits_confirmed = index
            self.explicit_commits += not pending.get("auto", False)
            self.floor = floor
            self.confirmed_calls[pending["callId"]] = pending["path"]
            auto = {"auto": True} if pending.get("auto") else {}
            self.journal.append(
                "commit_confirmed",
                {"callId": pending["callId"], "index": index, "floor": floor, "reconciled": True}
                | auto,
            )
        elif applied == index - 1:
            self.commits_requested = index - 1
            self.journal.append(
                "commit_not_applied", {"callId": pending["callId"], "index": index}, level="warn"
            )
        else:
            raise ResumeRefused(
                f"commit {index} of run {self.run.id}: the chat shows {applied} commits; "
                "its outcome cannot be confirmed"
            )
        self.pending_commit = None
