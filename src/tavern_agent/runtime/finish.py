"""The finish policy: which finishing calls the runtime accepts.

A finishing tool (``workspace.finish``, later handoff and ``task.return``)
must be the last call of its turn, else it is not run and gets the
recoverable ``agent.tool_after_finish``. A foreground chat run must have a
confirmed commit before ``workspace.finish`` is accepted, else
``agent.foreground_commit_required``.
"""

from __future__ import annotations

from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.ids import ToolId
from tavern_agent.core.results import AgentToolResult
from tavern_agent.providers.transcript import RecordedCall
from tavern_agent.tools.snapshot import ToolBinding, ToolSnapshot
from tavern_agent.workspace.roots import MESSAGE_BODY


def _error(
    call: RecordedCall, tool_id: ToolId | None, code: ErrorCode, text: str
) -> AgentToolResult:
    return AgentToolResult(
        call_id=call.call_id,
        tool_id=tool_id,
        content=text,
        structured={"error": {"code": code.value, "message": text}},
        is_error=True,
        error_code=code,
    )


def after_finish_result(call: RecordedCall, binding: ToolBinding) -> AgentToolResult:
    name = binding.model_name
    text = (
        f"{name} was not run: it must be the last call of its turn. "
        f"The other calls ran; call {name} again on its own."
    )
    return _error(call, binding.tool_id, ErrorCode.AGENT_TOOL_AFTER_FINISH, text)


def second_handoff_result(call: RecordedCall, binding: ToolBinding) -> AgentToolResult:
    """The refusal of a second handoff in one turn; the first one stands."""
    text = (
        f"Only one {binding.model_name} per turn: the earlier one in this turn stands. "
        "No action was taken for this one."
    )
    return _error(call, binding.tool_id, ErrorCode.AGENT_TOOL_AFTER_FINISH, text)


def commit_required_result(call: RecordedCall, snapshot: ToolSnapshot) -> AgentToolResult:
    """The refusal of a finish before any confirmed commit (foreground chat runs)."""
    commit = snapshot.name_of(ToolId.builtin("workspace.commit"))
    write = snapshot.name_of(ToolId.builtin("workspace.write_file"))
    steps = f"write the reply to {MESSAGE_BODY} with {write}, " if write else ""
    how = f"{steps}publish it with {commit}" if commit else "publish the reply"
    text = f"Not finished: nothing is in the chat yet. First {how}, then finish."
    return _error(
        call, ToolId.builtin("workspace.finish"), ErrorCode.AGENT_FOREGROUND_COMMIT_REQUIRED, text
    )


def confirmed_commit_result(call: RecordedCall, path: str) -> AgentToolResult:
    """A commit whose call was interrupted but whose effect the chat file confirms."""
    return AgentToolResult(
        call_id=call.call_id,
        tool_id=ToolId.builtin("workspace.commit"),
        content=f"Committed {path}; the run was interrupted after the chat was updated.",
        structured={"path": path, "confirmedOnResume": True},
    )
