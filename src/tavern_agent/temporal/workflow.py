"""The run workflow: deterministic, no I/O; each model request and each tool call is an activity.

A delegated task is a child workflow (:class:`TaskWorkflow`) whose steps are
the ``task_step`` activity; the run's workflow starts one for each task its
activities report live, and waits on them when a call ends at an ``agent_await``.

Kept free of project imports, I/O, clocks and randomness, so that it is
deterministic by construction: the workflows run outside the SDK's sandbox (which
re-imports a workflow's modules for each run and checks each payload through it,
about a fifth of a worker's CPU per run), and the tests replay recorded histories.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError
from temporalio.workflow import ChildWorkflowHandle, ParentClosePolicy

T = TypeVar("T")
WORKFLOW_NAME = "tavern-agent-run"
TASK_WORKFLOW_NAME = "tavern-agent-task"
MODEL_ACTIVITY = "model_request"
CALL_ACTIVITY = "tool_call"
CANCEL_ACTIVITY = "run_cancel"
TASK_STEP_ACTIVITY = "task_step"
# Workflows started before the activity per call ran one activity per step (a model
# request, or a whole turn's calls); their histories replay on that loop.
STEP_ACTIVITY = "run_step"
PER_CALL_PATCH = "activity-per-call"
# Model requests and quick calls run as local activities (on the worker that runs the
# workflow, no round trip through the server); histories from before replay without.
LOCAL_PATCH = "local-activities"
# The loop a run's input asks for (RunInput.loop). Runs started with ``loop`` 1 or more
# take the activity per call and local activities from their input alone: no patch
# markers, nor the search attribute the SDK upserts with each (4 of the example run's
# 10 history events). Inputs without it (0: runs started before) go by the markers.
LOOP = 1
DEFAULT_TASK_QUEUE = "tavern-agent"
# Errors that a retry on another worker cannot fix (the run's state is inconsistent).
NOT_RETRIED = ["ResumeRefused", "RunNotFound"]
STEP_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    non_retryable_error_types=NOT_RETRIED,
)


@dataclass(frozen=True)
class RunInput:
    """What the workflow needs: the run folder (on the shared data root)."""

    run_dir: str
    # A worker that sends no heartbeat for this long is taken as dead: the step
    # is retried (from the journal) on another worker.
    heartbeat_seconds: float = 10.0
    # The call the run's next activity runs (None: a model request), when a
    # workflow continues as new between two calls of a turn.
    next_call: str | None = None
    # False: one activity per step (a model request, or a whole turn's calls), the
    # loop of workflows started before the activity per call; fewer round trips.
    activity_per_call: bool = True
    # Model requests and quick calls as local activities (see LOCAL_PATCH); False:
    # each is an activity the server schedules, as before.
    local_activities: bool = True
    # Whether ``next_call`` may run as a local activity (StepOutcome.local).
    next_local: bool = False
    # LOOP for runs started by this version (0 before it: see LOOP).
    loop: int = 0


@dataclass(frozen=True)
class CallInput:
    """A tool call activity's input: the run folder and the call it runs."""

    run_dir: str
    call_id: str


@dataclass(frozen=True)
class StepOutcome:
    """One step's outcome: its kind, and the run's result fields once it ended."""

    kind: str  # NextRound, HandedOff, NextCall, Awaiting, or "ended"
    status: str | None = None  # completed, partial_success, failed, cancelled
    rounds: int = 0
    commits: int = 0
    error_code: str | None = None
    message: str = ""
    floor: int | None = None
    final_text: str | None = None
    # The run's delegated tasks still running: each is (or becomes) a child workflow.
    live_tasks: list[str] = field(default_factory=list)
    # Awaiting: the tasks an agent_await call waits for, how, and for how long.
    wait_for: list[str] = field(default_factory=list)
    wait_mode: str = "allCompleted"
    wait_ms: int = 0
    # NextCall, Awaiting: the call the next activity runs (an awaiting call is answered
    # by it once the wait is over).
    call_id: str | None = None
    # Whether that call is quick (an in-process built-in, not a shell command or an
    # external tool): it may run as a local activity.
    local: bool = False


