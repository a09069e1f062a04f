"""``workspace.finish``: end the run (chat scene, a finishing tool: last call of its turn).

The tool only asks; the runtime decides (:mod:`tavern_agent.runtime.policy`):
a foreground chat run without a confirmed commit is refused with
``agent.foreground_commit_required``, and a finish that is not the last call
of its turn gets ``agent.tool_after_finish``.
"""

from __future__ import annotations

from typing import Any

from tavern_agent.core.descriptors import object_schema
from tavern_agent.core.results import Finish, ToolOutcome
from tavern_agent.tools.builtin.chat import CHAT_ONLY
from tavern_agent.tools.builtin.registry import builtin_tool
from tavern_agent.tools.context import CallContext


@builtin_tool(
    "workspace.finish",
    description="End this run once the reply is committed.",
    parameters=object_schema(
        {"reason": {"type": "string", "description": "Optional: what was done."}}
    ),
    scenes=CHAT_ONLY,
    finishing=True,
    child_drop=True,
)
async def FINISH(args: dict[str, Any], ctx: CallContext) -> ToolOutcome:
    """``workspace.finish``: ends the run's work (the runtime checks it may end now)."""
    reason = args.get("reason")
    return ToolOutcome("Run finished.", {"reason": reason}, effect=Finish(reason))
