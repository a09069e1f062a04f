"""The MCP manager: registrations, discovery, permissions and calls to MCP servers.

``McpManager`` is imported on first use: the MCP SDK takes most of a second to
import, and most commands never talk to an MCP server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tavern_agent.mcp.approval import ApprovalRequest, Approver, policy_approver
from tavern_agent.mcp.registrations import Registration, RegistrationError, RegistrationStore

if TYPE_CHECKING:
    from tavern_agent.mcp.manager import McpManager

__all__ = [
    "ApprovalRequest",
    "Approver",
    "McpManager",
    "Registration",
    "RegistrationError",
    "RegistrationStore",
    "has_registrations",
    "policy_approver",
]


def __getattr__(name: str) -> Any:
    if name == "McpManager":
        from tavern_agent.mcp.manager import McpManager

        return McpManager
    raise AttributeError(name)


def has_registrations(data_dir: Any) -> bool:
    """Whether any MCP server is registered under ``data_dir`` (cheap: no SDK import)."""
    return any(RegistrationStore(data_dir).registrations_dir.glob("*.json"))
