"""Every error code of the tool system, in one table.

A *recoverable* code is a tool result the model can act on (R5.5); a fatal code
ends the Run. Codes are stable strings grouped by family; add new ones here and
nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ErrorCode(StrEnum):
    # tool: argument and call-shape problems
    TOOL_INVALID_ARGUMENTS = "tool.invalid_arguments"
    TOOL_UNAVAILABLE = "tool.unavailable"
    # model: what the model emitted does not fit this snapshot
    MODEL_UNKNOWN_TOOL_CALL = "model.unknown_tool_call"
    MODEL_TOOL_CALL_TRUNCATED = "model.tool_call_truncated"
    MODEL_TOOL_CALL_REQUIRED = "model.tool_call_required"
    # agent: budgets and run control
    AGENT_TOOL_BUDGET_EXHAUSTED = "agent.tool_budget_exhausted"
    AGENT_TOOL_AFTER_FINISH = "agent.tool_after_finish"
    # workspace
    WORKSPACE_INVALID_PATH = "workspace.invalid_path"
    WORKSPACE_PATH_NOT_VISIBLE = "workspace.path_not_visible"
    WORKSPACE_PATH_NOT_WRITABLE = "workspace.path_not_writable"
    # mcp and extension sources
    MCP_PERMISSION_DENIED = "mcp.permission_denied"
    MCP_TOOL_ERROR = "mcp.tool_error"
    MCP_CALL_OUTCOME_UNKNOWN = "mcp.call_outcome_unknown"
    MCP_SERVER_ERROR = "mcp.server_error"
    MCP_SERVER_UNAVAILABLE = "mcp.server_unavailable"
    MCP_UNSUPPORTED_RESPONSE = "mcp.unsupported_response"
    MCP_ARGUMENTS_TOO_LARGE = "mcp.arguments_too_large"
    EXTENSION_TOOL_ERROR = "extension.tool_error"
    EXTENSION_TOOL_TIMEOUT = "extension.tool_timeout"
    # built-in tool families
    DICE_INVALID_FORMULA = "dice.invalid_formula"


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    recoverable: bool
    meaning: str


ERRORS: dict[ErrorCode, ErrorInfo] = {
    ErrorCode.TOOL_INVALID_ARGUMENTS: ErrorInfo(
        True, "Arguments are not a JSON object, or the object breaks the tool's schema."
    ),
    ErrorCode.TOOL_UNAVAILABLE: ErrorInfo(
        True, "The tool was removed or disabled since the snapshot; no action was taken."
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
    ErrorCode.AGENT_TOOL_BUDGET_EXHAUSTED: ErrorInfo(
        True, "The invocation's call budget, or this tool's budget, is spent."
    ),
    ErrorCode.AGENT_TOOL_AFTER_FINISH: ErrorInfo(
        True, "A finishing tool must be the last call of its turn."
    ),
    ErrorCode.WORKSPACE_INVALID_PATH: ErrorInfo(True, "A workspace path is malformed."),
    ErrorCode.WORKSPACE_PATH_NOT_VISIBLE: ErrorInfo(True, "The path is outside the visible roots."),
    ErrorCode.WORKSPACE_PATH_NOT_WRITABLE: ErrorInfo(True, "The path is in a read-only root."),
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
    ErrorCode.EXTENSION_TOOL_ERROR: ErrorInfo(True, "The extension function raised an error."),
    ErrorCode.EXTENSION_TOOL_TIMEOUT: ErrorInfo(
        False, "The extension did not answer in time; it may have executed."
    ),
    ErrorCode.DICE_INVALID_FORMULA: ErrorInfo(True, "The dice formula is not allowed."),
}


def is_recoverable(code: ErrorCode) -> bool:
    return ERRORS[code].recoverable
