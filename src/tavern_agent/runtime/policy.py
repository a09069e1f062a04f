"""The run policy: every rule by which the runtime refuses a call or ends a run.

The gate checks what one call may do on its own (budget, name, arguments,
availability). The rules here need the run around the call, and live in this
one module so they can be read, and changed, together:

* **A finishing call is last.** ``workspace.finish``, ``agent.handoff`` and
  ``task.return`` must be the last call of their turn; otherwise they are not
  run (``agent.tool_after_finish``). Only one handoff per turn stands.
* **Finishing needs a clean turn and a reply.** ``workspace.finish`` is refused
  for a delegated child (``agent.child_finish_denied``: children return with
  ``task.return``), after an earlier call of the same turn failed
  (``agent.finish_after_failed_call``: the commit stays, the run stays open so
  the model can look at the failure), and for a foreground chat run with no
  explicit commit yet (``agent.foreground_commit_required``; a commit made
  before a handoff counts).
* **Auto-publish.** A successful edit of the message body file makes it the
  auto-commit candidate; a failed shell call clears it (the file may be half
  edited). Before the first explicit commit, a foreground chat run publishes
  the candidate at the end of a turn, at most once per round, so a run that
  is stopped early still leaves its draft in the chat.
* **Rounds are limited.** A run whose rounds are used up without an
  accepted finish stops (``model.tool_call_required``); a delegated task that
  uses up its rounds, or ends a second turn without a call, fails.
* **Who may use whom.** A profile's delegation settings decide who delegates
  or hands off to whom, how many tasks a caller may start and run at once,
  and how deep handoffs go; ``agent.await`` and ``task.return`` are refused
  for tasks that are not the caller's, or already returned.
* **Repeated mistakes end.** The same call (name and arguments) failing with
  the same error code again and again, with no success of it between, is a
  model going round in circles (other calls between do not break the
  streak). The third such failure's result is a shorter, stronger hint that
  names what is valid; once a call has failed ``limits.maxIdenticalFailures``
  times so, the main line stops at the end of the turn (``model.stuck``;
  a partial success if it committed). So does a chat run whose model has
  answered that many turns in a row without a call, each reminded how to
  finish. The streaks are read from the transcript, so a resumed run counts
  as the live one did.
* **No stranded runs.** When a foreground run's call budget is spent before
  any explicit commit, nothing the model can do will finish the run (commits
  are refused for the budget, and finishing needs a commit): the run stops at
  once (``agent.tool_budget_exhausted``) instead of burning its rounds, with
  the auto-published draft, if any, making it a partial success.

Every refusal is written with :meth:`AgentToolResult.failure` and names one
next step with a tool of the caller's own snapshot. The modules that apply
these rules (the loop, the delegation) only ask; the codes and texts are here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tavern_agent.core.arguments import ToolArguments, parse_arguments
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.profile import Profile
from tavern_agent.core.results import AgentToolResult, FilePatched, FileWritten
from tavern_agent.core.tool_ids import (
    AWAIT,
    COMMIT,
    DELEGATE,
    FINISH,
    SHELL,
    TASK_RETURN,
    WRITE_FILE,
)
from tavern_agent.providers.transcript import AssistantMessage, RecordedCall, TranscriptItem
from tavern_agent.runtime.turns import Stopped
from tavern_agent.tools.snapshot import ToolBinding, ToolSnapshot
from tavern_agent.workspace.roots import MESSAGE_BODY

CANCELLED_TEXT = "Not run: the run was cancelled before this call started."
AUTO_PUBLISH_REASON = "auto-publish: the message body before the first explicit commit"


def _refused(
    call: RecordedCall, binding: ToolBinding, code: ErrorCode, text: str, **details: Any
) -> AgentToolResult:
    """The refusal of ``call`` to the tool of ``binding``: one error code, its text."""
    return AgentToolResult.failure(call.call_id, binding.tool_id, code, text, **details)


def after_finish_result(call: RecordedCall, binding: ToolBinding) -> AgentToolResult:
    """A finishing call that was not the last of its turn."""
    name = binding.model_name
    text = (
        f"{name} was not run: it must be the last call of its turn. "
        f"The other calls ran; call {name} again on its own."
    )
    return _refused(call, binding, ErrorCode.AGENT_TOOL_AFTER_FINISH, text)


def second_handoff_result(call: RecordedCall, binding: ToolBinding) -> AgentToolResult:
    """The refusal of a second handoff in one turn; the first one stands."""
    text = (
        f"Only one {binding.model_name} per turn: the earlier one in this turn stands. "
        "No action was taken for this one."
    )
    return _refused(call, binding, ErrorCode.AGENT_TOOL_AFTER_FINISH, text)


def finish_refusal(
    call: RecordedCall,
    snapshot: ToolSnapshot,
    *,
    is_child: bool,
    foreground: bool,
    explicit_commits: int,
    failed_before: Sequence[str],
) -> AgentToolResult | None:
    """Why a ``workspace.finish`` call is not accepted now, or ``None`` to accept it.

    ``failed_before`` names the calls of the same turn that failed before it.
    """
    if is_child:
        back = snapshot.name_of(TASK_RETURN) or "task_return"
        text = f"Delegated agents do not finish the run: return your result with {back}."
        return AgentToolResult.failure(
            call.call_id, FINISH, ErrorCode.AGENT_CHILD_FINISH_DENIED, text
        )
    if failed_before:
        names = ", ".join(dict.fromkeys(failed_before))
        text = (
            f"Not finished: an earlier call of this turn failed ({names}). Read its result, "
            "fix what it reports if needed, then finish in a turn of its own."
        )
        return AgentToolResult.failure(
            call.call_id, FINISH, ErrorCode.AGENT_FINISH_AFTER_FAILED_CALL, text
        )
    if foreground and explicit_commits == 0:
        return _commit_required(call, snapshot)
    return None


def _commit_required(call: RecordedCall, snapshot: ToolSnapshot) -> AgentToolResult:
    commit = snapshot.name_of(COMMIT)
    write = snapshot.name_of(WRITE_FILE)
    steps = f"write the reply to {MESSAGE_BODY} with {write}, " if write else ""
    how = f"{steps}publish it with {commit}" if commit else "publish the reply"
    text = f"Not finished: nothing is in the chat yet. First {how}, then finish."
    return AgentToolResult.failure(
        call.call_id, FINISH, ErrorCode.AGENT_FOREGROUND_COMMIT_REQUIRED, text
    )


def cancelled_result(call: RecordedCall) -> AgentToolResult:
    """A call of a cancelled run that had not started: it was not run."""
    return AgentToolResult.failure(call.call_id, None, ErrorCode.RUN_CANCELLED, CANCELLED_TEXT)


def confirmed_commit_result(call: RecordedCall, path: str) -> AgentToolResult:
    """A commit whose call was interrupted but whose effect the chat file confirms."""
    return AgentToolResult(
        call_id=call.call_id,
        tool_id=COMMIT,
        content=f"Committed {path}; the run was interrupted after the chat was updated.",
        structured={"path": path, "confirmedOnResume": True},
    )


# ---------------------------------------------------------------- auto-publish


def candidate_after(result: AgentToolResult, effect: object, candidate: bool) -> bool:
    """The auto-commit candidate after one call: set by a body edit, cleared by a failed shell."""
    if isinstance(effect, FileWritten | FilePatched) and effect.path == MESSAGE_BODY:
        return True
    if result.is_error and result.tool_id == SHELL:
        return False
    return candidate


def should_auto_publish(
    *, foreground: bool, explicit_commits: int, candidate: bool, published_round: int, round: int
) -> bool:
    """Publish the body file at this turn's end (before any explicit commit, once a round)."""
    return foreground and explicit_commits == 0 and candidate and published_round < round


