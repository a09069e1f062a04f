"""The run loop: prompt → model → calls in order → results → next round, until finish.

One :class:`Engine` drives one run. Per round it asks the gateway for a
response (:mod:`~tavern_agent.runtime.requests`: stored in
``model-responses/round-NNN.json`` before it is used), runs the turn's calls
in order through the invocation's gate (:mod:`~tavern_agent.runtime.calls`:
each call sees the effects of those before, and each effect is applied by
:mod:`~tavern_agent.runtime.effects`), pairs every call with a result, and
feeds the results back. Each step returns a
:data:`~tavern_agent.runtime.turns.Next` value (another round, finished,
handed off, stopped) that the loop acts on; the refusal and finishing rules
are in :mod:`~tavern_agent.runtime.policy`, the endings in
:mod:`~tavern_agent.runtime.endings`, delegated tasks are driven by
:mod:`~tavern_agent.runtime.delegation`. The run's counters are one
:class:`~tavern_agent.runtime.state.RunState`.

Every step is journaled; with the checkpoint this lets :meth:`Engine.resume`
continue a killed run (:mod:`~tavern_agent.runtime.resume`): stored responses
are not requested again, calls with a stored result are not run again, a call
that started without a result gets the "outcome unknown: check state before
repeating" result, and a commit whose outcome the journal does not know is
confirmed (or not) from the chat file itself.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

from tavern_agent import run_layout
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.ids import ToolId
from tavern_agent.core.profile import Profile
from tavern_agent.providers.gateway import ModelError, ModelGateway
from tavern_agent.providers.transcript import AssistantMessage, UserMessage
from tavern_agent.runtime import events as ev
from tavern_agent.runtime.agent_task import AwaitingTasks
from tavern_agent.runtime.agents import AgentTasks
from tavern_agent.runtime.calls import CallRunner
from tavern_agent.runtime.checkpoint import Checkpoints
from tavern_agent.runtime.delegation import Delegation
from tavern_agent.runtime.effects import Effects
from tavern_agent.runtime.endings import Endings, RunResult
from tavern_agent.runtime.handoff import Handoffs
from tavern_agent.runtime.invocation import Invocation
from tavern_agent.runtime.journal import Journal, Listener
from tavern_agent.runtime.parts import RunParts
from tavern_agent.runtime.policy import rounds_stop, silent_stop
from tavern_agent.runtime.profiles import ProfileSource
from tavern_agent.runtime.prompt import text_turn_reminder
from tavern_agent.runtime.requests import ModelRequests
from tavern_agent.runtime.resume import Resumer, ResumeRefused
from tavern_agent.runtime.run import Run
from tavern_agent.runtime.state import RunState
from tavern_agent.runtime.turns import (
    Awaiting,
    Finished,
    HandedOff,
    Next,
    NextCall,
    NextRound,
    Stopped,
)
from tavern_agent.workspace.store import WorkspaceEscape

__all__ = ["Engine", "ResumeRefused", "RunResult"]


class Engine:
    """Drives one run with one gateway; ``listeners`` see every journal event.

    Use it as an async context manager (``async with Engine(run, gateway) as
    engine:``), or call :meth:`close` when done with it.
    """

    def __init__(
        self,
        run: Run,
        gateway: ModelGateway,
        *,
        listeners: tuple[Listener, ...] = (),
        fsync: bool = True,
        profiles: ProfileSource | None = None,
        background_children: bool = True,
        durable_steps: bool = True,
    ) -> None:
        """``durable_steps`` false: a step of one call (``step_once(one_call=True)``) that
        leaves calls of its turn open neither syncs the journal nor saves the read states;
        the host calls :meth:`make_durable` before it records the step's end (a worker's
        activity that took several steps, once). The local engine's barriers stay."""
        self._run = run
        self._gateway = gateway
        journal = Journal(run.run_dir / run_layout.JOURNAL_FILE, run.id, fsync=fsync)
        journal.listeners.extend(listeners)
        self._journal = journal
        state = self._state = RunState(run.invocations[-1])
        checkpoints = self._checkpoints = Checkpoints(run.run_dir)
        self._requests = ModelRequests(run, gateway, journal, state)
        # A durable engine's host drives delegated children itself (step_task).
        source = profiles or ProfileSource(run.data.path)
        delegation = Delegation(
            run, journal, self._requests, source, background=background_children
        )
        tasks = self._tasks = delegation.tasks
        parts = RunParts(run, journal, state, tasks, checkpoints)
        effects = Effects(parts, Handoffs(run, journal, tasks))
        self._calls = CallRunner(parts, effects, durable_call_end=durable_steps)
        self._resumer = Resumer(parts)
        delegation.connect(self._calls, self._resumer)
        self._delegation = delegation
        self._endings = Endings(parts, self._calls)
        # True once this engine's state is the fold of the journal (it started the run,
        # folded it, or took a step): the next step_once need not fold it again.
        self._live = False

    # ------------------------------------------------------------ what it drives

    @property
    def run(self) -> Run:
        """The run this engine drives."""
        return self._run

    @property
    def gateway(self) -> ModelGateway:
        """The model gateway the run's requests go to."""
        return self._gateway

    @property
    def journal(self) -> Journal:
        """The run's journal, as this engine writes it."""
        return self._journal

    @property
    def agents(self) -> AgentTasks:
        """The run's delegated tasks."""
        return self._tasks

    @property
    def live(self) -> bool:
        """Whether the engine's state is the fold of the journal as this engine wrote it."""
        return self._live

    def make_durable(self) -> None:
        """Sync the journal and save the read states: the steps so far survive a power
        loss and may go on on a fresh engine (see ``durable_steps``)."""
        self._journal.sync()
        self._checkpoints.save(self._run.invocations)

    def catch_up(self) -> bool:
        """Fold onto this live engine's state the events that another engine appended to
        the journal since this one's last (the run's steps moved to another worker and
        back), instead of folding the whole journal on a fresh engine.

        Only the main line's model turns and calls fold so (see ``Resumer.catch_up``),
        and only while no delegated task is live; False otherwise, and this engine is
        then done with (its journal has counted the events): the caller opens the run
        afresh.
        """
        if not self._live or self._tasks.live():
            return False
        records = self._journal.appended()
        return records is not None and self._resumer.catch_up(records)

    def call_tool(self, call_id: str) -> tuple[ToolId | None, Profile]:
        """The tool the open turn's call ``call_id`` names (None: no such call or tool),
        and the profile of the invocation that made it (its limits)."""
        inv = self._state.current
        profile = inv.profile or self._run.profile
        turn = inv.last_turn()
        for rc in turn.calls if turn is not None else ():
            if rc.call_id == call_id and isinstance(rc.name, str):
                binding = inv.snapshot.by_name(rc.name)
                return (None if binding is None else binding.tool_id), profile
        return None, profile

    async def __aenter__(self) -> Engine:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Let the chat index settle and close the journal."""
        if self._run.chat is not None:
            self._run.chat.settle()
        self._journal.close()

    def cancel_task(self, task_id: str) -> bool:
        """Stop one delegated task; its caller sees it as failed."""
        return self._tasks.cancel(task_id)

    # ------------------------------------------------------------ entry points

    async def start(self) -> RunResult:
        """Run a new run to its end."""
        try:
            self._resumer.start()
        except OSError as exc:
            return self._endings.storage_failed(exc)
        return await self._execute(self._state.current)

    async def revise(self, instruction: str) -> RunResult:
        """Run an output revision: a new invocation on the same snapshot."""
        self._resumer.rebuild()
        inv = self._run.revise(instruction)
        self._state.enter(inv)
        self._resumer.invocation_started(inv)
        return await self._execute(inv)

    async def resume(self) -> RunResult:
        """Continue a run that stopped without an outcome (see the module docstring)."""
        ended = self._resumer.rebuild()
        if ended is not None:
            return ended
        try:
            self._resumer.reconcile_commit()
            self._resumer.resumed()
        except OSError as exc:
            return self._endings.storage_failed(exc)
        self._tasks.restart()  # the children that were running go on too
        return await self._execute(self._state.current, self._state.resume_at)

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
            return await self._take_step(one_call, call_id)
        except AwaitingTasks as waiting:
            return Awaiting(waiting.call_id, waiting.task_ids, waiting.mode, waiting.timeout_ms)
        except asyncio.CancelledError:
            if not cancel and not end_when_cancelled:
                raise
            result = self._endings.cancel()
            if not cancel:
                raise
            return result
        except ModelError as exc:
            return self._endings.fail(ErrorCode.MODEL_REQUEST_FAILED, str(exc))
        except (OSError, WorkspaceEscape) as exc:
            return self._endings.storage_failed(exc)

    async def _take_step(self, one_call: bool, call_id: str | None) -> Next | NextCall | RunResult:
        """The step of :meth:`step_once`, from where the main line stands."""
        inv, step_at = self._state.current, self._state.take_resume_at()
        step: Next | NextCall
        if one_call:
            step = await self._one_step(inv, step_at, call_id)
        elif step_at is None:
            step = await self._step(inv)
        else:  # the journal ended after a finish or a handoff was accepted
            turn = inv.last_turn()
            if turn is not None and inv.pending_calls():
                await self._calls.run_turn(inv, turn)
            step = step_at
        if isinstance(step, Finished):
            return self._endings.complete(step.final_text)
        if isinstance(step, Stopped):
            return self._endings.fail(step.code, step.message)
        if isinstance(step, HandedOff):
            self._state.enter(step.target)
            self._resumer.invocation_started(step.target)
        return step

    def _prepare(self) -> RunResult | None:
        """Make the state the journal's fold (a step's start); the result of an ended run."""
        if self._journal.seq == 0:
            self._resumer.start()
        elif not self._live:
            ended = self._resumer.rebuild()
            if ended is not None:
                return ended
            self._resumer.reconcile_commit()
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
        task = self._tasks.tasks.get(task_id)
        if task is None:
            return "failed"
        if task.live:
            await self._delegation.step(task, one_call=True)
        return None if task.live else task.status

    # ------------------------------------------------------------ the loop

    async def _execute(self, inv: Invocation, first: Next | None = None) -> RunResult:
        try:
            return await self._drive(inv, first)
        except asyncio.CancelledError:
            self._endings.cancel()
            raise
        except ModelError as exc:
            return self._endings.fail(ErrorCode.MODEL_REQUEST_FAILED, str(exc))
        except (OSError, WorkspaceEscape) as exc:
            return self._endings.storage_failed(exc)

    async def _drive(self, inv: Invocation, first: Next | None) -> RunResult:
        step: Next | NextCall  # a NextCall only from a step of one call; never here
        if first is not None:  # resumed where the journal ended: pair what was cut off
            turn = inv.last_turn()
            if turn is not None and inv.pending_calls():
                await self._calls.run_turn(inv, turn)
            step = first
        else:
            step = await self._step(inv)
        while True:
            if isinstance(step, Finished):
                return self._endings.complete(step.final_text)
            if isinstance(step, Stopped):
                return self._endings.fail(step.code, step.message)
            if isinstance(step, HandedOff):  # the caller's part ended; the target goes on
                inv = step.target
                self._state.enter(inv)
                self._resumer.invocation_started(inv)
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
            return await self._calls.run_turn(inv, turn, only=call_id, after=step_at)
        pending = inv.pending_calls()
        if pending:
            self._state.stand_at(step_at)
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
            return await self._calls.run_turn(inv, turn)
        last = inv.transcript.items[-1] if inv.transcript.items else None
        if isinstance(last, AssistantMessage) and not last.calls:
            if self._run.scene is Scene.SESSION:
                return Finished(last.text)
            limit = (inv.profile or self._run.profile).limits.max_identical_failures
            silent = silent_stop(inv.transcript.items, limit)
            if silent is not None:
                return silent
            self._remind(inv, last)
        stop = rounds_stop(inv.round, (inv.profile or self._run.profile).limits.max_rounds)
        if stop is not None:
            return stop
        self._tasks.inject(inv)
        await self._requests.request(inv)
        return NextRound()

    def _remind(self, inv: Invocation, message: AssistantMessage) -> None:
        """A chat turn without a call: its text is saved, and the model is told how to go on."""
        saved = None
        rounds = self._state.rounds
        if message.text.strip():
            saved = run_layout.turn_text(rounds)
            self._run.workspace.write_atomic(saved, message.text.encode("utf-8"))
        text = text_turn_reminder(inv.snapshot, saved)
        self._journal.write(
            ev.ReminderAdded(invocation_id=inv.id, round=rounds, saved_to=saved, text=text)
        )
        inv.add_user(UserMessage(text))
        self._checkpoints.save(self._run.invocations)
