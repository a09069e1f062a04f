"""The run's activities on any worker: a model request, a tool call, a cancellation.

Each is one step of the run's engine (``Engine.step_once(one_call=True)``); a
step needs the run's :class:`~tavern_agent.runtime.loop.Engine` with the
fold of its journal. A worker keeps the engine of each run whose last step it
took (:class:`EngineCache`) and goes on from it while the journal is as that
engine left it. When the journal grew elsewhere (its steps moved to another
worker and back), the kept engine folds just the appended events if they are
the main line's model turns and calls (``Engine.catch_up``); otherwise the run
is opened and its journal folded again from the shared data root. Either way
a step never depends on which worker took the previous one. A worker opens its
:class:`~tavern_agent.assembly.Assembly` (tool sources) once.

A run's steps and the steps of its delegated tasks (child workflows) may run
at the same time on different workers; each holds the run's step lock
(:class:`RunLock`) from before it reads the journal until after its last
append, so the journal keeps one writer at a time. The lock is let go while
a model answers (:class:`UnlockedWhileAsking`): a run's model requests and
its tasks' overlap, as they do in one process.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from temporalio import activity

from tavern_agent import run_layout
from tavern_agent.assembly import Assembly
from tavern_agent.core.ids import ToolId, ToolKind
from tavern_agent.core.profile import Profile
from tavern_agent.providers.choice import gateway_for
from tavern_agent.providers.gateway import ModelGateway, ModelReply, ModelRequest
from tavern_agent.providers.window import WindowFacts
from tavern_agent.runtime.journal import Journal
from tavern_agent.runtime.loop import Engine, RunResult
from tavern_agent.runtime.run import Run
from tavern_agent.runtime.turns import Awaiting, NextCall
from tavern_agent.temporal.workflow import (
    CALL_ACTIVITY,
    CANCEL_ACTIVITY,
    MODEL_ACTIVITY,
    STEP_ACTIVITY,
    TASK_STEP_ACTIVITY,
    CallInput,
    StepOutcome,
    TaskInput,
)

T = TypeVar("T")
LOCK_POLL = 0.05  # seconds between tries of a run's step lock
SHELL = ToolId.builtin("workspace.shell")
# A shell call that may run longer than this (its profile's limit) is scheduled by the
# server rather than run as a local activity.
LOCAL_CALL_SECONDS = 60.0
BATCH_SECONDS = 60.0  # a local activity takes no further step of its run after this long


class RunLock:
    """The run's step lock: an ``flock`` of ``.step.lock`` on the shared volume.

    Polled rather than blocking, so the event loop (and the step's heartbeat)
    goes on while another step of the same run holds it. A dead worker's lock
    goes with its process.
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / run_layout.STEP_LOCK_FILE
        self._fd = -1

    async def acquire(self) -> None:
        """Take the lock, polling until another step of the run lets it go."""
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                await asyncio.sleep(LOCK_POLL)

    def release(self) -> None:
        """Let the lock go (the file stays open for the next step)."""
        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close the lock file, which lets the lock go if it is held."""
        if self._fd >= 0:
            os.close(self._fd)  # releases the lock if held
            self._fd = -1

    async def __aenter__(self) -> RunLock:
        try:
            await self.acquire()
        except BaseException:
            self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class UnlockedWhileAsking:
    """The model gateway of a held engine: the run's lock is let go while the model answers.

    Model requests take seconds; the steps of the run's delegated tasks (and their
    model requests) go on meanwhile. What they journal is not in this engine's
    state, so :attr:`moved` tells the activity not to keep the engine (the next
    step folds the journal); the journal counts their events before it appends.
    """

    def __init__(self, inner: ModelGateway) -> None:
        self.inner = inner
        self.lock: RunLock | None = None  # this activity's hold on the run's lock
        self.journal: Journal | None = None
        self.moved = False

    async def window_facts(self) -> WindowFacts | None:
        """The inner gateway's window, as a local engine's run would have it."""
        facts_of = getattr(self.inner, "window_facts", None)
        facts: WindowFacts | None = await facts_of() if facts_of is not None else None
        return facts

    async def count_tokens(self, request: ModelRequest) -> int | None:
        """The inner gateway's count of a request before it is sent, where it has one."""
        count_of = getattr(self.inner, "count_tokens", None)
        counted: int | None = await count_of(request) if count_of is not None else None
        return counted

    async def respond(self, request: ModelRequest) -> ModelReply:
        """The model's answer, asked with the run's lock let go; takes the lock
        again (noting whether others journaled meanwhile) before returning."""
        lock, journal = self.lock, self.journal
        if lock is None or journal is None:
            return await self.inner.respond(request)
        size = journal.size()
        lock.release()
        try:
            reply = await self.inner.respond(request)
        except asyncio.CancelledError:
            raise  # the step stops and writes nothing more: it needs the lock no more
        except BaseException:
            await self._hold_again(lock, journal, size)  # the engine journals the failure
            raise
        await self._hold_again(lock, journal, size)
        return reply

    async def _hold_again(self, lock: RunLock, journal: Journal, size: int) -> None:
        await lock.acquire()
        self.moved |= journal.size() != size

    async def aclose(self) -> None:
        """Close the inner gateway."""
        await self.inner.aclose()