def budget_stop(
    snapshot: ToolSnapshot, calls_used: int, *, foreground: bool, explicit_commits: int
) -> Stopped | None:
    """Stop a foreground run whose budget is spent before any explicit commit."""
    limit = snapshot.max_calls_per_invocation
    if not foreground or explicit_commits or calls_used < limit:
        return None
    text = (
        f"All {limit} tool calls were used before the reply was committed, so the run "
        "cannot commit or finish any more."
    )
    return Stopped(ErrorCode.AGENT_TOOL_BUDGET_EXHAUSTED, text)


# ---------------------------------------------------------------- repeated mistakes

HINT_AT = 3  # the identical failure whose result becomes the stronger hint

CallKey = tuple[str, str]


def call_key(call: RecordedCall) -> CallKey:
    """What makes two calls the same call: the name and the arguments (key order aside)."""
    parsed = parse_arguments(call.call.raw_arguments)
    if isinstance(parsed, ToolArguments):
        text = json.dumps(parsed.values, sort_keys=True, ensure_ascii=False, default=repr)
    else:
        text = f"invalid:{parsed.raw!r}"
    return str(call.name), text


@dataclass(frozen=True, slots=True)
class Streak:
    """A call's identical failures in a row: the error code and how many times."""

    code: ErrorCode | None
    count: int


