"""A Python extension tool that holds its call until a file appears (a test lets it go)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from tavern_agent.extensions import registry


@registry.tool(extension_id="hold-test", name="hold", description="Wait for a file.")
async def hold(path: str) -> str:
    return await _released(path)


async def _released(path: str) -> str:
    for _ in range(600):  # 60 s at most
        if Path(path).exists():
            return "released"
        await asyncio.sleep(0.1)
    return "never released"


@registry.tool(
    extension_id="hold-test",
    name="hold_in_process",
    description="Wait for a file, then say which process ran the call.",
)
async def hold_in_process(path: str) -> str:
    return f"{await _released(path)} in process {os.getpid()}"
