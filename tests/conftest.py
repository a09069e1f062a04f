"""Shared fixtures: an assembly with the real built-ins plus in-memory external tools;
the order the suite's files start in."""

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

# `make test` runs the suite on pytest-xdist workers, a file at a time, in collection
# order. These two files take minutes each on two busy cores, so they start first, one
# on each worker; the other slow files follow, and the quick tests fill in around them.
FIRST = ("tests/temporal/test_temporal_engine.py", "tests/test_mcp_conformance.py")


def start_order(item: pytest.Item) -> int:
    path = item.nodeid.split("::", 1)[0]
    if path in FIRST:
        return FIRST.index(path)
    return len(FIRST) if item.get_closest_marker("slow") else len(FIRST) + 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=start_order)  # stable: the order within a file stays


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
