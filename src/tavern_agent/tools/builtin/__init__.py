"""Built-in tools, one module per family. Register a new tool in :data:`BUILTIN_TOOLS`."""

from __future__ import annotations

from tavern_agent.tools.builtin import (
    agents,
    chat,
    commit,
    dice,
    finish,
    patch,
    search,
    shell,
    workspace_files,
    worldinfo,
)
from tavern_agent.tools.builtin.registry import BuiltinRegistry, BuiltinTool

BUILTIN_TOOLS: tuple[BuiltinTool, ...] = (
    chat.SEARCH,
    chat.READ_MESSAGES,
    worldinfo.READ_ACTIVATED,
    workspace_files.LIST_FILES,
    workspace_files.READ_FILE,
    workspace_files.WRITE_FILE,
    patch.APPLY_PATCH,
    search.SEARCH_FILES,
    commit.COMMIT,
    shell.SHELL,
    finish.FINISH,
    dice.ROLL,
    agents.DELEGATE,
    agents.AWAIT,
    agents.HANDOFF,
    agents.TASK_RETURN,
)


def builtin_registry() -> BuiltinRegistry:
    """A registry holding every built-in tool this version ships."""
    return BuiltinRegistry(BUILTIN_TOOLS)
