"""Shared fixtures: a catalog with the real built-ins plus in-memory external tools."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tavern_agent.core.descriptors import Scene
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Profile
from tavern_agent.tools.builtin import builtin_registry
from tavern_agent.tools.catalog import InMemoryToolSource, ToolCatalog
from tavern_agent.tools.dispatch import Dispatcher
from tavern_agent.tools.gate import ToolRequestGate
from tavern_agent.tools.results import DirectoryResultFiles
from tavern_agent.tools.snapshot import build_snapshot


@pytest.fixture
def mcp() -> InMemoryToolSource:
    return InMemoryToolSource()


@pytest.fixture
def extensions() -> InMemoryToolSource:
    return InMemoryToolSource()


@pytest.fixture
def catalog(mcp: InMemoryToolSource, extensions: InMemoryToolSource) -> ToolCatalog:
    return ToolCatalog(builtin_registry(), mcp=mcp, extensions=extensions)


def make_gate(
    catalog: ToolCatalog,
    profile: Profile,
    *,
    workspace: Path | None = None,
    scene: Scene = Scene.CHAT,
    protocol: ModelProtocol = ModelProtocol.OPENAI_CHAT,
    seed: int = 7,
) -> ToolRequestGate:
    snapshot = build_snapshot(catalog, profile, scene, protocol, "inv_test")
    files = DirectoryResultFiles(workspace) if workspace is not None else None
    return ToolRequestGate(
        snapshot,
        Dispatcher(catalog),
        result_files=files,
        run_id="run_test",
        rng=random.Random(seed),
    )
