"""Built-in tools, one module per family. Register a new tool in :data:`BUILTIN_TOOLS`."""

from __future__ import annotations

from tavern_agent.tools.builtin import dice, patch, search, shell, workspace_files
from tavern_agent.tools.builtin.registry import BuiltinRegistry, BuiltinTool

BUILTIN_TOOLS: tuple[BuiltinTool, ...] = (
    workspace_files.LIST_FILES,
    workspace_files.READ_FILE,
    workspace_files.WRITE_FILE,
    patch.APPLY_PATCH,
    search.SEARCH_FILES,
    shell.SHELL,
    dice.ROLL,
)


def builtin_registry() -> BuiltinRegistry:
    """A registry holding every built-in tool this version ships."""
    return BuiltinRegistry(BUILTIN_TOOLS)
