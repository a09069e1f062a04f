"""Shared fixtures: an assembly with the real built-ins plus in-memory external tools."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tavern_agent.assembly import Assembly
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Profile
from tavern_agent.tools.catalog import InMemoryToolSource
from tavern_agent.tools.gate import ToolRequestGate


@pytest.fixture
def mcp() -> InMemoryToolSource:
    return InMemoryToolSource()


@pytest.fixture
def extensions() -> InMemoryToolSource:
    return InMemoryToolSource()


@pytest.fixture
def assembly(tmp_path: Path, mcp: InMemoryToolSource, extensions: InMemoryToolSource) -> Assembly:
    return Assembly(tmp_path / "data", mcp=mcp, extensions=extensions)


def make_gate(
    assembly: Assembly,
    profile: Profile,
    *,
    workspace: Path | None = None,
    scene: Scene = Scene.CHAT,
    protocol: ModelProtocol = ModelProtocol.OPENAI_CHAT,
    seed: int = 7,
) -> ToolRequestGate:
    snapshot = assembly.snapshot(profile, scene, protocol, "inv_test")
    return assembly.gate(
        snapshot, run_id="run_test", rng=random.Random(seed), results_root=workspace
    )
