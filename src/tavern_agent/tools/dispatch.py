"""Dispatch by ToolId kind: built-in, MCP or extension — never by name."""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import Any

from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.ids import ToolId, ToolKind
from tavern_agent.core.results import ToolError, ToolFailure, ToolOutcome
from tavern_agent.tools.catalog import ExternalReceipt, ToolCatalog
from tavern_agent.tools.context import CallContext

_DEFAULT_ERROR = {
    ToolKind.MCP: ErrorCode.MCP_TOOL_ERROR,
    ToolKind.EXTENSION: ErrorCode.EXTENSION_TOOL_ERROR,
}


# The disk, not the call, is at fault: full, over quota, read-only, failing.
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG})


def storage_failure(exc: OSError) -> ToolFailure:
    """A built-in tool's file access failed on the disk: a result, not a crash."""
    why = exc.strerror or str(exc)
    return ToolFailure(
        ErrorCode.WORKSPACE_STORAGE_FAILED,
        f"Storage failed ({why}); the call did not complete. Retrying will not help "
        "until the disk is fixed; tell the user.",
    )


@dataclass(frozen=True, slots=True)
class Dispatched:
    """A tool's outcome, whether it goes through the long-result step, and the raw reply."""

    outcome: ToolOutcome
    spills: bool
    raw: Any = None


class Dispatcher:
    """Routes a checked call to the lane of its ToolId kind."""

    def __init__(self, catalog: ToolCatalog) -> None:
        self.catalog = catalog

    def availability(self, tool_id: ToolId) -> str | None:
        """``None`` when the tool can run now, else the reason it cannot."""
        if tool_id.kind is ToolKind.BUILTIN:
            return None if self.catalog.builtins.get(tool_id) else "this version does not have it"
        source = self.catalog.source_for(tool_id.kind)
        if source is None:
            return f"no {tool_id.kind} source is connected"
        return source.availability(tool_id)

    async def dispatch(self, tool_id: ToolId, args: dict[str, Any], ctx: CallContext) -> Dispatched:
        """Run the tool by its kind: a built-in in process (its ``ToolFailure``
        and storage errors become results), else through its external source."""
        if tool_id.kind is ToolKind.BUILTIN:
            tool = self.catalog.builtins.get(tool_id)
            if tool is None:  # availability was checked; a registry cannot lose tools
                raise LookupError(f"built-in {tool_id} vanished after the availability check")
            try:
                outcome = await tool.run(args, ctx)
            except ToolFailure as failure:
                outcome = failure.outcome()
            except OSError as exc:
                if exc.errno not in STORAGE_ERRNOS:
                    raise
                outcome = storage_failure(exc).outcome()
            return Dispatched(outcome, tool.spills)
        source = self.catalog.source_for(tool_id.kind)
        if source is None:
            raise LookupError(f"no {tool_id.kind} source for {tool_id}")
        receipt = await source.invoke(tool_id, args, ctx)
        return Dispatched(receipt_outcome(tool_id.kind, receipt), True, receipt.raw)


def receipt_outcome(kind: ToolKind, receipt: ExternalReceipt) -> ToolOutcome:
    """An external reply as a tool outcome; external tools never carry effects."""
    if not receipt.is_error:
        return ToolOutcome(receipt.content, receipt.structured, resource_refs=receipt.resource_refs)
    code = receipt.error_code or _DEFAULT_ERROR[kind]
    structured = {
        "error": {"code": code.value, "message": receipt.content},
        "details": receipt.structured,
    }
    error = ToolError(code, receipt.content)
    return ToolOutcome(receipt.content, structured, error, receipt.resource_refs)
