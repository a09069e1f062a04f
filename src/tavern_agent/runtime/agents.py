"""Agents working together: delegated tasks, await and task.return.

The four tools (:mod:`tavern_agent.tools.builtin.agents`) return effects;
:class:`AgentTasks` applies three of them for one run, through the narrow
:class:`AgentHost` port (:class:`~tavern_agent.runtime.delegation.Delegation`
implements it; this module never reaches into the loop itself); the handoff
is :mod:`tavern_agent.runtime.handoff`'s:

* ``agent.delegate`` checks the target (callable, caller allowed, operation
  allowed) and the caller's limits, then starts a return-mode child Invocation
  (its own snapshot, prompt, gate and budget; the same workspace through its own
  roots) and answers ``{taskId, status, agentId}``. In one process the child runs
  as a background asyncio task; on a durable engine (``background=False``) the
  engine's host drives it (a child workflow whose steps are
  :meth:`~tavern_agent.runtime.loop.Engine.step_task`).
* ``agent.await`` waits on ``done`` events only: it never drives a task. On a
  durable engine it does not block: it journals ``task_await_waiting`` and raises
  :class:`AwaitingTasks`, the step ends, and the host continues the call once
  the tasks ended or the timeout passed.
* ``task.return`` writes ``summaries/<key>-result.md``, journals the result
  record with ``task_finished`` and ends the child.
* ``agent.handoff`` ends the caller's part: the loop continues the run with
  the target agent's new invocation (which starts from a markdown brief).

Journal events: ``task_started`` and ``task_finished`` (with the child's and the
parent's invocation ids), ``task_results_injected``, ``task_await_waiting``,
and the handoff's ``handoff_accepted``. :meth:`AgentTasks.fold` rebuilds the
tasks from them, so a resumed run (or a durable engine's next step, on any
worker) goes on with its children.

A child's records live in the journal (its prompt in ``invocation_started``, its
result in ``task_finished``); the files it adds to the run are its model
responses and, once per distinct tool set, a snapshot shared by the children of
one profile. A delegation thus costs no file of its own beyond those.
"""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from tavern_agent import run_layout
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.profile import Profile
from tavern_agent.core.results import (
    AgentToolEffect,
    AgentToolResult,
    AwaitRequested,
    DelegateRequested,
    TaskReturned,
)
from tavern_agent.core.tool_ids import AWAIT
from tavern_agent.providers.transcript import RecordedCall, UserMessage
from tavern_agent.runtime import events as ev
from tavern_agent.runtime.agent_task import AgentTask, AwaitingTasks
from tavern_agent.runtime.briefs import (
    child_system_prompt,
    result_markdown,
    summary_path,
    task_brief,
    task_report,
)
from tavern_agent.runtime.invocation import Invocation
from tavern_agent.runtime.journal import Journal
from tavern_agent.runtime.policy import (
    await_refusal,
    candidates,
    delegation_budget_refusal,
    delegator_refusal,
    target_refusal,
    task_return_refusal,
    unusable_target,
)
from tavern_agent.runtime.profiles import ProfileSource
from tavern_agent.runtime.run import Run
from tavern_agent.tools.snapshot import ToolBinding, ToolSnapshot

RESULT_KIND = "tauritavern.agentTaskResult"
CHARS_PER_TOKEN = 4


def _result(rc: RecordedCall, binding: ToolBinding, text: str, structured: Any) -> AgentToolResult:
    return AgentToolResult(rc.call_id, binding.tool_id, text, structured)


class AgentHost(Protocol):
    """What the delegated tasks need from the run loop, and nothing more."""

    def invocation_started(self, inv: Invocation) -> None:
        """Journal a new invocation (a child's or a handoff target's)."""

    async def drive_child(self, task: AgentTask) -> None:
        """Run a delegated task's own loop until it returns or ends."""

    def pair_pending(self, inv: Invocation) -> None:
        """Give a stopped invocation's open calls their cancelled results."""


