"""The live side of a run's tools: snapshots and gates for the invocations it makes.

A :class:`~tavern_agent.runtime.run.Run` is the run's record (its folder,
``run.json``, its invocations); the tool sources it draws on are live (MCP
connections, extension hosts) and belong to the process's
:class:`~tavern_agent.assembly.Assembly`. A run reaches them only through its
:class:`RunTools`, made when the run is started or opened: it freezes the tool
set of a new invocation (a delegated child, a handoff's target), builds an
invocation's gate, and says where a tool comes from, and nothing more.
"""

from __future__ import annotations

import random
from pathlib import Path

from tavern_agent.assembly import Assembly
from tavern_agent.chat.run_input import ChatRun
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.ids import ToolId
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Profile
from tavern_agent.tools.gate import ToolRequestGate
from tavern_agent.tools.snapshot import ToolSnapshot
from tavern_agent.workspace.store import Workspace


class RunTools:
    """Builds one run's tool snapshots and gates from the process's tool sources."""

    def __init__(self, assembly: Assembly, scene: Scene, protocol: ModelProtocol) -> None:
        self._assembly = assembly
        self.scene = scene
        self.protocol = protocol

    @property
    def repeatable(self) -> frozenset[ToolId]:
        """The built-ins whose calls may run again after an interruption (no barrier)."""
        return frozenset(self._assembly.catalog.builtins.repeatable)

    def snapshot(
        self, profile: Profile, snapshot_id: str | None = None, *, child: bool = False
    ) -> ToolSnapshot:
        """Freeze a new invocation's tool set; ``child``: a delegated child agent's."""
        return self._assembly.snapshot(profile, self.scene, self.protocol, snapshot_id, child=child)

    def gate(
        self,
        snapshot: ToolSnapshot,
        *,
        invocation_id: str,
        run_id: str,
        rng: random.Random,
        workspace: Workspace,
        chat: ChatRun | None,
        results_root: Path,
    ) -> ToolRequestGate:
        """The gate of one invocation (its own budget, read states and result files)."""
        return self._assembly.gate(
            snapshot,
            invocation_id=invocation_id,
            run_id=run_id,
            rng=rng,
            workspace=workspace,
            chat=chat,
            results_root=results_root,
        )

    def source_of(self, tool_id: ToolId) -> str:
        """Where a tool comes from, for the journal: built-in, an MCP server, a module or a page."""
        return self._assembly.source_of(tool_id)
