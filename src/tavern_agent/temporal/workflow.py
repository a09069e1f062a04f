"""The run workflow: deterministic, no I/O; every step of the run is an activity.

Kept free of project imports so that the workflow sandbox (which re-imports a
workflow's modules for each run) stays cheap and nothing in it can touch a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError

WORKFLOW_NAME = "tavern-agent-run"
STEP_ACTIVITY = "run_step"
CANCEL_ACTIVITY = "run_cancel"
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


@dataclass(frozen=True)
class StepOutcome:
    """One step's outcome: its kind, and the run's result fields once it ended."""

    kind: str  # NextRound, HandedOff, or "ended"
    status: str | None = None  # completed, partial_success, failed, cancelled
    rounds: int = 0
    commits: int = 0
    error_code: str | None = None
    message: str = ""
    floor: int | None = None
    final_text: str | None = None


@workflow.defn(name=WORKFLOW_NAME)
class RunWorkflow:
    """Loops over ``run_step`` until the run has ended; cancellation ends the run."""

    @workflow.run
    async def run(self, params: RunInput) -> StepOutcome:
        try:
            while True:
                outcome: StepOutcome = await workflow.execute_activity(
                    STEP_ACTIVITY,
                    params.run_dir,
                    result_type=StepOutcome,
                    start_to_close_timeout=timedelta(hours=1),
                    heartbeat_timeout=timedelta(seconds=params.heartbeat_seconds),
                    # Safe to retry: a step resumes from the journal, and a call that may
                    # have run is given its outcome-unknown result, not run again. Model
                    # request retries are the gateway's; these cover lost workers.
                    retry_policy=RetryPolicy(
                        initial_interval=timedelta(seconds=1),
                        maximum_interval=timedelta(seconds=30),
                        non_retryable_error_types=NOT_RETRIED,
                    ),
                    cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                )
                if outcome.kind == "ended":
                    return outcome
        except (CancelledError, ActivityError) as exc:
            if not _cancelled(exc):
                raise
        # Cancelled between steps, or during one: the cancel activity pairs the open
        # calls and journals run_cancelled (a run that ended already stays as it is).
        ended: StepOutcome = await workflow.execute_activity(
            CANCEL_ACTIVITY,
            params.run_dir,
            result_type=StepOutcome,
            start_to_close_timeout=timedelta(minutes=5),
            retry_policy=RetryPolicy(non_retryable_error_types=NOT_RETRIED),
        )
        return ended


def _cancelled(exc: BaseException) -> bool:
    return isinstance(exc, CancelledError) or isinstance(exc.__cause__, CancelledError)