@dataclass(frozen=True)
class TaskInput:
    """A delegated task's child workflow: its run folder and task id."""

    run_dir: str
    task_id: str
    heartbeat_seconds: float = 10.0


@workflow.defn(name=WORKFLOW_NAME, sandboxed=False)
class RunWorkflow:
    """Runs the run's activities one after the other until it has ended.

    Each model request is a ``model_request`` activity and each tool call a
    ``tool_call`` activity; an activity's answer says what comes next. A
    cancelled workflow ends the run with ``run_cancel``.
    """

    @workflow.run
    async def run(self, params: RunInput) -> StepOutcome:
        """Drive the run to its end by activities (one step, or one model request or call,
        each); on cancellation stop the children and journal the run as cancelled."""
        children = Children(params)
        try:
            if params.loop >= LOOP:  # the input says how; no patch markers
                if params.activity_per_call:
                    return await self._activities(params, children, params.local_activities)
                return await self._steps(params, children)
            # Input first: a workflow asked for steps records no patch marker.
            if params.activity_per_call and workflow.patched(PER_CALL_PATCH):
                # Input first: a workflow asked for server-scheduled activities records none.
                local = params.local_activities and workflow.patched(LOCAL_PATCH)
                return await self._activities(params, children, local)
            return await self._steps(params, children)
        except (asyncio.CancelledError, CancelledError, ActivityError) as exc:
            if not _cancelled(exc):
                raise
        # Cancelled between activities, or during one: the children stop (their steps
        # write nothing), then the cancel activity pairs the open calls of the run and of
        # its tasks and journals run_cancelled (a run that ended already stays as it is).
        children.cancel()
        ended: StepOutcome = await workflow.execute_activity(
            CANCEL_ACTIVITY,
            params.run_dir,
            result_type=StepOutcome,
            start_to_close_timeout=timedelta(minutes=5),
            retry_policy=RetryPolicy(non_retryable_error_types=NOT_RETRIED),
        )
        return ended

    async def _activities(self, params: RunInput, children: Children, local: bool) -> StepOutcome:
        next_call, next_local = params.next_call, params.next_local
        while True:
            if next_call is None:
                outcome = await _activity(
                    MODEL_ACTIVITY, params.run_dir, params, StepOutcome, local=local
                )
            else:
                call = CallInput(params.run_dir, next_call)
                outcome = await _activity(
                    CALL_ACTIVITY, call, params, StepOutcome, local=local and next_local
                )
            if outcome.kind == "ended":
                return outcome
            await children.start(outcome.live_tasks)
            if outcome.kind == "Awaiting":
                await children.wait(outcome)
            next_call = outcome.call_id if outcome.kind in ("NextCall", "Awaiting") else None
            next_local = outcome.local
            if workflow.info().is_continue_as_new_suggested() and not children.running():
                # A long run's history grows with every activity: go on in a new one
                # (not while child workflows run: they belong to this one).
                workflow.continue_as_new(
                    replace(params, next_call=next_call, next_local=next_local)
                )

    async def _steps(self, params: RunInput, children: Children) -> StepOutcome:
        """One activity per step: workflows started before the activity per call, and
        those asked for it."""
        while True:
            outcome = await _activity(STEP_ACTIVITY, params.run_dir, params, StepOutcome)
            if outcome.kind == "ended":
                return outcome
            await children.start(outcome.live_tasks)
            if outcome.kind == "Awaiting":
                await children.wait(outcome)


