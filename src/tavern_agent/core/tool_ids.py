"""The ids of the built-in tools that code names, each defined once.

The runtime's rules, the model-facing texts and the tools themselves refer to
one another's tools by these ids (never by model name: a snapshot may rename a
tool, so a text asks the caller's snapshot for the name it gave the tool).
"""

from __future__ import annotations

from tavern_agent.core.ids import ToolId

# workspace files
LIST_FILES = ToolId.builtin("workspace.list_files")
READ_FILE = ToolId.builtin("workspace.read_file")
WRITE_FILE = ToolId.builtin("workspace.write_file")
APPLY_PATCH = ToolId.builtin("workspace.apply_patch")
SEARCH_FILES = ToolId.builtin("workspace.search_files")
SHELL = ToolId.builtin("workspace.shell")
# publishing and ending
COMMIT = ToolId.builtin("workspace.commit")
FINISH = ToolId.builtin("workspace.finish")
# the chat
CHAT_SEARCH = ToolId.builtin("chat.search")
CHAT_READ_MESSAGES = ToolId.builtin("chat.read_messages")
WORLDINFO_READ_ACTIVATED = ToolId.builtin("worldinfo.read_activated")
# agents working together
DELEGATE = ToolId.builtin("agent.delegate")
AWAIT = ToolId.builtin("agent.await")
HANDOFF = ToolId.builtin("agent.handoff")
TASK_RETURN = ToolId.builtin("task.return")

# The tools that read the chat: a profile with one of them gets the chat mount.
CHAT_TOOLS = frozenset({CHAT_SEARCH, CHAT_READ_MESSAGES})
