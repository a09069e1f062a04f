"""Every error code of the tool system, in one table.

A *recoverable* code is a tool result the model can act on; a fatal code
ends the Run. Codes are stable strings grouped by family; add new ones here and
nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ErrorCode(StrEnum):
    """Every error code a result or a run can carry; ``ERRORS`` says what each means."""

    # tool: argument and call-shape problems
    TOOL_INVALID_ARGUMENTS = "tool.invalid_arguments"
    TOOL_UNAVAILABLE = "tool.unavailable"
    TOOL_OUTCOME_UNKNOWN = "tool.outcome_unknown"
    # model: what the model emitted does not fit this snapshot
    MODEL_UNKNOWN_TOOL_CALL = "model.unknown_tool_call"
    MODEL_TOOL_CALL_TRUNCATED = "model.tool_call_truncated"
    MODEL_TOOL_CALL_REQUIRED = "model.tool_call_required"
    MODEL_STUCK = "model.stuck"
    # agent: budgets and run control
    AGENT_TOOL_BUDGET_EXHAUSTED = "agent.tool_budget_exhausted"
    AGENT_TOOL_AFTER_FINISH = "agent.tool_after_finish"
    AGENT_FOREGROUND_COMMIT_REQUIRED = "agent.foreground_commit_required"
    AGENT_FINISH_AFTER_FAILED_CALL = "agent.finish_after_failed_call"
    AGENT_CHILD_FINISH_DENIED = "agent.child_finish_denied"
    # agent: delegation, tasks and handoff
    AGENT_DELEGATION_POLICY_DENIED = "agent.delegation_policy_denied"
    AGENT_DELEGATION_BUDGET_EXHAUSTED = "agent.delegation_budget_exhausted"
    AGENT_TARGET_PROFILE_NOT_FOUND = "agent.target_profile_not_found"
    AGENT_NO_CHILD_TASKS = "agent.no_child_tasks"
    AGENT_AWAIT_TASK_NOT_FOUND = "agent.await_task_not_found"
    AGENT_TASK_RETURN_DENIED = "agent.task_return_denied"
    AGENT_TASK_ALREADY_FINISHED = "agent.task_already_finished"
    AGENT_HANDOFF_POLICY_DENIED = "agent.handoff_policy_denied"
    AGENT_HANDOFF_PENDING_TASKS = "agent.handoff_pending_tasks"
    AGENT_HANDOFF_DEPTH_EXHAUSTED = "agent.handoff_depth_exhausted"
    # run: failures that end a Run (never a tool result the model acts on)
    MODEL_REQUEST_FAILED = "model.request_failed"
    RUN_CANCELLED = "run.cancelled"
    RUN_RESUME_REFUSED = "run.resume_refused"
    RUN_STORAGE_FAILED = "run.storage_failed"
    # workspace
    WORKSPACE_INVALID_PATH = "workspace.invalid_path"
    WORKSPACE_PATH_NOT_VISIBLE = "workspace.path_not_visible"
    WORKSPACE_PATH_NOT_WRITABLE = "workspace.path_not_writable"
    WORKSPACE_FILE_NOT_FOUND = "workspace.file_not_found"
    WORKSPACE_PATH_NOT_FOUND = "workspace.path_not_found"
    WORKSPACE_PATH_IS_DIRECTORY = "workspace.path_is_directory"
    WORKSPACE_LIST_DEPTH_TOO_LARGE = "workspace.list_depth_too_large"
    WORKSPACE_INVALID_LINE_RANGE = "workspace.invalid_line_range"
    WORKSPACE_WRITE_MODE_INVALID = "workspace.write_mode_invalid"
    WORKSPACE_WRITE_REQUIRES_READ = "workspace.write_requires_read"
    WORKSPACE_WRITE_STALE_FILE = "workspace.write_stale_file"
    WORKSPACE_PATCH_EMPTY_OLD_STRING = "workspace.patch_empty_old_string"
    WORKSPACE_PATCH_NO_CHANGE = "workspace.patch_no_change"
    WORKSPACE_PATCH_REQUIRES_READ = "workspace.patch_requires_read"
    WORKSPACE_PATCH_REQUIRES_FULL_READ = "workspace.patch_requires_full_read"
    WORKSPACE_PATCH_STALE_FILE = "workspace.patch_stale_file"
    WORKSPACE_PATCH_OLD_STRING_NOT_FOUND = "workspace.patch_old_string_not_found"
    WORKSPACE_PATCH_OLD_STRING_NOT_UNIQUE = "workspace.patch_old_string_not_unique"
    WORKSPACE_GREP_PATTERN_INVALID = "workspace.grep_pattern_invalid"
    WORKSPACE_COMMIT_MODE_INVALID = "workspace.commit_mode_invalid"
    WORKSPACE_COMMIT_EMPTY = "workspace.commit_empty"
    WORKSPACE_COMMIT_UNAVAILABLE = "workspace.commit_unavailable"
    # chat and world info
    CHAT_UNAVAILABLE = "chat.unavailable"
    CHAT_NOT_FOUND = "chat.not_found"
    CHAT_FLOOR_NOT_FOUND = "chat.floor_not_found"
    CHAT_INVALID_RANGE = "chat.invalid_range"
    WORLDINFO_ACTIVATION_UNAVAILABLE = "worldinfo.activation_unavailable"
    WORLDINFO_ENTRY_NOT_FOUND = "worldinfo.entry_not_found"
    WORLDINFO_INVALID_ENTRY_RANGE = "worldinfo.invalid_entry_range"
    WORKSPACE_SHELL_EXIT = "workspace.shell_exit"
    WORKSPACE_SHELL_TIMEOUT = "workspace.shell_timeout"
    WORKSPACE_SHELL_LIMIT = "workspace.shell_limit"
    WORKSPACE_SHELL_CANCELLED = "workspace.shell_cancelled"
    WORKSPACE_SHELL_FAILED = "workspace.shell_failed"
    WORKSPACE_STORAGE_FAILED = "workspace.storage_failed"
    # mcp and extension sources
    MCP_PERMISSION_DENIED = "mcp.permission_denied"
    MCP_TOOL_ERROR = "mcp.tool_error"
    MCP_CALL_OUTCOME_UNKNOWN = "mcp.call_outcome_unknown"
    MCP_SERVER_ERROR = "mcp.server_error"
    MCP_SERVER_UNAVAILABLE = "mcp.server_unavailable"
    MCP_UNSUPPORTED_RESPONSE = "mcp.unsupported_response"
    MCP_ARGUMENTS_TOO_LARGE = "mcp.arguments_too_large"
    MCP_LOGIN_REQUIRED = "mcp.login_required"
    EXTENSION_TOOL_ERROR = "extension.tool_error"
    EXTENSION_TOOL_TIMEOUT = "extension.tool_timeout"
    EXTENSION_TOOL_DISCONNECTED = "extension.tool_disconnected"
    EXTENSION_TOOL_CANCELLED = "extension.tool_cancelled"
    EXTENSION_TOOL_ALREADY_REGISTERED = "extension.tool_already_registered"
    EXTENSION_INVALID_RESULT = "extension.invalid_result"
    EXTENSION_HOST_UNAVAILABLE = "extension.host_unavailable"
    # built-in tool families
    DICE_INVALID_FORMULA = "dice.invalid_formula"


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """What an error code means, and whether the model can recover from it by another call."""

    recoverable: bool
    meaning: str


ERRORS: dict[ErrorCode, ErrorInfo] = {
    ErrorCode.TOOL_INVALID_ARGUMENTS: ErrorInfo(
        True, "Arguments are not a JSON object, or the object breaks the tool's schema."
    ),
    ErrorCode.TOOL_UNAVAILABLE: ErrorInfo(
        True, "The tool was removed or disabled since the snapshot; no action was taken."
    ),
    ErrorCode.TOOL_OUTCOME_UNKNOWN: ErrorInfo(
        True, "No result was recorded for the call (interrupted run); it may have executed."
    ),
    ErrorCode.MODEL_UNKNOWN_TOOL_CALL: ErrorInfo(
        True, "The called name is not in this invocation's tool snapshot."
    ),
    ErrorCode.MODEL_TOOL_CALL_TRUNCATED: ErrorInfo(
        True, "The response was cut off by the length limit; the call was not run."
    ),
    ErrorCode.MODEL_TOOL_CALL_REQUIRED: ErrorInfo(
        False, "The rounds ran out without the model finishing through a tool."
    ),
    ErrorCode.MODEL_STUCK: ErrorInfo(
        False, "The model sent the same failing call again and again (the profile's limit)."
    ),
    ErrorCode.AGENT_TOOL_BUDGET_EXHAUSTED: ErrorInfo(
        True, "The invocation's call budget, or this tool's budget, is spent."
    ),
    ErrorCode.AGENT_TOOL_AFTER_FINISH: ErrorInfo(
        True, "A finishing tool must be the last call of its turn."
    ),
    ErrorCode.AGENT_FOREGROUND_COMMIT_REQUIRED: ErrorInfo(
        True, "A foreground chat run must commit its reply before it can finish."
    ),
    ErrorCode.AGENT_FINISH_AFTER_FAILED_CALL: ErrorInfo(
        True, "An earlier call of the same turn failed; finish in a turn of its own."
    ),
    ErrorCode.AGENT_CHILD_FINISH_DENIED: ErrorInfo(
        True, "A delegated agent cannot finish the run; it returns its result instead."
    ),
    ErrorCode.AGENT_DELEGATION_POLICY_DENIED: ErrorInfo(
        True, "The caller may not delegate, or the target does not accept this caller as a task."
    ),
    ErrorCode.AGENT_DELEGATION_BUDGET_EXHAUSTED: ErrorInfo(
        True, "The caller has as many live tasks as allowed, or used its tasks for this run."
    ),
    ErrorCode.AGENT_TARGET_PROFILE_NOT_FOUND: ErrorInfo(True, "No agent profile has that id."),
    ErrorCode.AGENT_NO_CHILD_TASKS: ErrorInfo(True, "The caller has delegated no tasks to await."),
    ErrorCode.AGENT_AWAIT_TASK_NOT_FOUND: ErrorInfo(
        True, "A task id is not one of the caller's tasks."
    ),
    ErrorCode.AGENT_TASK_RETURN_DENIED: ErrorInfo(
        True, "Only a delegated child agent can return a task result."
    ),
    ErrorCode.AGENT_TASK_ALREADY_FINISHED: ErrorInfo(True, "The task has returned already."),
    ErrorCode.AGENT_HANDOFF_POLICY_DENIED: ErrorInfo(
        True, "The caller may not hand off, or the target does not accept this handoff."
    ),
    ErrorCode.AGENT_HANDOFF_PENDING_TASKS: ErrorInfo(
        True, "The caller still has live child tasks; await them before handing off."
    ),
    ErrorCode.AGENT_HANDOFF_DEPTH_EXHAUSTED: ErrorInfo(
        True, "The run has been handed off as many times as allowed."
    ),
    ErrorCode.MODEL_REQUEST_FAILED: ErrorInfo(
        False, "The model could not be reached or answered with an error after retries."
    ),
    ErrorCode.RUN_CANCELLED: ErrorInfo(False, "The run was cancelled; pending calls are paired."),
    ErrorCode.RUN_RESUME_REFUSED: ErrorInfo(
        False, "The run cannot be resumed: an effect's outcome cannot be confirmed."
    ),
    ErrorCode.RUN_STORAGE_FAILED: ErrorInfo(
        False, "A run record (journal, checkpoint, audit file) could not be written."
    ),
    ErrorCode.WORKSPACE_INVALID_PATH: ErrorInfo(True, "A workspace path is malformed."),
    ErrorCode.WORKSPACE_PATH_NOT_VISIBLE: ErrorInfo(True, "The path is outside the visible roots."),
    ErrorCode.WORKSPACE_PATH_NOT_WRITABLE: ErrorInfo(True, "The path is in a read-only root."),
    ErrorCode.WORKSPACE_FILE_NOT_FOUND: ErrorInfo(True, "No file at that path."),
    ErrorCode.WORKSPACE_PATH_NOT_FOUND: ErrorInfo(True, "No file or folder at that path."),
    ErrorCode.WORKSPACE_PATH_IS_DIRECTORY: ErrorInfo(True, "The path is a folder, not a file."),
    ErrorCode.WORKSPACE_LIST_DEPTH_TOO_LARGE: ErrorInfo(True, "list depth above the maximum."),
    ErrorCode.WORKSPACE_INVALID_LINE_RANGE: ErrorInfo(True, "offset/limit outside the file."),
    ErrorCode.WORKSPACE_WRITE_MODE_INVALID: ErrorInfo(True, "mode is not replace or append."),
    ErrorCode.WORKSPACE_WRITE_REQUIRES_READ: ErrorInfo(
        True, "Replacing an existing file needs a read of it first."
    ),
    ErrorCode.WORKSPACE_WRITE_STALE_FILE: ErrorInfo(True, "The file changed since it was read."),
    ErrorCode.WORKSPACE_PATCH_EMPTY_OLD_STRING: ErrorInfo(True, "old_string is empty."),
    ErrorCode.WORKSPACE_PATCH_NO_CHANGE: ErrorInfo(True, "old_string equals new_string."),
    ErrorCode.WORKSPACE_PATCH_REQUIRES_READ: ErrorInfo(True, "Patching needs a read first."),
    ErrorCode.WORKSPACE_PATCH_REQUIRES_FULL_READ: ErrorInfo(
        True, "This patch needs a full read of the file first."
    ),
    ErrorCode.WORKSPACE_PATCH_STALE_FILE: ErrorInfo(True, "The file changed since it was read."),
    ErrorCode.WORKSPACE_PATCH_OLD_STRING_NOT_FOUND: ErrorInfo(
        True, "old_string is not in the file."
    ),
    ErrorCode.WORKSPACE_PATCH_OLD_STRING_NOT_UNIQUE: ErrorInfo(
        True, "old_string occurs more than once and replace_all is false."
    ),
    ErrorCode.WORKSPACE_GREP_PATTERN_INVALID: ErrorInfo(True, "The regex is not valid RE2."),
    ErrorCode.WORKSPACE_COMMIT_MODE_INVALID: ErrorInfo(True, "commit mode is not replace/append."),
    ErrorCode.WORKSPACE_COMMIT_EMPTY: ErrorInfo(True, "The file to commit is empty."),
    ErrorCode.WORKSPACE_COMMIT_UNAVAILABLE: ErrorInfo(
        True, "This run cannot commit (no chat, or a child agent)."
    ),
    ErrorCode.CHAT_UNAVAILABLE: ErrorInfo(True, "This run has no chat attached."),
    ErrorCode.CHAT_NOT_FOUND: ErrorInfo(True, "The run's chat file is gone; continue without it."),
    ErrorCode.CHAT_FLOOR_NOT_FOUND: ErrorInfo(True, "The floor is outside the run's chat input."),
    ErrorCode.CHAT_INVALID_RANGE: ErrorInfo(
        True, "offset/limit or start_floor/end_floor are outside the floor or chat."
    ),
    ErrorCode.WORLDINFO_ACTIVATION_UNAVAILABLE: ErrorInfo(
        True, "The run's input holds no world info activation."
    ),
    ErrorCode.WORLDINFO_ENTRY_NOT_FOUND: ErrorInfo(True, "No activated entry has that ref."),
    ErrorCode.WORLDINFO_INVALID_ENTRY_RANGE: ErrorInfo(True, "offset is past the entry's end."),
    ErrorCode.WORKSPACE_SHELL_EXIT: ErrorInfo(True, "The shell command exited non-zero."),
    ErrorCode.WORKSPACE_SHELL_TIMEOUT: ErrorInfo(True, "The shell command ran past its wall time."),
    ErrorCode.WORKSPACE_SHELL_LIMIT: ErrorInfo(
        True, "The shell command hit a sandbox limit (commands, loop iterations or memory)."
    ),
    ErrorCode.WORKSPACE_SHELL_CANCELLED: ErrorInfo(
        True, "The run was cancelled while the shell command ran; files it wrote stay written."
    ),
    ErrorCode.WORKSPACE_SHELL_FAILED: ErrorInfo(True, "The shell sandbox could not start."),
    ErrorCode.WORKSPACE_STORAGE_FAILED: ErrorInfo(
        True, "The disk refused the call's file access (full, read-only, I/O error)."
    ),
    ErrorCode.MCP_PERMISSION_DENIED: ErrorInfo(
        True, "The MCP tool is paused, removed or off; the call was not sent."
    ),
    ErrorCode.MCP_TOOL_ERROR: ErrorInfo(True, "The MCP server reported a tool error."),
    ErrorCode.MCP_CALL_OUTCOME_UNKNOWN: ErrorInfo(
        False, "The MCP call was sent but no reply came; it may have executed."
    ),
    ErrorCode.MCP_SERVER_ERROR: ErrorInfo(
        True, "The MCP server answered the call with a JSON-RPC error."
    ),
    ErrorCode.MCP_SERVER_UNAVAILABLE: ErrorInfo(
        True, "The MCP server could not be started or reached; the call was not sent."
    ),
    ErrorCode.MCP_UNSUPPORTED_RESPONSE: ErrorInfo(
        True, "The MCP server's reply could not be read as a tool result."
    ),
    ErrorCode.MCP_ARGUMENTS_TOO_LARGE: ErrorInfo(
        True, "The arguments exceed the 256 KiB MCP limit; the call was not sent."
    ),
    ErrorCode.MCP_LOGIN_REQUIRED: ErrorInfo(
        True,
        "The MCP server needs an OAuth login (none yet, or its token was revoked); "
        "the call was not sent. `tavern-agent mcp login` fixes it.",
    ),
    ErrorCode.EXTENSION_TOOL_ERROR: ErrorInfo(True, "The extension function raised an error."),
    ErrorCode.EXTENSION_TOOL_TIMEOUT: ErrorInfo(
        False, "The extension did not answer in time; it may have executed."
    ),
    ErrorCode.EXTENSION_TOOL_DISCONNECTED: ErrorInfo(
        False, "The page that registered the tool went away mid-call; it may have executed."
    ),
    ErrorCode.EXTENSION_TOOL_CANCELLED: ErrorInfo(
        False, "The run was cancelled while the extension ran; it may have executed."
    ),
    ErrorCode.EXTENSION_TOOL_ALREADY_REGISTERED: ErrorInfo(
        True, "A registration named a ToolId that is registered already (never a model result)."
    ),
    ErrorCode.EXTENSION_INVALID_RESULT: ErrorInfo(
        True, "The extension function returned something that is not plain JSON."
    ),
    ErrorCode.EXTENSION_HOST_UNAVAILABLE: ErrorInfo(
        True, "The extension host could not be reached; the call was not sent."
    ),
    ErrorCode.DICE_INVALID_FORMULA: ErrorInfo(True, "The dice formula is not allowed."),
}