def outcome_of(step: object, engine: Engine) -> StepOutcome:
    """The activity's answer: what comes next, or the result of the run that ended.

    Small on purpose: Temporal keeps it in the workflow's history, where a run's
    content (replies, tool results) does not belong; that is in the journal.
    """
    live = [t.id for t in engine.agents.live()]
    if isinstance(step, NextCall):
        local = quick_call(*engine.call_tool(step.call_id))
        return StepOutcome(kind="NextCall", live_tasks=live, call_id=step.call_id, local=local)
    if isinstance(step, Awaiting):
        return StepOutcome(
            kind="Awaiting",
            live_tasks=live,
            wait_for=list(step.task_ids),
            wait_mode=step.mode,
            wait_ms=step.timeout_ms,
            call_id=step.call_id,  # answered by the next activity, once the wait is over
            local=quick_call(*engine.call_tool(step.call_id)),
        )
    if not isinstance(step, RunResult):
        return StepOutcome(kind=type(step).__name__, live_tasks=live)
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


def quick_call(tool: ToolId | None, profile: Profile) -> bool:
    """Whether a call of ``tool`` may run as a local activity: a built-in that runs in
    the worker's process, for at most a minute when it is a shell command (its
    profile's limit). A longer shell command, and the calls of MCP and extension tools
    (which answer when they answer), stay activities the server schedules: any worker
    may take them, and Temporal shows each as pending, with its worker and heartbeats."""
    if tool is None:
        return True  # no such tool: the call's result is an error, at once
    if tool.kind is not ToolKind.BUILTIN:
        return False
    return tool != SHELL or profile.limits.shell.timeout_seconds <= LOCAL_CALL_SECONDS


def goes_on_here(outcome: StepOutcome, engine: Engine) -> bool:
    """Whether a local activity may take the run's next step itself (see
    ``RunActivities._steps_from``): a model request or a quick call, no delegated
    task live, and nobody else wrote to the journal while the model answered."""
    gateway = engine.gateway
    if outcome.live_tasks or (isinstance(gateway, UnlockedWhileAsking) and gateway.moved):
        return False
    if outcome.kind == "NextCall":
        return outcome.local
    return outcome.kind in ("NextRound", "HandedOff")


