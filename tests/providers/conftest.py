"""A snapshot per protocol with a real built-in (dice_roll) and a no-argument extension tool."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tavern_agent.core.descriptors import Scene, ToolDescriptor
from tavern_agent.core.ids import ToolId
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Profile
from tavern_agent.tools.builtin import builtin_registry
from tavern_agent.tools.catalog import ExternalReceipt, InMemoryToolSource, ToolCatalog
from tavern_agent.tools.context import CallContext
from tavern_agent.tools.dispatch import Dispatcher
from tavern_agent.tools.gate import ToolRequestGate
from tavern_agent.tools.snapshot import ToolSnapshot, build_snapshot

DICE = ToolId.builtin("dice.roll")
CLOCK = ToolId.extension("scene", "clock")


async def _clock(args: dict[str, Any], ctx: CallContext) -> ExternalReceipt:
    return ExternalReceipt("It is dusk in the tavern.")


def make_catalog() -> ToolCatalog:
    extensions = InMemoryToolSource()
    extensions.add(
        ToolDescriptor(CLOCK, "The time of day in the scene.", name_hint="scene_clock"), _clock
    )
    return ToolCatalog(builtin_registry(), extensions=extensions)


def snapshot_for(protocol: ModelProtocol, catalog: ToolCatalog | None = None) -> ToolSnapshot:
    profile = Profile.allowing([DICE, CLOCK], "golden")
    return build_snapshot(catalog or make_catalog(), profile, Scene.CHAT, protocol, "inv_golden")


def gate_for(protocol: ModelProtocol) -> ToolRequestGate:
    catalog = make_catalog()
    return ToolRequestGate(
        snapshot_for(protocol, catalog), Dispatcher(catalog), rng=random.Random(11)
    )


@pytest.fixture(params=list(ModelProtocol), ids=lambda p: p.value)
def protocol(request: pytest.FixtureRequest) -> ModelProtocol:
    return ModelProtocol(request.param)
