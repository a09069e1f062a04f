"""``workspace.commit``: publish a workspace file as this run's chat message.

The tool checks the request and returns a :class:`CommitRequested` effect; the
chat adapter (:meth:`tavern_agent.chat.run_input.ChatRun.apply_effect`) writes
the chat. Chat runs only; child agents cannot commit.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tavern_agent.core.descriptors import object_schema
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.results import CommitRequested, ToolFailure, ToolOutcome
from tavern_agent.core.tool_ids import FINISH, WRITE_FILE
from tavern_agent.tools.builtin.chat import CHAT_ONLY
from tavern_agent.tools.builtin.registry import builtin_tool
from tavern_agent.tools.builtin.workspace_files import decode, load_file
from tavern_agent.tools.context import CallContext
from tavern_agent.tools.texts import child_return_hint
from tavern_agent.workspace.roots import MESSAGE_BODY


@builtin_tool(
    "workspace.commit",
    description=("Publish a file as this run's chat reply; commit again after more edits."),
    parameters=object_schema(
        {
            "file_path": {"type": "string", "description": f"Default {MESSAGE_BODY}."},
            "mode": {"type": "string", "description": "replace (default) or append."},
            "reason": {"type": "string", "description": "One sentence: what and why."},
        },
        "reason",
    ),
    scenes=CHAT_ONLY,
    child_drop=True,
)
async def COMMIT(args: dict[str, Any], ctx: CallContext) -> ToolOutcome:
    """``workspace.commit``: checks the file and mode, and asks
    the runtime to publish the file as the run's chat reply."""
    if ctx.chat is None or not ctx.chat.allow_commit:
        child = child_return_hint(ctx.snapshot)
        why = (
            "This run cannot commit: it has no chat to publish to; the files you wrote stay in "
            "the workspace."
            if child is None
            else f"This agent cannot commit. {child}"
        )
        raise ToolFailure(ErrorCode.WORKSPACE_COMMIT_UNAVAILABLE, why)
    mode = args.get("mode", "replace")
    if mode not in ("replace", "append"):
        raise ToolFailure(
            ErrorCode.WORKSPACE_COMMIT_MODE_INVALID,
            f"mode {mode!r} is not a commit mode. Use mode replace or append.",
        )
    ws = ctx.require_workspace()
    path = ws.check(args.get("file_path", MESSAGE_BODY))
    data = await asyncio.to_thread(load_file, ws, path, ctx)
    text = decode(data)[0]
    if not text.strip() and mode == "replace":
        writer = ctx.snapshot.name_of(WRITE_FILE)
        how = f" with {writer}" if writer else ""
        raise ToolFailure(
            ErrorCode.WORKSPACE_COMMIT_EMPTY, f"{path} is empty; write the reply there{how} first."
        )
    reason: str = args["reason"]
    finish = ctx.model_name(FINISH, "workspace_finish")
    verb = "replaces" if mode == "replace" else "is appended to"
    content = (
        f"Committed {path} ({len(text):,} chars): it {verb} this run's chat message. "
        f"Commit again after more edits; call {finish} when the reply is final."
    )
    structured = {"path": path, "mode": mode, "reason": reason, "chars": len(text)}
    return ToolOutcome(content, structured, effect=CommitRequested(path, mode, reason))