async def _activity(
    name: str,
    arg: object,
    params: RunInput | TaskInput,
    result_type: type[T],
    *,
    local: bool = False,
) -> T:
    """Run one of the run's (or a task's) activities, retried as the journal allows.

    ``local``: as a local activity, on this worker, its result recorded with the
    workflow task. A worker lost during one loses the workflow task too: the next
    worker replays the history and runs the activity again, which goes on from the
    journal as a retried activity does (a call journaled as started gets its
    outcome-unknown result, a stored model reply is not asked for again).
    """
    if local:
        done: T = await workflow.execute_local_activity(
            name,
            arg,
            result_type=result_type,
            start_to_close_timeout=timedelta(hours=1),
            retry_policy=STEP_RETRY,
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
        return done
    outcome: T = await workflow.execute_activity(
        name,
        arg,
        result_type=result_type,
        start_to_close_timeout=timedelta(hours=1),
        heartbeat_timeout=timedelta(seconds=params.heartbeat_seconds),
        # Safe to retry: an activity goes on from the journal, and a call journaled as
        # started is given its outcome-unknown result, never run again. Retrying a model
        # request after an HTTP error is the gateway's job; these cover lost workers.
        retry_policy=STEP_RETRY,
        cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    )
    return outcome


class Children:
    """The child workflows of one run's delegated tasks, by task id."""

    def __init__(self, params: RunInput) -> None:
        self.params = params
        self.handles: dict[str, ChildWorkflowHandle[Any, str]] = {}

    async def start(self, task_ids: list[str]) -> None:
        """A child workflow for each live task that has none yet.

        The run's steps report every live task (not only those a step started),
        so a task started by a step whose worker died before it answered gets
        its workflow at the next step.
        """
        for task_id in task_ids:
            if task_id in self.handles:
                continue
            self.handles[task_id] = await workflow.start_child_workflow(
                TASK_WORKFLOW_NAME,
                TaskInput(self.params.run_dir, task_id, self.params.heartbeat_seconds),
                id=f"{workflow.info().workflow_id}/{task_id}",
                result_type=str,
                # When the run ends, the steps of its tasks stop; the run's last step
                # already ended each live task as cancelled in the journal.
                parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
            )

    async def wait(self, outcome: StepOutcome) -> None:
        """Until the awaited tasks ended (all, or the next one) or the wait timed out."""
        handles = [self.handles[t] for t in outcome.wait_for if t in self.handles]

        def ready() -> bool:
            done = sum(1 for h in handles if h.done())
            return done == len(handles) if outcome.wait_mode == "allCompleted" else done > 0

        with contextlib.suppress(asyncio.TimeoutError):
            await workflow.wait_condition(ready, timeout=timedelta(milliseconds=outcome.wait_ms))

    def running(self) -> bool:
        """Whether a child workflow has not ended yet."""
        return any(not handle.done() for handle in self.handles.values())

    def cancel(self) -> None:
        """Cancel every delegated child workflow still running."""
        for handle in self.handles.values():
            if not handle.done():
                handle.cancel()


@workflow.defn(name=TASK_WORKFLOW_NAME, sandboxed=False)
class TaskWorkflow:
    """A delegated task: ``task_step`` until it has ended; returns its status."""

    @workflow.run
    async def run(self, params: TaskInput) -> str:
        """Step one delegated task until it ends; returns its
        status (``cancelled`` when it was stopped with its run)."""
        try:
            while True:
                status = await _activity(TASK_STEP_ACTIVITY, params, params, str)
                if status:
                    return status
        except (asyncio.CancelledError, CancelledError, ActivityError) as exc:
            if not _cancelled(exc):
                raise
        # Stopped with its run: the run's ending (or its cancel step) pairs the
        # task's open calls and journals it as cancelled.
        return "cancelled"


def _cancelled(exc: BaseException) -> bool:
    # Cancelled while an activity ran (the SDK's error, maybe as an activity's cause),
    # or while the workflow itself waited (asyncio's, e.g. on its tasks' workflows).
    cancelled = (CancelledError, asyncio.CancelledError)
    return isinstance(exc, cancelled) or isinstance(exc.__cause__, cancelled)
