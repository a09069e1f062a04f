"""The Temporal engine: a run submitted as a workflow, followed through its journal.

The server's workers take the run's steps (``tavern-agent worker``); this
process follows the journal the workers write on the shared data root, so its
listeners see the same events as a local run's. Needs the ``temporal`` extra,
imported only when an engine is made.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tavern_agent import run_layout
from tavern_agent.runtime.journal import JournalTail, Listener
from tavern_agent.runtime.loop import RunResult
from tavern_agent.runtime.run import Run

FOLLOW_EVERY = 0.1  # seconds between looks at a remote run's journal


class TemporalEngine:
    """Runs as workflows on the Temporal server at ``address`` (HOST:PORT)."""

    def __init__(
        self,
        address: str,
        *,
        task_queue: str | None = None,
        heartbeat_seconds: float = 10.0,
        activity_per_call: bool = True,
    ) -> None:
        """``activity_per_call``: each model request and each tool call is an activity
        (the default); else one activity per step (a model request, or a whole turn's
        calls), which saves round trips through the server."""
        try:
            from tavern_agent.temporal.workflow import DEFAULT_TASK_QUEUE
        except ImportError:
            raise ValueError(
                "the Temporal engine needs the temporal extra: pip install 'tavern-agent[temporal]'"
            ) from None
        self.address = address
        self.task_queue = task_queue or DEFAULT_TASK_QUEUE
        self.heartbeat_seconds = heartbeat_seconds
        self.activity_per_call = activity_per_call

    async def execute(self, run: Run, listeners: tuple[Listener, ...] = ()) -> RunResult:
        """Start the run's workflow and follow its journal to
        the end, passing each new event to ``listeners``."""
        from tavern_agent.temporal.workflow import WORKFLOW_NAME, RunInput, StepOutcome

        client = await self._client()
        handle = await client.start_workflow(
            WORKFLOW_NAME,
            RunInput(
                str(run.run_dir),
                self.heartbeat_seconds,
                activity_per_call=self.activity_per_call,
            ),
            id=run.id,
            task_queue=self.task_queue,
            result_type=StepOutcome,
        )
        result = asyncio.ensure_future(handle.result())
        tail = JournalTail(run.run_dir / run_layout.JOURNAL_FILE)
        while True:
            done = result.done()
            for record in tail.new_records():
                for listener in listeners:
                    listener(record)
            if done:
                return result_of(run.id, result.result())
            await asyncio.wait([result], timeout=FOLLOW_EVERY)

    async def cancel(self, run: Run) -> RunResult:
        """Cancel the run's workflow and return how it ended; raises
        ``ValueError`` when the run is not a Temporal run of this server."""
        from temporalio.service import RPCError

        from tavern_agent.temporal.workflow import StepOutcome

        client = await self._client()
        handle = client.get_workflow_handle(run.id, result_type=StepOutcome)
        try:
            await handle.cancel()
        except RPCError as exc:
            raise ValueError(f"run {run.id} is not a Temporal run here: {exc.message}") from None
        return result_of(run.id, await handle.result())

    async def _client(self) -> Any:
        from tavern_agent.temporal.worker import connect

        try:
            return await connect(self.address)
        except RuntimeError as exc:
            raise ValueError(f"cannot reach the Temporal server at {self.address}: {exc}") from None


def result_of(run_id: str, outcome: Any) -> RunResult:
    """A workflow's outcome (a ``StepOutcome``) as the run's result."""
    return RunResult(
        run_id,
        outcome.status or "failed",
        outcome.rounds,
        outcome.commits,
        outcome.error_code,
        outcome.message,
        outcome.floor,
        outcome.final_text,
    )