@dataclass
class HeldEngine:
    """A run's engine between two steps, and the journal's length when it was put back."""

    engine: Engine
    gateway: UnlockedWhileAsking
    journal_bytes: int

    def current(self) -> bool:
        """Whether nobody else wrote to the journal since (its length is unchanged)."""
        try:
            size = (self.engine.run.run_dir / run_layout.JOURNAL_FILE).stat().st_size
        except OSError:
            return False
        return size == self.journal_bytes

    async def close(self) -> None:
        """Close the engine and its gateway."""
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
        self.hits = 0  # the engine was current
        self.caught_up = 0  # it folded the events appended elsewhere (Engine.catch_up)
        self.misses = 0  # none, or one that could not catch up: the run is opened afresh

    async def take(self, run_dir: str) -> HeldEngine | None:
        """The run's engine if it is current or caught up with the journal, else None (a
        stale one is closed)."""
        held = self._held.pop(run_dir, None)
        if held is not None and held.current():
            self.hits += 1
            return held
        if held is not None and held.engine.catch_up():
            self.caught_up += 1
            return held
        self.misses += 1
        if held is not None:
            await held.close()
        return None

    async def put(self, run_dir: str, held: HeldEngine) -> None:
        """Put an engine back after its step, closing the oldest beyond the limit."""
        self._held[run_dir] = held
        while len(self._held) > self.limit:
            _, oldest = self._held.popitem(last=False)
            await oldest.close()

    async def close(self) -> None:
        """Close every held engine."""
        while self._held:
            _, held = self._held.popitem()
            await held.close()


