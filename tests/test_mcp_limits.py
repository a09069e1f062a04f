"""Fast limits of the MCP manager that need no server: argument size and call deadlines."""

from __future__ import annotations

import asyncio
import time

import pytest

from tavern_agent.mcp.deadlines import TICK, Deadlines
from tavern_agent.mcp.manager import MAX_ARGUMENT_BYTES, oversize


def test_oversize_is_exact_above_the_limit_and_none_below() -> None:
    assert oversize({"path": "notes/a.md", "n": 3, "tags": ["x", "y"]}) is None
    ascii_near = {"text": "a" * (MAX_ARGUMENT_BYTES - 100)}  # the cheap bound is over; exact is not
    assert oversize(ascii_near) is None
    too_big = {"text": "é" * (MAX_ARGUMENT_BYTES // 2 + 10)}  # 2 bytes each in UTF-8
    assert oversize(too_big) == MAX_ARGUMENT_BYTES + 20 + len('{"text": ""}')
    nested = {"rows": [{"cell": "z" * 1000}] * 300}
    assert oversize(nested) is not None and oversize(nested) > MAX_ARGUMENT_BYTES  # type: ignore[operator]


async def test_a_deadline_raises_timeout_and_leaves_the_task_usable() -> None:
    deadlines = Deadlines()
    started = time.monotonic()
    with pytest.raises(TimeoutError), deadlines.within(0.2):
        await asyncio.sleep(10)
    assert 0.2 <= time.monotonic() - started < 0.2 + 3 * TICK + 0.5
    with deadlines.within(5):  # a call within its time is untouched
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.01)  # no cancellation left pending on this task
    await deadlines.aclose()


async def test_an_outer_cancel_is_not_mistaken_for_a_deadline() -> None:
    deadlines = Deadlines()

    async def call() -> None:
        with deadlines.within(30):
            await asyncio.sleep(10)

    task = asyncio.create_task(call())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await deadlines.aclose()


def test_the_watchdog_follows_a_new_event_loop() -> None:
    deadlines = Deadlines()

    async def late() -> None:
        with deadlines.within(0.1):
            await asyncio.sleep(10)

    for _ in range(2):  # each asyncio.run is a new loop, as each CLI command is
        with pytest.raises(TimeoutError):
            asyncio.run(late())
