"""The MCP manager: registrations, discovery, permissions and calls to MCP servers."""

from tavern_agent.mcp.approval import ApprovalRequest, Approver, policy_approver
from tavern_agent.mcp.manager import McpManager
from tavern_agent.mcp.registrations import Registration, RegistrationError, RegistrationStore

__all__ = [
    "ApprovalRequest",
    "Approver",
    "McpManager",
    "Registration",
    "RegistrationError",
    "RegistrationStore",
    "policy_approver",
]
