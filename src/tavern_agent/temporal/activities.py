"""The run's activities: one step of a run, and its cancellation, on any worker.

Each activity opens the run from the shared data root and a fresh
:class:`~tavern_agent.runtime.loop.Engine` that folds the run's journal, so
the step does not depend on which worker took the previous one. A worker
opens its :class:`~tavern_agent.assembly.Assembly` (tool sources) once.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from temporalio import activity

from tavern_agent.assembly import Assembly
from tavern_agent.runtime.engines import gateway_for
from tavern_agent.runtime.loop import Engine, RunResult
from tavern_agent.runtime.run import Run
from tavern_agent.temporal.workflow import CANCEL_ACTIVITY, STEP_ACTIVITY, StepOutcome


def outcome_of(step: object) -> StepOutcome:
    """The activity's answer: the step's kind, or the result of the run that ended."""
    if not isinstance(step, RunResult):
        return StepOutcome(kind=type(step).__name__)
    return StepOutcome(
        kind="ended",
        status=step.status,
        rounds=step.rounds,
        commits=step.commits,
        error_code=step.error_code,
        message=step.message,
        floor=step.floor,
        final_text=step.final_text,
    )


class RunActivities:
    """The activities of one worker, sharing its assembly."""

    def __init__(self, assembly: Assembly, *, heartbeat_every: float = 1.0) -> None:
        self.assembly = assembly
        self.heartbeat_every = heartbeat_every

    @activity.defn(name=STEP_ACTIVITY)
    async def run_step(self, run_dir: str) -> StepOutcome:
        """One step of the run in ``run_dir`` (see :meth:`Engine.step_once`)."""
        return await self._with_engine(run_dir, cancel=False)

    @activity.defn(name=CANCEL_ACTIVITY)
    async def run_cancel(self, run_dir: str) -> StepOutcome:
        """End the run in ``run_dir`` as cancelled, pairing its open calls."""
        return await self._with_engine(run_dir, cancel=True)

    async def _with_engine(self, run_dir: str, *, cancel: bool) -> StepOutcome:
        run = Run.open(self.assembly, Path(run_dir))
        gateway = gateway_for(run.record.get("model"))
        engine = Engine(run, gateway)
        beating = asyncio.create_task(self._heartbeat())
        try:
            return outcome_of(await engine.step_once(cancel=cancel))
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating
            engine.close()
            await gateway.aclose()

    async def _heartbeat(self) -> None:
        # The heartbeat is how the server learns that this worker is alive (and how a
        # cancellation reaches the step): a step may wait minutes on its model.
        while True:
            activity.heartbeat()
            await asyncio.sleep(self.heartbeat_every)