@dataclass(eq=False)
class AgentTasks:
    """The delegated tasks of one run and the agent effects' application."""

    run: Run
    journal: Journal
    host: AgentHost
    source: ProfileSource
    # True: children run as asyncio tasks of this process; False: a durable
    # engine's host drives them, one step at a time, and await does not block.
    background: bool = field(default=True, kw_only=True)
    tasks: dict[str, AgentTask] = field(default_factory=dict, init=False)
    by_inv: dict[str, AgentTask] = field(default_factory=dict, init=False)
    # by agent id
    child_snapshots: dict[str, ToolSnapshot] = field(default_factory=dict, init=False)
    # await calls left waiting, by (invocation id, call id): call ids are the model's
    # and need not be unique across invocations
    awaiting: dict[tuple[str, str], AwaitRequested] = field(default_factory=dict, init=False)
    # by child invocation id
    _started: dict[str, ev.TaskStarted] = field(default_factory=dict, init=False)

    def caller(self, inv: Invocation) -> Profile:
        """The profile of the agent that ``inv`` runs."""
        return inv.profile or self.run.profile

    def owned(self, inv: Invocation) -> list[AgentTask]:
        """The tasks that ``inv`` started."""
        return [t for t in self.tasks.values() if t.parent is inv]

    def live(self, inv: Invocation | None = None) -> list[AgentTask]:
        """The running tasks (of ``inv``, or all)."""
        return [t for t in self.tasks.values() if t.live and (inv is None or t.parent is inv)]

    def remind(self, inv: Invocation) -> None:
        """The child ``inv`` was told that a turn without a call returns nothing."""
        self.by_inv[inv.id].mark_reminded()

    async def apply(
        self, inv: Invocation, rc: RecordedCall, binding: ToolBinding, effect: AgentToolEffect
    ) -> AgentToolResult:
        """The result of a delegate, await or task.return call."""
        if isinstance(effect, DelegateRequested):
            return self.delegate(inv, rc, binding, effect)
        if isinstance(effect, AwaitRequested):
            return await self.wait(inv, rc, binding, effect, block=self.background)
        if isinstance(effect, TaskReturned):
            return self.task_return(inv, rc, binding, effect)
        raise TypeError(f"not an agent effect: {effect!r}")

    # ------------------------------------------------------------ delegate

    def target(
        self,
        rc: RecordedCall,
        binding: ToolBinding,
        caller: Profile,
        agent_id: str,
        operation: str,
        code: ErrorCode,
    ) -> AgentToolResult | Profile:
        """The target profile, or the refusal naming the reason and the valid candidates."""
        target = self.source.get(agent_id)
        if target is not None and target_refusal(caller, target, operation) is None:
            return target
        valid = candidates(self.source.all(), caller, operation)
        refused = unusable_target(rc, binding, caller, agent_id, target, operation, code, valid)
        assert refused is not None  # the target is missing or refused
        return refused

    def delegate(
        self, inv: Invocation, rc: RecordedCall, binding: ToolBinding, effect: DelegateRequested
    ) -> AgentToolResult:
        """Start a delegated task, or refuse it (the policy's rules)."""
        run = self.run
        caller = self.caller(inv)
        denied = ErrorCode.AGENT_DELEGATION_POLICY_DENIED
        refused = delegator_refusal(rc, binding, caller, is_child=inv.is_child)
        if refused is not None:
            return refused
        target = self.target(rc, binding, caller, effect.agent_id, "delegate", denied)
        if isinstance(target, AgentToolResult):
            return target
        mine = [t for t in self.tasks.values() if t.parent.id == inv.id]
        refused = delegation_budget_refusal(
            rc,
            binding,
            inv.snapshot,
            caller,
            started=len(mine),
            running=sum(1 for t in mine if t.live),
        )
        if refused is not None:
            return refused
        waiter = inv.snapshot.name_of(AWAIT)
        repeats = sum(1 for t in self.tasks.values() if t.agent_id == target.id)
        key = target.id if repeats == 0 else f"{target.id}-{repeats + 1:03d}"
        task_id = f"task_{uuid.uuid4().hex}"
        inv_id = f"inv_{secrets.token_hex(6)}"
        snapshot = self.child_snapshot(target)
        child = run.add_invocation(
            inv_id,
            snapshot,
            child_system_prompt(target, snapshot, caller.id),
            task_brief(effect.task, key, run.scene),
            kind="child",
            profile=target,
            parent_id=inv.id,
            task_id=task_id,
        )
        title = str(effect.task.get("title") or effect.task["objective"])[:80]
        task = AgentTask(task_id, target.id, key, target, inv, child, title)
        self.tasks[task_id] = task
        self.by_inv[inv_id] = task
        self.journal.write(
            ev.TaskStarted(
                task_id=task_id,
                agent_id=target.id,
                key=key,
                mode="return_to_parent",
                invocation_id=inv_id,
                parent_invocation_id=inv.id,
                call_id=rc.call_id,
                title=title,
            )
        )
        self.host.invocation_started(child)
        if self.background:
            task.run_by(asyncio.get_running_loop().create_task(self.host.drive_child(task)))
        text = f"Started {task_id} for agent {target.id}; it runs in the background. " + (
            f"Collect its result with {waiter}."
            if waiter
            else "Its result is added to your next turn when it ends."
        )
        return _result(
            rc, binding, text, {"taskId": task_id, "status": "running", "agentId": target.id}
        )

    def child_snapshot(self, target: Profile) -> ToolSnapshot:
        """A child's frozen tool set, shared with earlier children of ``target``
        while the catalog gives the same one (building it is cheap; recording
        it per child was not)."""
        run = self.run
        snap_id = f"snap_{secrets.token_hex(6)}"
        fresh = run.tools.snapshot(target, snap_id, child=True)
        known = self.child_snapshots.get(target.id)
        if known is not None and replace(fresh, id=known.id) == known:
            return known
        # No fsync, like the child's other records: a child whose snapshot a power
        # failure took is not resumed (its caller is not told about it again).
        fresh.save(run.run_dir / run_layout.snapshot_file(fresh.id), durable=False)
        self.child_snapshots[target.id] = fresh
        return fresh

    # ------------------------------------------------------------ await

    async def wait(
        self,
        inv: Invocation,
        rc: RecordedCall,
        binding: ToolBinding,
        effect: AwaitRequested,
        *,
        block: bool = True,
    ) -> AgentToolResult:
        """The await call's result; ``block=False`` answers now (the host waited already),
        or raises :class:`AwaitingTasks` the first time the call would wait."""
        mine = self.owned(inv)
        listed = [(t.id, t.agent_id, t.status) for t in mine]
        refused = await_refusal(rc, binding, inv.snapshot, listed, effect.task_ids)
        if refused is not None:
            return refused
        if effect.task_ids is None:
            chosen = mine
        else:
            known = {t.id: t for t in mine}
            chosen = [known[i] for i in dict.fromkeys(effect.task_ids)]
        mode = effect.mode
        running = [t for t in chosen if t.live]
        news = [t for t in chosen if not t.live and not t.seen]
        wait_for: list[AgentTask] = []
        if mode == "allCompleted" or (mode == "nextCompleted" and not news):
            wait_for = running
        timed_out = False
        continued = self.awaiting.pop((inv.id, rc.call_id), None) is not None
        if wait_for and not block:
            if not continued:  # the first time: the step ends and the host waits
                self._wait_outside(inv, rc, effect, wait_for)
            # The host waited until enough tasks ended or the timeout passed, and
            # still none that this call waits for ended: it timed out.
            timed_out = True
        elif wait_for:
            how = asyncio.ALL_COMPLETED if mode == "allCompleted" else asyncio.FIRST_COMPLETED
            waiters = [asyncio.ensure_future(t.done.wait()) for t in wait_for]
            try:
                _, pending = await asyncio.wait(
                    waiters, timeout=effect.timeout_ms / 1000, return_when=how
                )
            finally:
                for w in waiters:
                    w.cancel()
            timed_out = bool(pending) and (
                how is asyncio.ALL_COMPLETED or len(pending) == len(waiters)
            )
        budget = CHARS_PER_TOKEN
        entries = [t.entry(budget * t.profile.delegation.result_budget_tokens) for t in chosen]
        for t in chosen:
            if not t.live:
                t.mark_seen()
        still = sum(1 for t in chosen if t.live)
        if timed_out:
            head = (
                f"Timed out after {effect.timeout_ms} ms; {still} task(s) still running. "
                f"Call {binding.model_name} again later, or go on meanwhile."
            )
        elif still:
            head = f"{still} task(s) still running; call {binding.model_name} to wait for them."
        else:
            head = "All listed tasks have ended."
        text = f"{head}\n{task_report(entries)}"
        structured = {"mode": mode, "timedOut": timed_out, "tasks": entries}
        return _result(rc, binding, text, structured)

    def _wait_outside(
        self, inv: Invocation, rc: RecordedCall, effect: AwaitRequested, tasks: list[AgentTask]
    ) -> None:
        """Leave the call waiting (durable engines): journaled, so any worker continues it."""
        ids = [t.id for t in tasks]
        asked = None if effect.task_ids is None else list(effect.task_ids)
        self.journal.write(
            ev.TaskAwaitWaiting(
                invocation_id=inv.id,
                call_id=rc.call_id,
                task_ids=ids,
                mode=effect.mode,
                timeout_ms=effect.timeout_ms,
                # the gate counted the call already; a fresh engine must not lose that
                gate=inv.gate.state(),
                effect=ev.AwaitEffect(asked, effect.mode),
            )
        )
        self.awaiting[inv.id, rc.call_id] = effect
        raise AwaitingTasks(rc.call_id, ids, effect.mode, effect.timeout_ms)

    def unseen(self, inv: Invocation) -> list[AgentTask]:
        """The tasks of ``inv`` that ended and were not reported to it yet."""
        return [t for t in self.owned(inv) if not t.live and not t.seen]

    def inject(self, inv: Invocation) -> None:
        """Finished results the caller has not seen, added before its next turn (once)."""
        fresh = self.unseen(inv)
        if not fresh:
            return
        entries = [
            t.entry(CHARS_PER_TOKEN * t.profile.delegation.result_budget_tokens) for t in fresh
        ]
        for t in fresh:
            t.mark_seen()
        text = "## Finished tasks\n" + task_report(entries)
        self.journal.write(
            ev.TaskResultsInjected(invocation_id=inv.id, task_ids=[t.id for t in fresh], text=text)
        )
        inv.add_user(UserMessage(text))

    # ------------------------------------------------------------ task.return and endings

    def task_return(
        self, inv: Invocation, rc: RecordedCall, binding: ToolBinding, effect: TaskReturned
    ) -> AgentToolResult:
        """End the calling child's task with the result it returns."""
        task = self.by_inv.get(inv.id)
        refused = task_return_refusal(rc, binding, None if task is None else (task.id, task.status))
        if refused is not None:
            return refused
        assert task is not None  # refused otherwise
        payload = dict(effect.payload)
        self.finish(task, str(payload.get("status", "completed")), payload, "returned")
        assert task.result is not None
        text = (
            f"Result returned to agent {self.caller(task.parent).id} "
            f"({task.result['summaryPath']}). Your work is done."
        )
        return _result(
            rc, binding, text, {"taskId": task.id, "summaryPath": task.result["summaryPath"]}
        )

    def finish(self, task: AgentTask, status: str, payload: dict[str, Any], reason: str) -> None:
        """End a task: write its result files, journal it, wake the waiters."""
        if not task.live:
            return
        run = self.run
        path = summary_path(run.scene, task.key)
        record: dict[str, Any] = {
            "kind": RESULT_KIND,
            "schemaVersion": 1,
            "taskId": task.id,
            "invocationId": task.inv.id,
            "parentInvocationId": task.parent.id,
            "agentId": task.agent_id,
            "key": task.key,
            "status": status,
            "reason": reason,
            "summaryPath": path,
            **{k: v for k, v in payload.items() if k != "status"},
        }
        task.end(status, record)
        try:
            # Without fsync, like the child's other records; the caller reads the
            # result from memory, and a resumed run does not reload it.
            text = result_markdown(task.title, task.agent_id, task.id, record)
            run.workspace.write_atomic(path, text.encode("utf-8"), durable=False)
        finally:
            self.journal.write(
                ev.TaskFinished(
                    task_id=task.id,
                    agent_id=task.agent_id,
                    invocation_id=task.inv.id,
                    parent_invocation_id=task.parent.id,
                    status=status,
                    reason=reason,
                    summary_path=path,
                    result=record,
                )
            )
            task.wake()

    def fail(self, task: AgentTask, reason: str, summary: str) -> None:
        """End a task as failed, for ``reason``; ``summary`` is what its caller reads."""
        self.finish(task, "failed", {"summary": summary}, reason)

    def cancel(self, task_id: str) -> bool:
        """Stop one live task (it is reported to its caller as failed)."""
        task = self.tasks.get(task_id)
        if task is None or not task.live or task.runner is None:
            return False
        task.runner.cancel()
        return True

    def stop_all(self, why: str) -> None:
        """Cancel every live task (the run is ending); pending calls are paired."""
        for task in self.live():
            if task.runner is not None:
                task.runner.cancel()
            self.host.pair_pending(task.inv)
            self.finish(task, "cancelled", {"summary": f"Stopped: {why}."}, "run_ended")

    # ------------------------------------------------------------ the journal's fold

    def fold(
        self,
        event: ev.TaskStarted
        | ev.TaskFinished
        | ev.TaskResultsInjected
        | ev.TaskAwaitWaiting
        | ev.InvocationStarted,
        by_id: Mapping[str, Invocation],
    ) -> Invocation | None:
        """Apply one of the tasks' journal events; a child's start gives its invocation."""
        match event:
            case ev.TaskStarted():
                self._started[event.invocation_id] = event
            case ev.InvocationStarted():
                return self._rebuild_child(event, by_id)
            case ev.TaskFinished():
                task = self.tasks.get(event.task_id)
                if task is not None:
                    task.end(event.status, event.result or {"summaryPath": event.summary_path})
                    task.wake()
            case ev.TaskResultsInjected():
                self._saw(event.task_ids)
            case ev.TaskAwaitWaiting():
                asked = event.effect.task_ids
                self.awaiting[event.invocation_id, event.call_id] = AwaitRequested(
                    None if asked is None else tuple(asked), event.effect.mode, event.timeout_ms
                )
        return None

    def fold_result(self, result: Mapping[str, Any]) -> None:
        """A stored await result: the tasks it reported as ended were seen."""
        if result.get("toolId") != str(AWAIT) or result.get("isError"):
            return
        entries = (result.get("structured") or {}).get("tasks") or []
        self._saw(e["taskId"] for e in entries if e.get("status") != "running")

    def _saw(self, task_ids: Iterable[str]) -> None:
        for task_id in task_ids:
            task = self.tasks.get(task_id)
            if task is not None:
                task.mark_seen()

    def _rebuild_child(
        self, p: ev.InvocationStarted, by_id: Mapping[str, Invocation]
    ) -> Invocation | None:
        """A child invocation and its task from their start events; None if not all is there
        (its snapshot lost to a power failure, or its profile gone): it is not resumed."""
        started = self._started.pop(p.invocation_id, None)
        parent = by_id.get(str(p.parent_invocation_id))
        profile = self.source.get(p.agent_id or "")
        prompt = p.prompt
        if started is None or parent is None or profile is None or prompt is None:
            return None
        run = self.run
        snapshot = self.child_snapshots.get(profile.id)
        if snapshot is None or snapshot.id != p.snapshot_id:
            try:
                snapshot = ToolSnapshot.load(run.run_dir / run_layout.snapshot_file(p.snapshot_id))
            except (OSError, ValueError):
                return None
            self.child_snapshots[profile.id] = snapshot
        child = by_id.get(p.invocation_id) or run.add_invocation(  # older run.json lists it
            p.invocation_id,
            snapshot,
            prompt.system,
            prompt.user,
            kind="child",
            profile=profile,
            parent_id=parent.id,
            task_id=started.task_id,
        )
        task = AgentTask(
            started.task_id, profile.id, started.key, profile, parent, child, started.title
        )
        self.tasks[task.id] = task
        self.by_inv[child.id] = task
        return child

    def restart(self) -> None:
        """Run the live tasks again in the background (a resumed run in one process)."""
        if not self.background:
            return
        for task in self.live():
            if task.runner is None:
                task.run_by(asyncio.get_running_loop().create_task(self.host.drive_child(task)))