def _after(last: Streak | None, result: AgentToolResult) -> Streak:
    """A call's streak once it got ``result``."""
    if not result.is_error:
        return Streak(None, 0)
    if last is not None and last.count and last.code is result.error_code:
        return Streak(last.code, last.count + 1)
    return Streak(result.error_code, 1)


def failure_streaks(pairs: Iterable[tuple[RecordedCall, AgentToolResult]]) -> dict[CallKey, Streak]:
    """Each call's streak after ``pairs`` (calls with their results, in order).

    A success of the call, or a failure with another code, starts its streak over.
    """
    streaks: dict[CallKey, Streak] = {}
    for call, result in pairs:
        key = call_key(call)
        streaks[key] = _after(streaks.get(key), result)
    return streaks


def repeats(streaks: dict[CallKey, Streak], call: RecordedCall, result: AgentToolResult) -> int:
    """How many times in a row ``call`` has now failed as ``result`` did (0: it did not fail)."""
    return _after(streaks.get(call_key(call)), result).count


def repeat_hint(result: AgentToolResult, count: int) -> AgentToolResult:
    """The stronger, shorter result of a call that failed the same way ``count`` times.

    It leads with what is valid when the tool said so (a ``valid`` detail of its
    error, e.g. "Only floors 0-3 exist."), else with the error's first sentence.
    """
    error = result.structured.get("error") if isinstance(result.structured, dict) else None
    valid = error.get("valid") if isinstance(error, dict) else None
    lead = valid if isinstance(valid, str) and valid else _first_sentence(result.content)
    text = f"{lead} Failed {count} times: do not repeat this call."
    return replace(result, content=text)


def _first_sentence(text: str) -> str:
    line = text.strip().split("\n", 1)[0]
    end = line.find(". ")
    return line if end < 0 else line[: end + 1]


def stuck_stop(
    streaks: dict[CallKey, Streak], calls: Sequence[RecordedCall], limit: int
) -> Stopped | None:
    """Stop the main line when one of the turn's ``calls`` failed ``limit`` times in a row."""
    for call in calls:
        streak = streaks.get(call_key(call))
        if streak is not None and streak.count >= limit:
            code = "" if streak.code is None else f" ({streak.code.value})"
            text = (
                f"{call.name} failed {streak.count} times in a row with the same arguments "
                f"and the same error{code}; the model did not change course."
            )
            return Stopped(ErrorCode.MODEL_STUCK, text)
    return None


def silent_stop(items: Sequence[TranscriptItem], limit: int) -> Stopped | None:
    """Stop the main line once the model has answered ``limit`` turns in a row without a
    call, each after being told how to finish: it is not going to."""
    count = 0
    for item in reversed(items):
        if isinstance(item, AssistantMessage):
            if item.calls:
                break
            count += 1
    if count < limit:
        return None
    text = (
        f"The model answered {count} times in a row without a tool call, told each time how "
        "to finish; it did not change course."
    )
    return Stopped(ErrorCode.MODEL_STUCK, text)


# ---------------------------------------------------------------- rounds


