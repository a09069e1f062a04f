"""The run loop's side of delegation: driving a delegated task's own loop.

:class:`~tavern_agent.runtime.agents.AgentTasks` keeps the tasks and applies
the agent tools' effects; it asks its host (the :class:`Delegation` of the
run, through the :class:`~tavern_agent.runtime.agents.AgentHost` port) to
journal a child's start, to drive a child, and to pair a stopped child's open
calls. A child's step is one model request or its open turn's calls; a child
that stops without returning, or uses up its rounds, fails (the policy's rules).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from tavern_agent.providers.gateway import ModelError
from tavern_agent.providers.transcript import AssistantMessage, UserMessage
from tavern_agent.runtime import events as ev
from tavern_agent.runtime.agent_task import AgentTask
from tavern_agent.runtime.agents import AgentTasks
from tavern_agent.runtime.calls import CallRunner
from tavern_agent.runtime.invocation import Invocation
from tavern_agent.runtime.journal import Journal
from tavern_agent.runtime.policy import (
    silent_task_failure,
    task_return_reminder,
    task_rounds_failure,
)
from tavern_agent.runtime.profiles import ProfileSource
from tavern_agent.runtime.requests import ModelRequests
from tavern_agent.runtime.run import Run
from tavern_agent.workspace.store import WorkspaceEscape


class Starts(Protocol):
    """Journals an invocation's start (the run's :class:`~tavern_agent.runtime.resume.Resumer`)."""

    def invocation_started(self, inv: Invocation) -> None:
        """Journal ``inv``'s start."""


class Delegation:
    """Drives one run's delegated tasks; the :class:`~tavern_agent.runtime.agents.AgentHost`.

    Made in two steps, since the tasks and the call runner need each other:
    the tasks first (:attr:`tasks`), then :meth:`connect` gives the parts that
    run a child's turns.
    """

    def __init__(
        self,
        run: Run,
        journal: Journal,
        requests: ModelRequests,
        source: ProfileSource,
        *,
        background: bool = True,
    ) -> None:
        self.journal = journal
        self.requests = requests
        self.tasks = AgentTasks(run, journal, self, source, background=background)
        self._calls: CallRunner | None = None
        self._starts: Starts | None = None

    def connect(self, calls: CallRunner, starts: Starts) -> None:
        """The parts that run a child's calls and journal its start."""
        self._calls = calls
        self._starts = starts

    @property
    def calls(self) -> CallRunner:
        """The call runner given by :meth:`connect`."""
        assert self._calls is not None, "Delegation.connect was not called"
        return self._calls

    # ------------------------------------------------------------ AgentHost

    def invocation_started(self, inv: Invocation) -> None:
        """Journal a new child's start."""
        assert self._starts is not None, "Delegation.connect was not called"
        self._starts.invocation_started(inv)

    def pair_pending(self, inv: Invocation) -> None:
        """Pair a stopped invocation's open calls (a child cancelled with its run)."""
        self.calls.pair_pending(inv, cancelled=True)

    async def drive_child(self, task: AgentTask) -> None:
        """A delegated task's own loop, in the background, until it returns or ends."""
        try:
            while task.live:
                await self.step(task)
        except asyncio.CancelledError:
            if task.live:  # stopped on its own, not with the run
                self.calls.pair_pending(task.inv, cancelled=True)
                self.tasks.fail(task, "cancelled", "The task was stopped before it returned.")
            raise

    # ------------------------------------------------------------ a child's steps

    async def step(self, task: AgentTask, *, one_call: bool = False) -> None:
        """One step of a delegated task: its open turn's calls (``one_call``: the next
        one), or one model request."""
        inv = task.inv
        try:
            turn = inv.last_turn()
            pending = inv.pending_calls()
            if turn is not None and pending:
                only = pending[0] if one_call else None
                await self.calls.run_turn(inv, turn, inv.round, only=only)
                return
            last = inv.transcript.items[-1]
            if isinstance(last, AssistantMessage) and not last.calls:
                if task.reminded:
                    failure = silent_task_failure(last.text)
                    self.tasks.fail(task, failure.reason, failure.summary)
                    return
                self._remind(inv)
            rounds_used = task_rounds_failure(inv.round, task.profile.limits.max_rounds)
            if rounds_used is not None:
                self.tasks.fail(task, rounds_used.reason, rounds_used.summary)
                return
            await self.requests.request(inv)
        except ModelError as exc:
            self.tasks.fail(task, "model_error", f"The agent's model failed: {exc}")
        except (OSError, WorkspaceEscape) as exc:
            self.tasks.fail(task, "storage_error", f"{type(exc).__name__}: {exc}")

    def _remind(self, inv: Invocation) -> None:
        text = task_return_reminder(inv.snapshot)
        self.journal.write(
            ev.ReminderAdded(invocation_id=inv.id, round=inv.round, saved_to=None, text=text)
        )
        inv.add_user(UserMessage(text))
        self.tasks.remind(inv)
