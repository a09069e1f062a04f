"""A Python extension tool that takes its time, to cancel a run in the middle of a call."""

from __future__ import annotations

import asyncio

from tavern_agent.extensions import registry


@registry.tool(extension_id="slow-test", name="wait", description="Wait a while.")
async def wait(seconds: float = 60) -> str:
    await asyncio.sleep(seconds)
    return "waited"
