"""A real workspace folder and a gate with every built-in tool."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tavern_agent.assembly import Assembly
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.results import AgentToolResult, ExecutedCall
from tavern_agent.workspace.roots import RootPolicy
from tavern_agent.workspace.store import Workspace


class Agent:
    """A gate over a workspace, with helpers that call tools by name."""

    def __init__(self, workspace: Workspace, scene: Scene = Scene.CHAT) -> None:
        self.assembly = Assembly(workspace.root / "data")
        profile = self.assembly.everything(scene)
        snap = self.assembly.snapshot(profile, scene, ModelProtocol.OPENAI_CHAT, "inv_ws")
        self.workspace = workspace
        self.gate = self.assembly.gate(snap, rng=random.Random(0), workspace=workspace)
        self.n = 0

    async def run(self, name: str, **args: object) -> ExecutedCall:
        self.n += 1
        return await self.gate.handle(ToolCall(f"call_{self.n}", name, args), round=1)

    async def __call__(self, name: str, **args: object) -> AgentToolResult:
        return (await self.run(name, **args)).result


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path / "ws", RootPolicy.for_scene(Scene.CHAT))


@pytest.fixture
def agent(ws: Workspace) -> Agent:
    return Agent(ws)
