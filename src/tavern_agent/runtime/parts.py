"""What the parts of one engine share: the run, its journal, state, tasks and checkpoints.

The engine builds one :class:`RunParts` and hands it to each of its parts (the
calls, the effects, the endings, start and resume); a :class:`RunPart` keeps
its members under their own names, so every part reads ``self.run``,
``self.journal`` and the rest the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from tavern_agent.runtime.agents import AgentTasks
from tavern_agent.runtime.checkpoint import Checkpoints
from tavern_agent.runtime.journal import Journal
from tavern_agent.runtime.run import Run
from tavern_agent.runtime.state import RunState


@dataclass(frozen=True, slots=True)
class RunParts:
    """One run's live pieces, as every part of its engine shares them."""

    run: Run
    journal: Journal
    state: RunState
    tasks: AgentTasks
    checkpoints: Checkpoints


class RunPart:
    """A part of one run's engine: it holds the shared :class:`RunParts` members."""

    def __init__(self, parts: RunParts) -> None:
        self.run = parts.run
        self.journal = parts.journal
        self.state = parts.state
        self.tasks = parts.tasks
        self.checkpoints = parts.checkpoints
