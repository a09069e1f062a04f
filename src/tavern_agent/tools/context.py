"""What a running tool may know about its call."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tavern_agent.core.descriptors import Scene

if TYPE_CHECKING:
    from tavern_agent.tools.results import ResultFiles
    from tavern_agent.tools.snapshot import ToolSnapshot


@dataclass(slots=True)
class CallContext:
    """Passed to every tool call: identities, scene, the snapshot and a cancel signal.

    ``rng`` is the invocation's source of randomness; tests seed it.
    ``cancelled`` is set when the run is cancelled; long tools should watch it.
    ``result_files`` is where files a reply brings (images, resources) may be saved.
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
