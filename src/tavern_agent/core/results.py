"""Results and effects of a tool call.

A tool returns a :class:`ToolOutcome`: text for the model, structured data for
the record, and at most one typed :data:`AgentToolEffect` that the runtime
records and applies. The gate turns it into an :class:`AgentToolResult`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.ids import ToolId

# ---------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class NoEffect:
    """The call changed nothing the runtime must track (always so for MCP/extension)."""


@dataclass(frozen=True, slots=True)
class FileWritten:
    """A workspace file was written whole; ``sha256`` is its new content's hash."""

    path: str
    sha256: str


@dataclass(frozen=True, slots=True)
class FilePatched:
    """A workspace file was patched: its hashes before and after, and how many edits applied."""

    path: str
    old_sha256: str
    sha256: str
    replacements: int


@dataclass(frozen=True, slots=True)
class CommitRequested:
    """The call asks the runtime to publish ``path`` to the chat (``mode`` replace or append)."""

    path: str
    mode: str
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Finish:
    """The agent ends its work (``reason`` as it gave it)."""

    reason: str | None = None


@dataclass(frozen=True, slots=True)
class TaskReturned:
    """A delegated child returns ``payload`` to the agent that started it."""

    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class HandoffAccepted:
    """The agent hands the conversation to agent ``agent_id`` with ``brief``."""

    agent_id: str
    brief: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DelegateRequested:
    """``agent.delegate``: the runtime checks the target and starts the child task."""

    agent_id: str
    task: dict[str, Any]


@dataclass(frozen=True, slots=True)
class AwaitRequested:
    """``agent.await``: the runtime waits on the caller's tasks (``task_ids`` None = all)."""

    task_ids: tuple[str, ...] | None
    mode: str
    timeout_ms: int


AgentToolEffect = (
    NoEffect
    | FileWritten
    | FilePatched
    | CommitRequested
    | Finish
    | TaskReturned
    | HandoffAccepted
    | DelegateRequested
    | AwaitRequested
)
NO_EFFECT = NoEffect()

# ---------------------------------------------------------------- outcomes


@dataclass(frozen=True, slots=True)
class ToolError:
    """A recoverable error: the code and the text the model reads."""

    code: ErrorCode
    message: str


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What a tool (or a gate check) produced, before ids are attached."""

    content: str
    structured: Any = None
    error: ToolError | None = None
    resource_refs: tuple[str, ...] = ()
    effect: AgentToolEffect = NO_EFFECT

    @classmethod
    def fail(cls, code: ErrorCode, message: str, **details: Any) -> ToolOutcome:
        """A recoverable error result; ``details`` join the structured record."""
        structured = {"error": {"code": code.value, "message": message, **details}}
        return cls(content=message, structured=structured, error=ToolError(code, message))


class ToolFailure(Exception):
    """Raised inside a tool for a recoverable error; the dispatcher returns it as a result."""

    def __init__(self, code: ErrorCode, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details

    def outcome(self) -> ToolOutcome:
        """The error result this failure stands for."""
        return ToolOutcome.fail(self.code, self.message, **self.details)


@dataclass(frozen=True, slots=True)
class AgentToolResult:
    """One call's result as recorded and fed to the next turn.

    The model reads ``content`` only; ``structured`` stays in the record.
    ``tool_id`` is ``None`` when the called name matched nothing.
    """

    call_id: str
    tool_id: ToolId | None
    content: str
    structured: Any = None
    is_error: bool = False
    error_code: ErrorCode | None = None
    resource_refs: tuple[str, ...] = ()

    @classmethod
    def failure(
        cls, call_id: str, tool_id: ToolId | None, code: ErrorCode, text: str, **details: Any
    ) -> AgentToolResult:
        """The one way the runtime writes a refusal: the same record shape as a tool's
        :meth:`ToolOutcome.fail`, so the model and the journal see one kind of error."""
        return cls(
            call_id,
            tool_id,
            text,
            ToolOutcome.fail(code, text, **details).structured,
            is_error=True,
            error_code=code,
        )

    def to_json(self) -> dict[str, Any]:
        """The result's JSON form, as the journal stores it."""
        return {
            "callId": self.call_id,
            "toolId": None if self.tool_id is None else str(self.tool_id),
            "content": self.content,
            "structured": self.structured,
            "isError": self.is_error,
            "errorCode": None if self.error_code is None else self.error_code.value,
            "resourceRefs": list(self.resource_refs),
        }


@dataclass(frozen=True, slots=True)
class ExecutedCall:
    """The gate's answer for one call: the result and the effect to apply."""

    result: AgentToolResult
    effect: AgentToolEffect = field(default=NO_EFFECT)
