"""One delegated task as its caller's run knows it, and the wait that ends a durable step."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tavern_agent.core.profile import Profile
from tavern_agent.runtime.briefs import LISTS
from tavern_agent.runtime.invocation import Invocation


@dataclass
class AgentTask:
    """One delegated task: a return-mode child Invocation running in the background."""

    id: str
    agent_id: str
    key: str
    profile: Profile
    parent: Invocation
    inv: Invocation
    title: str
    status: str = "running"  # running, completed, failed, cancelled
    result: dict[str, Any] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    seen: bool = False
    reminded: bool = False  # told once that a turn without a call returns nothing
    runner: asyncio.Task[None] | None = None

    @property
    def live(self) -> bool:
        """Whether the task still runs."""
        return self.status == "running"

    def end(self, status: str, result: dict[str, Any]) -> None:
        """The task ended with ``status``; ``result`` is its result record."""
        self.status = status
        self.result = result

    def wake(self) -> None:
        """Tell the waiters that the task ended."""
        self.done.set()

    def mark_seen(self) -> None:
        """Its caller was told the task ended."""
        self.seen = True

    def mark_reminded(self) -> None:
        """The task was told that a turn without a call returns nothing."""
        self.reminded = True

    def run_by(self, runner: asyncio.Task[None]) -> None:
        """The background task that drives it in this process."""
        self.runner = runner

    def entry(self, budget_chars: int) -> dict[str, Any]:
        """What the caller is told about the task."""
        out: dict[str, Any] = {"taskId": self.id, "agentId": self.agent_id, "status": self.status}
        if self.result is not None:
            summary = str(self.result.get("summary", ""))
            if len(summary) > budget_chars:
                summary = summary[:budget_chars] + f"… (full text: {self.result['summaryPath']})"
            out["summary"] = summary
            out["resultPath"] = self.result["summaryPath"]
            for name in ("artifacts", *LISTS):
                if self.result.get(name):
                    out[name] = self.result[name]
        return out


class AwaitingTasks(Exception):
    """An ``agent.await`` call that would block, on a durable engine: the step ends here.

    Its host waits for the tasks (at most ``timeout_ms``), then continues the
    call (:meth:`AgentTasks.wait` with ``block=False``).
    """

    def __init__(self, call_id: str, task_ids: Sequence[str], mode: str, timeout_ms: int) -> None:
        super().__init__(f"call {call_id} waits for {', '.join(task_ids)}")
        self.call_id = call_id
        self.task_ids = tuple(task_ids)
        self.mode = mode
        self.timeout_ms = timeout_ms
