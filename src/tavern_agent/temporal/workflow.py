"""The run workflow: deterministic, no I/O; each model request and each tool call is an activity.

Kept free of project imports so that the workflow sandbox (which re-imports a
workflow's modules for each run) stays cheap and nothing in it can touch a file.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError

WORKFLOW_NAME = "tavern-agent-run"
MODEL_ACTIVITY = "model_request"
CALL_ACTIVITY = "tool_call"
CANCEL_ACTIVITY = "run_cancel"
# Workflows started before the activity per call ran one activity per step (a model
# request, or a whole turn's calls); their histories replay on that loop.
STEP_ACTIVITY = "run_step"
PER_CALL_PATCH = "activity-per-call"
DEFAULT_TASK_QUEUE = "tavern-agent"
# Errors that a retry on another worker cannot fix (the run's state is inconsistent).
NOT_RETRIED = ["ResumeRefused", "RunNotFound"]


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


@dataclass(frozen=True)
class CallInput:
    """A tool call activity's input: the run folder and the call it runs."""

    run_dir: str
    call_id: str


@dataclass(frozen=True)
class StepOutcome:
    """One step's outcome: its kind, and the run's result fields once it ended."""

    kind: str  # NextRound, HandedOff, NextCall, or "ended"
    status: str | None = None  # completed, partial_success, failed, cancelled
    rounds: int = 0
    commits: int = 0
    error_code: str | None = None
    message: str = ""
    floor: int | None = None
    final_text: str | None = None
    call_id: str | None = None  # NextCall: the call the next activity runs


@workflow.defn(name=WORKFLOW_NAME)
class RunWorkflow:
    """Runs the run's activities one after the other until it has ended.

    Each model request is a ``model_request`` activity and each tool call a
    ``tool_call`` activity; an activity's answer says what comes next. A
    cancelled workflow ends the run with ``run_cancel``.
    """

    @workflow.run
    async def run(self, params: RunInput) -> StepOutcome:
        try:
            if workflow.patched(PER_CALL_PATCH):
                return await self._activities(params)
            return await self._steps(params)
        except (CancelledError, ActivityError) as exc:
            if not _cancelled(exc):
                raise
        # Cancelled between activities, or during one: the cancel activity pairs the open
        # calls and journals run_cancelled (a run that ended already stays as it is).
        ended: StepOutcome = await workflow.execute_activity(
            CANCEL_ACTIVITY,
            params.run_dir,
            result_type=StepOutcome,
            start_to_close_timeout=timedelta(minutes=5),
            retry_policy=RetryPolicy(non_retryable_error_types=NOT_RETRIED),
        )
        return ended

    async def _activities(self, params: RunInput) -> StepOutcome:
        next_call = params.next_call
        while True:
            if next_call is None:
                outcome = await _activity(MODEL_ACTIVITY, params.run_dir, params)
            else:
                outcome = await _activity(
                    CALL_ACTIVITY, CallInput(params.run_dir, next_call), params
                )
            if outcome.kind == "ended":
                return outcome
            next_call = outcome.call_id if outcome.kind == "NextCall" else None
            if workflow.info().is_continue_as_new_suggested():
                # A long run's history grows with every activity: go on in a new one.
                workflow.continue_as_new(replace(params, next_call=next_call))

    async def _steps(self, params: RunInput) -> StepOutcome:
        """The loop of workflows started before the activity per call."""
        while True:
            outcome = await _activity(STEP_ACTIVITY, params.run_dir, params)
            if outcome.kind == "ended":
                return outcome


async def _activity(name: str, arg: object, params: RunInput) -> StepOutcome:
    outcome: StepOutcome = await workflow.execute_activity(
        name,
        arg,
        result_type=StepOutcome,
        start_to_close_timeout=timedelta(hours=1),
        heartbeat_timeout=timedelta(seconds=params.heartbeat_seconds),
        # Safe to retry: an activity goes on from the journal, and a call journaled as
        # started is given its outcome-unknown result, never run again. Retrying a model
        # request after an HTTP error is the gateway's job; these cover lost workers.
        retry_policy=RetryPolicy(
            initial_interval=timedelta(seconds=1),
            maximum_interval=timedelta(seconds=30),
            non_retryable_error_types=NOT_RETRIED,
        ),
        cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    )
    return outcome


def _cancelled(exc: BaseException) -> bool:
    return isinstance(exc, CancelledError) or isinstance(exc.__cause__, CancelledError)
