"""An Invocation: one frozen tool snapshot, its own gate and counts, its transcript.

The root invocation of a run builds its snapshot when it is created and
writes it once to ``input/invocations/<inv>/tool_snapshot.json``. An output
revision is a new invocation that loads the same snapshot but has its
own gate, so its calls are counted on their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tavern_agent.core.profile import Profile
from tavern_agent.providers.transcript import (
    AssistantMessage,
    ToolResultMessage,
    Transcript,
    UserMessage,
)
from tavern_agent.tools.gate import ToolRequestGate
from tavern_agent.tools.snapshot import ToolSnapshot


@dataclass
class Invocation:
    """Live state of one invocation; ``round`` counts its own model requests."""

    id: str
    snapshot: ToolSnapshot
    gate: ToolRequestGate
    transcript: Transcript
    kind: str = "root"  # "root", "revision", "child" (a delegated task) or "handoff"
    revision_of: str | None = None
    profile: Profile | None = None  # the agent's profile when it is not the run's
    parent_id: str | None = None  # the delegating invocation of a child
    task_id: str | None = None  # a child's task
    round: int = 0
    requested: set[str] = field(default_factory=set)  # call ids journaled as requested
    resulted: set[str] = field(default_factory=set)  # call ids with a stored result
    finished: bool = False

    @property
    def is_child(self) -> bool:
        """Whether this invocation is a delegated child task."""
        return self.kind == "child"

    def record(self) -> dict[str, Any]:
        """The invocation's entry in the run record: ids,
        kind, its agent's profile and parent task."""
        out: dict[str, Any] = {
            "id": self.id,
            "snapshotId": self.snapshot.id,
            "kind": self.kind,
            "revisionOf": self.revision_of,
        }
        if self.profile is not None:
            out["agentId"] = self.profile.id
            out["profile"] = self.profile.to_json()
        if self.parent_id is not None:
            out |= {"parentInvocationId": self.parent_id, "taskId": self.task_id}
        return out

    # Changes of the live state, each through its own method (the loop, the
    # delegation and the journal's fold call them; none sets the fields).

    def add_turn(self, message: AssistantMessage) -> None:
        """The model's answer to this invocation's next round."""
        self.transcript = self.transcript.append(message)
        self.round += 1

    def add_user(self, message: UserMessage) -> None:
        """A user message: a reminder, or results of the caller's tasks."""
        self.transcript = self.transcript.append(message)

    def call_requested(self, call_id: str) -> None:
        """The call ``call_id`` was journaled as requested (its effect may have happened)."""
        self.requested.add(call_id)

    def add_result(self, result: ToolResultMessage) -> None:
        """A call's stored result."""
        self.resulted.add(result.result.call_id)
        self.transcript = self.transcript.append(result)

    def last_turn(self) -> AssistantMessage | None:
        """The newest assistant message."""
        for item in reversed(self.transcript.items):
            if isinstance(item, AssistantMessage):
                return item
        return None

    def pending_calls(self) -> list[str]:
        """Call ids of the last assistant turn that have no result yet."""
        turn = self.last_turn()
        return (
            []
            if turn is None
            else [c.call_id for c in turn.calls if c.call_id not in self.resulted]
        )
