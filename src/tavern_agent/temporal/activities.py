"""The run's activities on any worker: a model request, a tool call, a cancellation.

Each is one step of the run's engine (``Engine.step_once(one_call=True)``); a
step needs the run's :class:`~tavern_agent.runtime.loop.Engine` with the
fold of its journal. A worker keeps the engine of each run whose last step it
took (:class:`EngineCache`) and goes on from it while the journal is as that
engine left it; a run whose journal grew elsewhere (its steps moved to another
worker and back) is opened and folded again from the shared data root, so a
step never depends on which worker took the previous one. A worker opens its
:class:`~tavern_agent.assembly.Assembly` (tool sources) once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from temporalio import activity

from tavern_agent import run_layout
from tavern_agent.assembly import Assembly
from tavern_agent.providers.gateway import ModelGateway
from tavern_agent.runtime.engines import gateway_for
from tavern_agent.runtime.loop import Engine, RunResult
from tavern_agent.runtime.run import Run
from tavern_agent.runtime.turns import NextCall
from tavern_agent.temporal.workflow import (
    CALL_ACTIVITY,
    CANCEL_ACTIVITY,
    MODEL_ACTIVITY,
    STEP_ACTIVITY,
    CallInput,
    StepOutcome,
)


def outcome_of(step: object) -> StepOutcome:
    """The activity's answer: what comes next, or the result of the run that ended.

    Small on purpose: Temporal keeps it in the workflow's history, where a run's
    content (replies, tool results) does not belong; that is in the journal.
    """
    if isinstance(step, NextCall):
        return StepOutcome(kind="NextCall", call_id=step.call_id)
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


@dataclass
class HeldEngine:
    """A run's engine between two steps, and the journal's length when it was put back."""

    engine: Engine
    gateway: ModelGateway
    journal_bytes: int

    def current(self) -> bool:
        """Whether nobody else wrote to the journal since (its length is unchanged)."""
        try:
            size = (self.engine.run.run_dir / run_layout.JOURNAL_FILE).stat().st_size
        except OSError:
            return False
        return size == self.journal_bytes

    async def close(self) -> None:
        self.engine.close()
        await self.gateway.aclose()


class EngineCache:
    """The engines of the runs whose last step this worker took, newest last.

    An engine is taken out for a step and put back after it, so two steps of
    one run never share one. Bounded: the oldest are closed beyond ``limit``.
    """

    def __init__(self, limit: int = 256) -> None:
        self.limit = limit
        self._held: OrderedDict[str, HeldEngine] = OrderedDict()
        self.hits = 0
        self.misses = 0

    async def take(self, run_dir: str) -> HeldEngine | None:
        """The run's engine if it is current, else None (a stale one is closed)."""
        held = self._held.pop(run_dir, None)
        if held is not None and held.current():
            self.hits += 1
            return held
        self.misses += 1
        if held is not None:
            await held.close()
        return None

    async def put(self, run_dir: str, held: HeldEngine) -> None:
        self._held[run_dir] = held
        while len(self._held) > self.limit:
            _, oldest = self._held.popitem(last=False)
            await oldest.close()

    async def close(self) -> None:
        while self._held:
            _, held = self._held.popitem()
            await held.close()


class RunActivities:
    """The activities of one worker, sharing its assembly and its engines."""

    def __init__(
        self, assembly: Assembly, *, heartbeat_every: float = 1.0, cache: bool = True
    ) -> None:
        self.assembly = assembly
        self.heartbeat_every = heartbeat_every
        self.engines = EngineCache(limit=256 if cache else 0)

    @activity.defn(name=MODEL_ACTIVITY)
    async def model_request(self, run_dir: str) -> StepOutcome:
        """The run's next model request (none while calls of its turn are open)."""
        return await self._with_engine(run_dir, one_call=True)

    @activity.defn(name=CALL_ACTIVITY)
    async def tool_call(self, call: CallInput) -> StepOutcome:
        """The run's call ``call.call_id`` if it is the next one (then the turn's end
        after its last call); a call with a result already is not run again."""
        return await self._with_engine(call.run_dir, one_call=True, call_id=call.call_id)

    @activity.defn(name=STEP_ACTIVITY)
    async def run_step(self, run_dir: str) -> StepOutcome:
        """One step (a model request, or a turn's calls): runs started before the
        activity per call still schedule it."""
        return await self._with_engine(run_dir)

    @activity.defn(name=CANCEL_ACTIVITY)
    async def run_cancel(self, run_dir: str) -> StepOutcome:
        """End the run in ``run_dir`` as cancelled, pairing its open calls."""
        return await self._with_engine(run_dir, cancel=True)

    @property
    def activities(self) -> list[Callable[..., Awaitable[StepOutcome]]]:
        """The activities a worker registers."""
        return [self.model_request, self.tool_call, self.run_step, self.run_cancel]

    async def _with_engine(
        self,
        run_dir: str,
        *,
        cancel: bool = False,
        one_call: bool = False,
        call_id: str | None = None,
    ) -> StepOutcome:
        held = await self.engines.take(run_dir)
        if held is None:
            run = Run.open(self.assembly, Path(run_dir))
            gateway = gateway_for(run.record.get("model"))
            held = HeldEngine(Engine(run, gateway), gateway, 0)
        beating = asyncio.create_task(self._heartbeat())
        step: object = None
        try:
            # A cancelled step stops without ending the run: it is cancelled when its
            # worker stops or is taken as lost too, and the run goes on elsewhere. A
            # cancelled workflow ends the run with the run_cancel activity.
            step = await held.engine.step_once(
                cancel=cancel, end_when_cancelled=False, one_call=one_call, call_id=call_id
            )
            return outcome_of(step)
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating
            # Kept only after a whole step that left the run going; after an error the
            # engine's state may be half-updated, and the retry folds the journal afresh.
            if step is not None and not isinstance(step, RunResult) and held.engine.live:
                held.journal_bytes = held.engine.journal.size()
                await self.engines.put(run_dir, held)
            else:
                await held.close()

    async def close(self) -> None:
        """Close the engines held between steps (the worker stops)."""
        await self.engines.close()

    async def _heartbeat(self) -> None:
        # The heartbeat is how the server learns that this worker is alive (and how a
        # cancellation reaches the step): a step may wait minutes on its model.
        while True:
            activity.heartbeat()
            await asyncio.sleep(self.heartbeat_every)