class RunActivities:
    """The activities of one worker, sharing its assembly and its engines."""

    def __init__(
        self,
        assembly: Assembly,
        *,
        heartbeat_every: float = 1.0,
        cache: bool = True,
        gateways: Callable[[Run], ModelGateway] | None = None,
    ) -> None:
        self.assembly = assembly
        self.heartbeat_every = heartbeat_every
        self.engines = EngineCache(limit=256 if cache else 0)
        self._steps: set[asyncio.Task[Any]] = set()  # the steps under way
        # The model of a run: the one its record names (tests give a scripted one).
        self.gateways = gateways or (lambda run: gateway_for(run.record.get("model")))

    @activity.defn(name=MODEL_ACTIVITY)
    async def model_request(self, run_dir: str) -> StepOutcome:
        """The run's next model request (none while calls of its turn are open); as a
        local activity, the quick steps after it too (see :meth:`_steps_from`)."""
        return await self._with_engine(run_dir, lambda e: self._steps_from(e, None))

    @activity.defn(name=CALL_ACTIVITY)
    async def tool_call(self, call: CallInput) -> StepOutcome:
        """The run's call ``call.call_id`` if it is the next one (then the turn's end
        after its last call); a call with a result already is not run again. As a
        local activity, the quick steps after it too."""
        return await self._with_engine(call.run_dir, lambda e: self._steps_from(e, call.call_id))

    async def _steps_from(self, engine: Engine, call_id: str | None) -> tuple[StepOutcome, bool]:
        """A model request (``call_id`` None) or the call ``call_id``; a local activity then
        takes the run's next steps itself while they are model requests and quick calls.

        Each answer to the workflow costs the SDK's work on both sides (about 4 ms of
        CPU) and records nothing the journal does not have; the workflow has work only
        at a step the server must schedule (a shell or external call), at an await, when
        the run ends, or when delegated tasks are live (their workflows start, and their
        steps take turns with the run's), or after ``BATCH_SECONDS`` (the workflow may
        then continue as new). A retry goes on from the journal either way.
        """
        outcome, going = await self._run_step(engine, cancel=False, one_call=True, call_id=call_id)
        until = time.monotonic() + BATCH_SECONDS
        while (
            going
            and activity.info().is_local
            and goes_on_here(outcome, engine)
            and time.monotonic() < until
        ):
            next_call = outcome.call_id if outcome.kind == "NextCall" else None
            outcome, going = await self._run_step(
                engine, cancel=False, one_call=True, call_id=next_call
            )
        return outcome, going

    @activity.defn(name=STEP_ACTIVITY)
    async def run_step(self, run_dir: str) -> StepOutcome:
        """One step (a model request, or a turn's calls): runs started before the
        activity per call still schedule it."""
        return await self._with_engine(run_dir, lambda e: self._run_step(e, cancel=False))

    @activity.defn(name=CANCEL_ACTIVITY)
    async def run_cancel(self, run_dir: str) -> StepOutcome:
        """End the run in ``run_dir`` as cancelled, pairing its open calls."""
        return await self._with_engine(run_dir, lambda e: self._run_step(e, cancel=True))

    @activity.defn(name=TASK_STEP_ACTIVITY)
    async def task_step(self, params: TaskInput) -> str:
        """One step of a delegated task; its status once it has ended, else ``""``."""

        async def step(engine: Engine) -> tuple[str, bool]:
            status = await engine.step_task(params.task_id)
            return status or "", True

        return await self._with_engine(params.run_dir, step)

    @property
    def activities(self) -> list[Callable[..., Awaitable[object]]]:
        """The activities a worker registers."""
        return [
            self.model_request,
            self.tool_call,
            self.run_step,
            self.run_cancel,
            self.task_step,
        ]

    @staticmethod
    async def _run_step(
        engine: Engine, *, cancel: bool, one_call: bool = False, call_id: str | None = None
    ) -> tuple[StepOutcome, bool]:
        # A cancelled step stops without ending the run: it is cancelled when its
        # worker stops or is taken as lost too, and the run goes on elsewhere. A
        # cancelled workflow ends the run with the run_cancel activity.
        step = await engine.step_once(
            cancel=cancel, end_when_cancelled=False, one_call=one_call, call_id=call_id
        )
        return outcome_of(step, engine), not isinstance(step, RunResult)

    async def _with_engine(
        self, run_dir: str, step: Callable[[Engine], Awaitable[tuple[T, bool]]]
    ) -> T:
        """Run ``step`` (answer, whether the run goes on) on the run's engine, under its lock."""
        this = asyncio.current_task()
        if this is not None:
            self._steps.add(this)
        beating = asyncio.create_task(self._heartbeat())
        try:
            async with RunLock(Path(run_dir)) as lock:
                return await self._step_held(run_dir, lock, step)
        finally:
            if this is not None:
                self._steps.discard(this)
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating

    async def _step_held(
        self, run_dir: str, lock: RunLock, step: Callable[[Engine], Awaitable[tuple[T, bool]]]
    ) -> T:
        held = await self.engines.take(run_dir)
        if held is None:
            run = await Run.aopen(self.assembly, Path(run_dir))
            gateway = UnlockedWhileAsking(self.gateways(run))
            # The run's workflow drives its delegated tasks as child workflows; the steps
            # are made durable once, at the activity's end, before its answer is recorded.
            engine = Engine(run, gateway, background_children=False, durable_steps=False)
            held = HeldEngine(engine, gateway, 0)
        held.gateway.lock, held.gateway.journal = lock, held.engine.journal
        held.gateway.moved = False
        going = False
        try:
            answer, going = await step(held.engine)
            held.engine.make_durable()
            return answer
        finally:
            held.gateway.lock = None
            # Kept only after a whole step that left the run going (and that no other
            # step wrote to while its model answered); after an error the engine's state
            # may be half-updated, and the retry folds the journal afresh.
            if going and held.engine.live and not held.gateway.moved:
                held.journal_bytes = held.engine.journal.size()
                await self.engines.put(run_dir, held)
            else:
                await held.close()

    def cancel_steps(self) -> None:
        """Cancel the steps under way (the worker stops): each stops as a lost
        worker's would, and the server retries it on another worker."""
        for step in list(self._steps):
            step.cancel()

    async def close(self) -> None:
        """Close the engines held between steps (the worker stops)."""
        await self.engines.close()

    async def _heartbeat(self) -> None:
        # The heartbeat is how the server learns that this worker is alive (and how a
        # cancellation reaches the step): a step may wait minutes on its model. A local
        # activity has none: it lives and dies with its workflow task.
        if activity.info().is_local:
            return
        while True:
            activity.heartbeat()
            await asyncio.sleep(self.heartbeat_every)