def rounds_stop(round: int, max_rounds: int) -> Stopped | None:
    """Stop the run's main line once its rounds are used up without an accepted finish."""
    if round < max_rounds:
        return None
    text = (
        f"The {max_rounds} rounds of this run are used up and no finishing tool call was accepted."
    )
    return Stopped(ErrorCode.MODEL_TOOL_CALL_REQUIRED, text)


@dataclass(frozen=True, slots=True)
class TaskFailure:
    """Why a delegated task ends as failed: the reason code and its caller's summary."""

    reason: str
    summary: str


def silent_task_failure(last_text: str) -> TaskFailure:
    """A task that ended a turn without a call after it was told how to return."""
    text = last_text.strip() or "(no text)"
    return TaskFailure("no_return", f"The agent stopped without returning. Its last text: {text}")


def task_rounds_failure(round: int, max_rounds: int) -> TaskFailure | None:
    """A task that used up its rounds without returning a result."""
    if round < max_rounds:
        return None
    return TaskFailure(
        "rounds_used", f"The agent used its {max_rounds} rounds without returning a result."
    )


def task_return_reminder(snapshot: ToolSnapshot) -> str:
    """What a task is told after a turn without a call (once; the next one fails it)."""
    name = snapshot.name_of(TASK_RETURN) or "task_return"
    return (
        f"Your turn had no tool call, so nothing was returned. Call {name} alone with "
        "your summary and status; it is the only way to return your result."
    )


# ---------------------------------------------------------------- agents


def target_refusal(caller: Profile, target: Profile, operation: str) -> str | None:
    """Why ``target`` cannot be used by ``caller`` for ``operation`` (delegate/handoff)."""
    d = target.delegation
    if not d.callable:
        return "it is not callable by other agents"
    if not d.allows_caller(caller.id):
        return f"it does not accept calls from {caller.id}"
    if operation == "delegate" and not d.allow_as_subagent:
        return "it does not take delegated tasks"
    if operation == "handoff":
        if not d.allow_as_handoff_target:
            return "it does not take handoffs"
        if target.id == caller.id:
            return "it is the current agent"
    return None


def candidates(profiles: Iterable[Profile], caller: Profile, operation: str) -> list[str]:
    """The ids of the ``profiles`` that ``caller`` may use for ``operation``."""
    return [p.id for p in profiles if target_refusal(caller, p, operation) is None]


def unusable_target(
    call: RecordedCall,
    binding: ToolBinding,
    caller: Profile,
    agent_id: str,
    target: Profile | None,
    operation: str,
    code: ErrorCode,
    valid: Sequence[str],
) -> AgentToolResult | None:
    """The refusal of a target that is missing or not usable (``None``: it is usable).

    ``valid`` are the candidates the refusal offers instead.
    """
    why = None if target is None else target_refusal(caller, target, operation)
    if target is not None and why is None:
        return None
    listing = (
        f"Agents you can {operation} to: {', '.join(valid)}."
        if valid
        else (f"No agent accepts a {operation} from {caller.id}.")
    )
    if target is None:
        text = f"No agent {agent_id!r}. {listing}"
        return _refused(
            call,
            binding,
            ErrorCode.AGENT_TARGET_PROFILE_NOT_FOUND,
            text,
            candidates=list(valid),
        )
    text = f"Agent {agent_id} cannot be used: {why}. {listing}"
    return _refused(call, binding, code, text, candidates=list(valid))


def delegator_refusal(
    call: RecordedCall, binding: ToolBinding, caller: Profile, *, is_child: bool
) -> AgentToolResult | None:
    """A caller that may not delegate at all (a delegated child never may)."""
    if is_child or not caller.delegation.can_delegate:
        text = f"Agent {caller.id} may not delegate. Do the work yourself."
        return _refused(call, binding, ErrorCode.AGENT_DELEGATION_POLICY_DENIED, text)
    return None


