"""Multi-agent tools: ``agent.delegate``, ``agent.await``, ``agent.handoff``, ``task.return``.

Each tool only shapes its request into a typed effect; the runtime
(:mod:`tavern_agent.runtime.agents`) checks eligibility, budgets and the task
registry, applies the effect and writes the result the model reads. A return-mode
child's snapshot has ``task.return`` instead of commit, finish, delegate, handoff
and await; no profile can list ``task.return`` itself.
"""

from __future__ import annotations

from typing import Any

from tavern_agent.core import tool_ids
from tavern_agent.core.descriptors import object_schema
from tavern_agent.core.results import (
    AwaitRequested,
    DelegateRequested,
    HandoffAccepted,
    TaskReturned,
    ToolOutcome,
)
from tavern_agent.tools.builtin.chat import CHAT_ONLY
from tavern_agent.tools.builtin.registry import Describe, Offer, builtin_tool
from tavern_agent.tools.context import CallContext

AWAIT_MODES = ("nextCompleted", "allCompleted", "statusOnly")
DEFAULT_MODE = "nextCompleted"
DEFAULT_TIMEOUT_MS = 120_000
MAX_TIMEOUT_MS = 300_000
# Each text field of a task or a handoff brief; longer briefs belong in a workspace file.
MAX_TEXT = 8_000
_STR = {"type": "string"}
_TEXT = {"type": "string", "maxLength": MAX_TEXT}
# A task or brief is an open object: keys beyond the named ones reach the agent
# under "Additional Instructions", each as text of at most MAX_TEXT characters.
_EXTRA = _TEXT
_LIST = {"type": "array", "items": _STR}


def _to_agent(field: str, brief: dict[str, Any]) -> dict[str, Any]:
    """The parameters of a tool that gives an agent (``agentId``) a brief, the open
    object ``field``: its ``objective`` is required, keys beyond ``brief``'s are text."""
    return object_schema(
        {"agentId": _STR, field: object_schema(brief, "objective", extra=_EXTRA)},
        "agentId",
        field,
    )


def _naming_await(text: str, mention: str) -> Describe:
    """A describer: ``text`` with ``mention`` of this snapshot's await tool in its ``{}``
    (nothing there when the snapshot has no await tool)."""

    def describe(offer: Offer) -> str:
        waiter = offer.name(tool_ids.AWAIT)
        return text.format(mention.format(waiter) if waiter else "")

    return describe


describe_delegate = _naming_await(
    "Start a task for an agent from the Agents list; it runs in the background. "
    "Returns a taskId at once{}.",
    ": collect the result with {}",
)
describe_handoff = _naming_await(
    "Hand off the rest of this run to an agent from the Agents list; your part ends.{} "
    "Call it alone.",
    " Wait for your tasks with {} first.",
)


@builtin_tool(
    "agent.delegate",
    description=(
        "Start a task for an agent from the Agents list; it runs in the background. "
        "Returns a taskId at once: collect the result with agent_await."
    ),
    describe=describe_delegate,
    parameters=_to_agent(
        "task",
        {
            "objective": _TEXT | {"description": "What to do, self-contained."},
            "title": _TEXT,
            "context": _TEXT,
            "expectedOutput": _TEXT,
        },
    ),
    scenes=CHAT_ONLY,
    child_drop=True,
    repeatable=True,
)
async def DELEGATE(args: dict[str, Any], ctx: CallContext) -> ToolOutcome:
    """``agent.delegate``: asks the runtime to start a task for another
    agent (the runtime checks the target and answers with the task id)."""
    return ToolOutcome("", effect=DelegateRequested(args["agentId"], dict(args["task"])))


@builtin_tool(
    "agent.await",
    description=(
        "Wait for your delegated tasks; returns each status, and summary and files when done."
    ),
    parameters=object_schema(
        {
            "taskIds": {"type": "array", "items": _STR, "description": "Default: all yours."},
            "mode": {
                "type": "string",
                "enum": list(AWAIT_MODES),
                "description": "Wait for the next task to finish, for all, or only report status.",
            },
            "timeoutMs": {"type": "integer", "description": "Default 120000, max 300000."},
        }
    ),
    scenes=CHAT_ONLY,
    child_drop=True,
    repeatable=True,
)
async def AWAIT(args: dict[str, Any], ctx: CallContext) -> ToolOutcome:
    """``agent.await``: asks the runtime to wait on the
    caller's tasks (timeout clamped to the maximum)."""
    ids = args.get("taskIds")
    timeout = max(0, min(int(args.get("timeoutMs", DEFAULT_TIMEOUT_MS)), MAX_TIMEOUT_MS))
    mode = args.get("mode", DEFAULT_MODE)
    effect = AwaitRequested(None if ids is None else tuple(ids), mode, timeout)
    return ToolOutcome("", effect=effect)


@builtin_tool(
    "agent.handoff",
    description=(
        "Hand off the rest of this run to an agent from the Agents list; your part ends. "
        "Wait for your tasks with agent_await first. Call it alone."
    ),
    describe=describe_handoff,
    parameters=_to_agent(
        "handoff",
        {
            "objective": _TEXT,
            "title": _TEXT,
            "reason": _TEXT,
            "contextSummary": _TEXT,
            "workspaceRefs": _LIST,
            "mustPreserve": _LIST,
            "completionCriteria": _LIST,
            "pendingTaskPolicy": {"type": "string", "enum": ["denyIfPending"]},
        },
    ),
    scenes=CHAT_ONLY,
    finishing=True,
    child_drop=True,
)
async def HANDOFF(args: dict[str, Any], ctx: CallContext) -> ToolOutcome:
    """``agent.handoff``: asks the runtime to hand the rest of the run to another agent."""
    return ToolOutcome("", effect=HandoffAccepted(args["agentId"], dict(args["handoff"])))


@builtin_tool(
    "task.return",
    description="Return your result to the agent that gave you the task; this ends your work.",
    parameters=object_schema(
        {
            "summary": {"type": "string", "description": "The result, self-contained."},
            "status": {"type": "string", "enum": ["completed", "failed"]},
            "confidence": {"type": "string", "enum": ["low", "medium", "high"]},
            "artifacts": {
                "type": "array",
                "items": object_schema({"path": _STR, "kind": _STR, "role": _STR}, "path"),
            },
            "findings": _LIST,
            "warnings": _LIST,
            "suggestedNextActions": _LIST,
            "questionsForCaller": _LIST,
        },
        "summary",
        "status",
    ),
    finishing=True,
    child_only=True,
    repeatable=True,  # its result lives in the journal and a summary file rewritten whole
)
async def TASK_RETURN(args: dict[str, Any], ctx: CallContext) -> ToolOutcome:
    """``task.return``: a delegated child's result for its caller; ends the child's work."""
    return ToolOutcome("", effect=TaskReturned(dict(args)))
