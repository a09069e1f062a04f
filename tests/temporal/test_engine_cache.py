"""A worker keeps a run's engine between its steps; when another worker wrote to the
journal meanwhile, the kept engine folds just those events, or (commits, tasks) the
run is opened and its journal folded afresh."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from temporalio.worker import Worker

from tavern_agent.assembly import Assembly
from tavern_agent.runtime.loop import Engine, RunResult
from tavern_agent.runtime.run import Run
from tavern_agent.runtime.scripted import ScriptedGateway
from tavern_agent.runtime.turns import NextCall
from tavern_agent.temporal.activities import (
    EngineCache,
    HeldEngine,
    RunActivities,
    UnlockedWhileAsking,
)
from tavern_agent.temporal.worker import connect
from tavern_agent.temporal.workflow import RunWorkflow, TaskWorkflow
from tests.runtime.helpers import Harness, example_run_args, results, types
from tests.runtime.test_call_steps import SCRIPT, outcomes
from tests.temporal.helpers import activity_types, cli_json, kinds, payloads, run_messages
from tests.temporal.test_temporal_engine import on_temporal, with_long_shell_profile

pytestmark = pytest.mark.temporal


class Stepper:
    """A worker's engine cache, and how it opens a run when it has no engine to go on with."""

    def __init__(self, h: Harness, run: Run, gateway: ScriptedGateway) -> None:
        self.h, self.run, self.gateway = h, run, gateway
        self.cache = EngineCache()

    async def step(self, call_id: str | None) -> object:
        """One step (a model request, or the call ``call_id``), as an activity takes it."""
        here = str(self.run.run_dir)
        held = await self.cache.take(here)
        if held is None:
            unlocked = UnlockedWhileAsking(self.gateway)  # no lock given: it just asks
            run = Run.open(self.h.assembly, self.run.run_dir)
            engine = Engine(run, unlocked, fsync=False, durable_steps=False)
            held = HeldEngine(engine, unlocked, 0)
        outcome = await held.engine.step_once(one_call=True, call_id=call_id)
        held.engine.make_durable()  # as the activity does before it answers
        if isinstance(outcome, RunResult):
            await held.close()
        else:
            held.journal_bytes = held.engine.journal.size()
            await self.cache.put(here, held)
        return outcome

    def counts(self) -> tuple[int, int, int]:
        return self.cache.hits, self.cache.caught_up, self.cache.misses


def alternate(
    h: Harness, order: str
) -> tuple[Run, RunResult, dict[str, Stepper], list[dict[str, object]]]:
    """Step a new run to its end, each step on the worker ``order`` names (cycled); the
    transcripts the model was sent."""
    run = h.start()
    gateway = ScriptedGateway(SCRIPT)  # one model for every worker
    workers = {name: Stepper(h, run, gateway) for name in set(order)}

    async def scenario() -> RunResult:
        call_id: str | None = None
        for n in range(100):
            outcome = await workers[order[n % len(order)]].step(call_id)
            if isinstance(outcome, RunResult):
                return outcome
            call_id = outcome.call_id if isinstance(outcome, NextCall) else None
        raise AssertionError("the run did not end")

    result = asyncio.run(scenario())
    return run, result, workers, [r.transcript.to_json() for r in gateway.requests]


def test_a_kept_engine_folds_what_another_worker_appended(tmp_path: Path) -> None:
    loop_run, loop_result = Harness(tmp_path / "loop").drive(SCRIPT)
    one = Harness(tmp_path / "one")
    one_run, one_result, one_worker, one_sent = alternate(one, "a")
    two = Harness(tmp_path / "two")
    two_run, two_result, workers, two_sent = alternate(two, "ab")
    # The same journal and results as the loop's, on one worker and on two, and the
    # model was sent the same transcripts.
    assert types(one_run) == types(two_run) == types(loop_run)
    assert len(two_sent) == 3 and two_sent == one_sent
    assert results(two_run) == results(one_run) == results(loop_run)
    assert outcomes(two_run) == outcomes(one_run) == outcomes(loop_run)
    assert two.chat_messages()[-1]["mes"] == one.chat_messages()[-1]["mes"]
    ended = [(r.status, r.commits, r.rounds) for r in (loop_result, one_result, two_result)]
    assert ended == [("completed", 2, 3)] * 3
    # One worker: its engine goes on from the run's first step (opened there).
    assert one_worker["a"].counts() == (9, 0, 1)
    # Two, taking turns at each of the run's 10 steps (3 model requests, 7 calls; the
    # patch on b needs the read state of a's read): each worker's engine folds the other's
    # step before its own, except a's after b's turn ends (an auto-publish: a commit) and
    # after b's commit call, where a opens the run afresh.
    assert workers["a"].counts() == (0, 2, 3)
    assert workers["b"].counts() == (0, 4, 1)


@pytest.mark.slow
def test_a_run_s_steps_taking_turns_on_two_workers_fold_only_what_the_other_appended(
    temporal_server: str, tmp_path: Path
) -> None:
    """On a dev server: one worker runs the run's workflow and its local activities (model
    requests, quick calls), the other the shell calls the server schedules (allowed
    minutes). After each shell call the first worker's kept engine folds the shell call's
    events instead of the whole journal, and the run ends as on the local engine."""
    data = tmp_path / "data"

    async def scenario() -> tuple[Any, ...]:
        client = await connect(temporal_server)
        async with await Assembly.open(data) as here, await Assembly.open(data) as there:
            first, second = RunActivities(here), RunActivities(there)
            workflows = Worker(
                client,
                task_queue="turns",
                workflows=[RunWorkflow, TaskWorkflow],
                activities=first.activities,
                no_remote_activities=True,
            )
            scheduled = Worker(client, task_queue="turns", activities=second.activities)
            try:
                async with workflows, scheduled:
                    local = await cli_json(tmp_path / "local", *example_run_args(tmp_path, "local"))
                    args = example_run_args(tmp_path, "remote")
                    args = with_long_shell_profile(tmp_path, "remote", args)
                    remote = await cli_json(data, *args, *on_temporal(temporal_server, "turns"))
                    shells = await activity_types(temporal_server, remote["runId"], local=False)
            finally:
                await first.close()
                await second.close()
            return local, remote, shells, first.engines, second.engines

    local, remote, shells, first, second = asyncio.run(scenario())
    assert (remote["status"], remote["commits"]) == (local["status"], local["commits"])
    assert remote["committedMessage"] == local["committedMessage"]
    remote_dir, local_dir = Path(remote["runDir"]), Path(local["runDir"])
    assert kinds(remote_dir) == kinds(local_dir)
    stored = [r["result"] for r in payloads(remote_dir, "tool_result_stored")]
    assert stored == [r["result"] for r in payloads(local_dir, "tool_result_stored")]
    assert len(run_messages(tmp_path / "remote.jsonl", remote["runId"])) == 1
    assert shells == ["tool_call"] * 3  # the three shell calls, on the second worker
    # The first worker opened the run once and caught up after each shell call; the
    # second was behind by a commit of the first at its second and third shell calls.
    assert (first.hits, first.caught_up, first.misses) == (0, 3, 1)
    assert (second.hits, second.caught_up, second.misses) == (0, 0, 3)
