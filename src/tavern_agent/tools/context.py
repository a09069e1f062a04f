"""What a running tool may know about its call."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from tavern_agent.core.descriptors import Scene
from tavern_agent.core.ids import ToolId

if TYPE_CHECKING:
    from tavern_agent.chat.run_input import ChatRun
    from tavern_agent.tools.snapshot import ToolSnapshot
    from tavern_agent.workspace.read_state import ReadState
    from tavern_agent.workspace.store import Workspace


class ResultFiles(Protocol):
    """Where spilled results are written: a workspace-relative, write-once store."""

    def write_once(self, logical_path: str, data: bytes) -> None:
        """Write a spilled result under ``logical_path``; never overwrites."""


@dataclass(slots=True)
class CallContext:
    """Passed to every tool call: identities, scene, the snapshot and a cancel signal.

    ``rng`` is the invocation's source of randomness; tests seed it.
    ``cancelled`` is set when the run is cancelled; long tools should watch it.
    ``reads`` is the invocation's read state per logical path.
    ``result_files`` is where files a reply brings (images, resources) may be saved.
    ``chat`` is the run's chat and frozen input (chat runs only).
    """

    run_id: str
    invocation_id: str
    call_id: str
    round: int
    scene: Scene
    snapshot: ToolSnapshot
    rng: random.Random = field(default_factory=random.Random)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    result_files: ResultFiles | None = None
    workspace: Workspace | None = None
    reads: dict[str, ReadState] = field(default_factory=dict)
    chat: ChatRun | None = None

    def model_name(self, tool_id: ToolId | str, fallback: str) -> str:
        """This snapshot's name for a tool, for hints in results and errors."""
        return self.snapshot.name_of(tool_id) or fallback

    def require_workspace(self) -> Workspace:
        """The invocation's workspace; raises ``RuntimeError`` when the
        invocation has none (a tool that needs one is only offered with one)."""
        if self.workspace is None:
            raise RuntimeError("this tool needs a workspace, and the run has none")
        return self.workspace
