"""A snapshot per protocol with a real built-in (dice_roll) and a no-argument extension tool."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tavern_agent.assembly import Assembly
from tavern_agent.core.descriptors import Scene, ToolDescriptor
from tavern_agent.core.ids import ToolId
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Profile
from tavern_agent.tools.catalog import ExternalReceipt, InMemoryToolSource
from tavern_agent.tools.context import CallContext
from tavern_agent.tools.gate import ToolRequestGate
from tavern_agent.tools.snapshot import ToolSnapshot

DICE = ToolId.builtin("dice.roll")
CLOCK = ToolId.extension("scene", "clock")


async def _clock(args: dict[str, Any], ctx: CallContext) -> ExternalReceipt:
    return ExternalReceipt("It is dusk in the tavern.")


def make_assembly() -> Assembly:
    extensions = InMemoryToolSource()
    extensions.add(
        ToolDescriptor(CLOCK, "The time of day in the scene.", name_hint="scene_clock"), _clock
    )
    return Assembly(Path("/nonexistent-data-root"), extensions=extensions)


def snapshot_for(protocol: ModelProtocol, assembly: Assembly | None = None) -> ToolSnapshot:
    profile = Profile.allowing([DICE, CLOCK], "golden")
    return (assembly or make_assembly()).snapshot(profile, Scene.CHAT, protocol, "inv_golden")


def gate_for(protocol: ModelProtocol) -> ToolRequestGate:
    assembly = make_assembly()
    return assembly.gate(snapshot_for(protocol, assembly), rng=random.Random(11))


@pytest.fixture(params=list(ModelProtocol), ids=lambda p: p.value)
def protocol(request: pytest.FixtureRequest) -> ModelProtocol:
    return ModelProtocol(request.param)