def delegation_budget_refusal(
    call: RecordedCall,
    binding: ToolBinding,
    snapshot: ToolSnapshot,
    caller: Profile,
    *,
    started: int,
    running: int,
) -> AgentToolResult | None:
    """A delegation over the caller's limits: tasks per run, tasks at once."""
    limits = caller.delegation
    waiter = snapshot.name_of(AWAIT)
    wait_one = f"Wait for one with {waiter}" if waiter else "Wait until one ends"
    budget = ErrorCode.AGENT_DELEGATION_BUDGET_EXHAUSTED
    if started >= limits.max_invocations_per_run:
        text = (
            f"Not started: all {limits.max_invocations_per_run} tasks of this run are used. "
            "Finish with the results you have."
        )
        return _refused(call, binding, budget, text, limit=limits.max_invocations_per_run)
    if running >= limits.max_concurrent_invocations:
        text = (
            f"Not started: {running} tasks already run (limit "
            f"{limits.max_concurrent_invocations}). {wait_one}, then retry."
        )
        return _refused(call, binding, budget, text, limit=limits.max_concurrent_invocations)
    return None


def await_refusal(
    call: RecordedCall,
    binding: ToolBinding,
    snapshot: ToolSnapshot,
    mine: Sequence[tuple[str, str, str]],
    asked: Sequence[str] | None,
) -> AgentToolResult | None:
    """An await for no task, or for tasks that are not the caller's.

    ``mine`` lists the caller's tasks as (task id, agent id, status); ``asked``
    the task ids the call names (``None``: all of the caller's).
    """
    if not mine:
        delegate = snapshot.name_of(DELEGATE)
        text = "You have no delegated tasks." + (f" Start one with {delegate}." if delegate else "")
        return _refused(call, binding, ErrorCode.AGENT_NO_CHILD_TASKS, text)
    known = {task_id for task_id, _, _ in mine}
    unknown = [i for i in asked or () if i not in known]
    if not unknown:
        return None
    text = (
        f"Not your task(s): {', '.join(unknown)}. Your tasks: "
        + ", ".join(f"{task_id} ({agent_id}, {status})" for task_id, agent_id, status in mine)
        + "."
    )
    return _refused(call, binding, ErrorCode.AGENT_AWAIT_TASK_NOT_FOUND, text, unknown=unknown)


def task_return_refusal(
    call: RecordedCall, binding: ToolBinding, task: tuple[str, str] | None
) -> AgentToolResult | None:
    """A ``task.return`` by a caller that is no live task; ``task`` is (task id, status)."""
    if task is None:
        text = "Only a delegated child agent can return a task; finish your work another way."
        return _refused(call, binding, ErrorCode.AGENT_TASK_RETURN_DENIED, text)
    task_id, status = task
    if status == "running":
        return None
    text = f"{task_id} has returned already ({status}); nothing more to do."
    return _refused(call, binding, ErrorCode.AGENT_TASK_ALREADY_FINISHED, text)


def handoff_refusal(
    call: RecordedCall,
    binding: ToolBinding,
    snapshot: ToolSnapshot,
    caller: Profile,
    *,
    is_child: bool,
    running: Sequence[str],
) -> AgentToolResult | None:
    """A caller that may not hand off, or not yet (``running``: its live tasks' ids)."""
    if is_child or not caller.delegation.can_handoff:
        text = f"Agent {caller.id} may not hand off. Finish the work yourself."
        return _refused(call, binding, ErrorCode.AGENT_HANDOFF_POLICY_DENIED, text)
    if not running:
        return None
    waiter = snapshot.name_of(AWAIT)
    text = f"Not handed off: {len(running)} task(s) still run ({', '.join(running)}). " + (
        f"Wait for them with {waiter}, then hand off." if waiter else "Hand off once they end."
    )
    return _refused(call, binding, ErrorCode.AGENT_HANDOFF_PENDING_TASKS, text)


def handoff_depth_refusal(
    call: RecordedCall, binding: ToolBinding, caller: Profile, depth: int
) -> AgentToolResult | None:
    """A handoff past the caller's handoff depth (``depth``: handoffs in the run so far)."""
    if depth < caller.delegation.max_handoff_depth:
        return None
    text = (
        f"Not handed off: this run was handed off {depth} time(s), the limit. "
        "Finish the work yourself."
    )
    return _refused(
        call,
        binding,
        ErrorCode.AGENT_HANDOFF_DEPTH_EXHAUSTED,
        text,
        depth=depth,
    )
