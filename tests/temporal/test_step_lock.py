"""The run's step lock: one journal writer at a time, let go while a model answers.

The worker's activities run in this process (the SDK's ``ActivityEnvironment``
gives each its activity context, no server): while the run's model request
waits on a model that has not answered, the delegated task's steps take the
lock, run and finish; then the model answers and the run goes on, its journal
numbered without a gap, and the engine that waited not kept.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from tavern_agent.providers.gateway import ModelRequest
from tavern_agent.runtime.journal import read_events
from tavern_agent.runtime.scripted import AgentScript, ScriptedAgents, Turn, call
from tavern_agent.temporal.activities import RunActivities, RunLock
from tavern_agent.temporal.workflow import CallInput, StepOutcome, TaskInput
from tests.runtime.helpers import payloads
from tests.runtime.test_agents import await_, delegate_then_write, returns, setup

pytestmark = pytest.mark.temporal
# How long a step may take before the test gives up on it: only a hang takes it (a step
# takes milliseconds on idle cores, seconds on busy ones).
STEP_LIMIT = 60


def test_a_task_steps_while_the_run_s_model_answers(tmp_path: Path) -> None:
    h, root = setup(tmp_path)
    answer = asyncio.Event()
    asked = asyncio.Event()

    async def slow_await(request: ModelRequest) -> Turn:
        asked.set()
        await answer.wait()
        return call(*await_())

    scripts: dict[str, AgentScript] = {
        "writer": delegate_then_write(
            "scout", "Check the bridge.", "The bridge holds.", wait=slow_await
        ),
        "scout": [call("dice_roll", {"formula": "1d6"}), returns("It holds.")],
    }
    run = h.start(root)
    model = ScriptedAgents(scripts)
    activities = RunActivities(h.assembly, gateways=lambda run: model)
    here = str(run.run_dir)

    async def act(fn: object, arg: object) -> object:
        return await ActivityEnvironment().run(fn, arg)  # type: ignore[arg-type]

    async def scenario() -> tuple[list[str], StepOutcome]:
        first = await act(activities.model_request, here)
        assert isinstance(first, StepOutcome) and first.kind == "NextCall"
        delegated = await act(activities.tool_call, CallInput(here, str(first.call_id)))
        assert isinstance(delegated, StepOutcome) and delegated.kind == "NextRound"
        (task_id,) = delegated.live_tasks
        waiting = asyncio.ensure_future(act(activities.model_request, here))
        await asyncio.wait_for(asked.wait(), STEP_LIMIT)
        statuses = []
        while not statuses or not statuses[-1]:  # the task's request, call, request, return
            step = act(activities.task_step, TaskInput(here, task_id))
            statuses.append(str(await asyncio.wait_for(step, STEP_LIMIT)))
        assert not waiting.done()  # its model has still not answered
        answer.set()
        after = await asyncio.wait_for(waiting, STEP_LIMIT)
        assert isinstance(after, StepOutcome)
        outcome: object = after
        while not (isinstance(outcome, StepOutcome) and outcome.kind == "ended"):
            assert isinstance(outcome, StepOutcome)
            if outcome.kind == "NextCall":
                outcome = await act(activities.tool_call, CallInput(here, str(outcome.call_id)))
            else:
                outcome = await act(activities.model_request, here)
        await activities.close()
        return statuses, outcome

    misses_before = activities.engines.misses
    statuses, ended = asyncio.run(scenario())
    assert statuses == ["", "", "", "completed"]
    assert (ended.status, ended.commits) == ("completed", 2)
    events = read_events(run.run_dir / "events.jsonl")
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    # the task's steps were journaled between the run's model request and its answer
    kinds = [(e["type"], e["payload"].get("invocationId")) for e in events]
    parent = run.invocations[0].id
    asked_at = max(i for i, k in enumerate(kinds) if k == ("model_request", parent) and i < 20)
    answered_at = next(
        i for i, k in enumerate(kinds) if k == ("model_response_stored", parent) and i > asked_at
    )
    finished_at = next(i for i, k in enumerate(kinds) if k[0] == "task_finished")
    assert asked_at < finished_at < answered_at
    # the await, answered after the task had ended, did not wait
    awaited = [
        p
        for p in payloads(run.run_dir, "tool_result_stored")
        if p["result"]["toolId"] == "builtin:agent.await"
    ]
    assert awaited[0]["result"]["structured"]["tasks"][0]["summary"] == "It holds."
    assert not payloads(run.run_dir, "task_await_waiting")
    # the engine that waited on its model was not kept (the task journaled meanwhile): the
    # run's next activity went on from the task's last engine, which folded just the
    # run's reply (the run's first activity and the task's first opened their engines)
    engines = activities.engines
    assert (engines.caught_up, engines.misses) == (1, misses_before + 2)


def test_the_lock_is_held_by_one_step_at_a_time(tmp_path: Path) -> None:
    async def scenario() -> list[str]:
        order: list[str] = []
        async with RunLock(tmp_path):
            order.append("first holds")
            second = asyncio.ensure_future(_take(tmp_path, order))
            await asyncio.sleep(0.2)
            order.append("first lets go")
        await asyncio.wait_for(second, STEP_LIMIT)
        return order

    assert asyncio.run(scenario()) == ["first holds", "first lets go", "second holds"]


async def _take(run_dir: Path, order: list[str]) -> None:
    async with RunLock(run_dir):
        order.append("second holds")
