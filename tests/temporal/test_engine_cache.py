"""A worker keeps a run's engine between its steps, and folds the journal again when
another worker wrote to it meanwhile."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tavern_agent.runtime.loop import Engine, RunResult
from tavern_agent.runtime.run import Run
from tavern_agent.runtime.scripted import ScriptedGateway
from tavern_agent.temporal.activities import EngineCache, HeldEngine, UnlockedWhileAsking
from tests.runtime.helpers import Harness, types
from tests.runtime.test_step_once import SCRIPT

pytestmark = pytest.mark.temporal


def test_a_held_engine_is_used_until_another_worker_takes_a_step(tmp_path: Path) -> None:
    looped = Harness(tmp_path / "loop")
    loop_run, _ = looped.drive(SCRIPT)
    h = Harness(tmp_path / "steps")
    run = h.start()
    gateway = ScriptedGateway(SCRIPT)  # one model for every worker
    cache = EngineCache()
    here = str(run.run_dir)

    def fresh() -> HeldEngine:
        unlocked = UnlockedWhileAsking(gateway)  # no lock given: it just asks the model
        engine = Engine(Run.open(h.assembly, run.run_dir), unlocked, fsync=False)
        return HeldEngine(engine, unlocked, 0)

    async def step(held: HeldEngine) -> object:
        outcome = await held.engine.step_once()
        held.journal_bytes = held.engine.journal.size()
        return outcome

    async def scenario() -> list[bool]:
        taken: list[bool] = []
        held = fresh()
        await step(held)  # this worker: the run starts, the first model turn is stored
        await cache.put(here, held)
        again = await cache.take(here)  # this worker's next step: the same engine
        taken.append(again is held)
        assert again is not None
        await step(again)
        await cache.put(here, again)
        elsewhere = fresh()  # the next step moves to another worker
        await step(elsewhere)
        await elsewhere.close()
        stale = await cache.take(here)  # back here: the held engine missed that step
        taken.append(stale is not None)
        current = fresh()  # the rest on an engine that folds the journal afresh
        while not isinstance(await step(current), RunResult):
            pass
        await current.close()
        return taken

    taken = asyncio.run(scenario())
    assert taken == [True, False]
    assert (cache.hits, cache.misses) == (1, 1)
    assert types(run) == types(loop_run)  # the same journal as one loop
