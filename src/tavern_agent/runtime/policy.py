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
* **No stranded runs.** When a foreground run's call budget is spent before
  any explicit commit, nothing the model can do will finish the run (commits
  are refused for the budget, and finishing needs a commit): the run stops at
  once (``agent.tool_budget_exhausted``) instead of burning its rounds, with
  the auto-published draft, if any, making it a partial success.

Every refusal is written with :meth:`AgentToolResult.failure` and names one
next step with a tool of the caller's own snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence

from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.ids import ToolId
from tavern_agent.core.results import AgentToolResult, FilePatched, FileWritten
from tavern_agent.providers.transcript import RecordedCall
from tavern_agent.runtime.turns import Stopped
from tavern_agent.tools.snapshot import ToolBinding, ToolSnapshot
from tavern_agent.workspace.roots import MESSAGE_BODY

COMMIT = ToolId.builtin("workspace.commit")
FINISH = ToolId.builtin("workspace.finish")
SHELL = ToolId.builtin("workspace.shell")
WRITE = ToolId.builtin("workspace.write_file")
TASK_RETURN = ToolId.builtin("task.return")
AUTO_PUBLISH_REASON = "auto-publish: the message body before the first explicit commit"


def after_finish_result(call: RecordedCall, binding: ToolBinding) -> AgentToolResult:
    """A finishing call that was not the last of its turn."""
    name = binding.model_name
    text = (
        f"{name} was not run: it must be the last call of its turn. "
        f"The other calls ran; call {name} again on its own."
    )
    return AgentToolResult.failure(
        call.call_id, binding.tool_id, ErrorCode.AGENT_TOOL_AFTER_FINISH, text
    )


def second_handoff_result(call: RecordedCall, binding: ToolBinding) -> AgentToolResult:
    """The refusal of a second handoff in one turn; the first one stands."""
    text = (
        f"Only one {binding.model_name} per turn: the earlier one in this turn stands. "
        "No action was taken for this one."
    )
    return AgentToolResult.failure(
        call.call_id, binding.tool_id, ErrorCode.AGENT_TOOL_AFTER_FINISH, text
    )


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
    write = snapshot.name_of(WRITE)
    steps = f"write the reply to {MESSAGE_BODY} with {write}, " if write else ""
    how = f"{steps}publish it with {commit}" if commit else "publish the reply"
    text = f"Not finished: nothing is in the chat yet. First {how}, then finish."
    return AgentToolResult.failure(
        call.call_id, FINISH, ErrorCode.AGENT_FOREGROUND_COMMIT_REQUIRED, text
    )


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
