"""One step per fresh engine (the durable engine's unit of work) and ``runs cancel``."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from tavern_agent.providers.gateway import ModelGateway
from tavern_agent.runtime.loop import RunResult
from tavern_agent.runtime.run import Run
from tavern_agent.runtime.scripted import (
    AgentScript,
    Script,
    ScriptedAgents,
    ScriptedGateway,
    call,
    calls,
)
from tavern_agent.runtime.turns import NextRound
from tests.runtime.helpers import COMMIT, FINISH, Harness, events, results, types, write
from tests.runtime.test_agents import setup

CANCEL = ("runs", "cancel")
SCRIPT: Script = [
    calls(("chat_search", {"query": "bridge"}), write("Seraphina wades in first.")),
    call(*COMMIT),
    call(*FINISH),
]


def step_to_end(h: Harness, script: Script) -> tuple[Run, list[str], RunResult]:
    """Drive a run with a new engine (and run) for every step, as workers do."""
    run = h.start()
    outcomes: list[str] = []
    while True:
        engine = h.engine(Run.open(h.assembly, run.run_dir), script)
        try:
            step = asyncio.run(engine.step_once())
        finally:
            engine.close()
        if isinstance(step, RunResult):
            return run, outcomes, step
        outcomes.append(type(step).__name__)


def test_fresh_engine_steps_give_the_journal_of_one_loop(tmp_path: Path) -> None:
    looped = Harness(tmp_path / "loop")
    run, result = looped.drive(SCRIPT)
    stepped = Harness(tmp_path / "steps")
    stepped_run, outcomes, ended = step_to_end(stepped, SCRIPT)
    # three model rounds and two turns of calls before the finish ends the run
    assert outcomes == ["NextRound"] * 5
    assert (ended.status, ended.commits, ended.rounds) == ("completed", 2, 3)
    assert (result.status, result.commits, result.rounds) == ("completed", 2, 3)
    assert types(stepped_run) == types(run)
    assert stepped.chat_messages()[3]["mes"] == looped.chat_messages()[3]["mes"]


def test_runs_cancel_pairs_the_open_calls_of_a_stopped_local_run(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    run = h.start()
    engine = h.engine(run, SCRIPT)
    try:  # the model's first turn is stored; its two calls have not run
        assert asyncio.run(engine.step_once()) == NextRound()
    finally:
        engine.close()
    proc = subprocess.run(
        [sys.executable, "-m", "tavern_agent", "--data-dir", str(h.data.path), *CANCEL, run.id],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{run.id}: cancelled"
    paired = [r["errorCode"] for r in results(run)]
    assert paired == ["run.cancelled", "run.cancelled"]
    assert [e["type"] for e in events(run)][-1] == "run_cancelled"
    assert len(h.chat_messages()) == 3  # nothing was committed


def live_steps_to_end(h: Harness, run: Run, gateway: ModelGateway) -> RunResult:
    """Drive a run with one engine, step by step, as a worker that keeps it does."""
    engine = h.engine(Run.open(h.assembly, run.run_dir), gateway)
    try:
        while True:
            step = asyncio.run(engine.step_once())
            if isinstance(step, RunResult):
                return step
            assert engine.live
    finally:
        engine.close()


def test_one_live_engine_stepping_gives_the_journal_of_one_loop(tmp_path: Path) -> None:
    looped = Harness(tmp_path / "loop")
    run, _ = looped.drive(SCRIPT)
    stepped = Harness(tmp_path / "live")
    live_run = stepped.start()
    ended = live_steps_to_end(stepped, live_run, ScriptedGateway(SCRIPT))
    assert (ended.status, ended.commits, ended.rounds) == ("completed", 2, 3)
    assert types(live_run) == types(run)


def test_a_handoff_goes_on_alike_on_a_live_engine_and_on_fresh_ones(tmp_path: Path) -> None:
    brief = {"objective": "close the scene"}
    scripts: dict[str, AgentScript] = {
        "writer": [call("agent_handoff", {"agentId": "closer", "handoff": brief})],
        "closer": [call(*write("The ford is crossed.")), call(*COMMIT), call(*FINISH)],
    }
    h_live, root = setup(tmp_path / "live")
    live_run = h_live.start(root)
    live = live_steps_to_end(h_live, live_run, ScriptedAgents(scripts))
    h_fresh, root = setup(tmp_path / "fresh")
    fresh_run = h_fresh.start(root)
    gateway = ScriptedAgents(scripts)  # one model, its answers counted per invocation
    while True:
        engine = h_fresh.engine(Run.open(h_fresh.assembly, fresh_run.run_dir), gateway)
        try:
            step = asyncio.run(engine.step_once())
        finally:
            engine.close()
        if isinstance(step, RunResult):
            break
    assert (live.status, live.commits) == (step.status, step.commits) == ("completed", 2)
    assert types(live_run) == types(fresh_run)
    assert types(live_run).count("invocation_started") == 2  # the writer, then the closer


class SilentModel:
    """A model that never answers (a step waits on it until cancelled)."""

    async def respond(self, request: object) -> object:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        return None


def test_a_cancelled_step_can_leave_the_run_to_the_next_step(tmp_path: Path) -> None:
    """A durable engine's step is cancelled when its worker stops: the run goes on."""
    h = Harness(tmp_path)
    run = h.start()

    async def cancelled_step(end_when_cancelled: bool) -> list[str]:
        engine = h.engine(Run.open(h.assembly, run.run_dir), SilentModel())  # type: ignore[arg-type]
        asked = types(run).count("model_request")
        step = asyncio.ensure_future(engine.step_once(end_when_cancelled=end_when_cancelled))
        while types(run).count("model_request") == asked:  # the step waits on the model
            await asyncio.sleep(0.01)
        step.cancel()
        with pytest.raises(asyncio.CancelledError):
            await step
        engine.close()
        return types(run)

    # Left as a lost process leaves it: the next step asks the model again.
    assert asyncio.run(cancelled_step(False))[-1] == "model_request"
    ended = asyncio.run(cancelled_step(True))
    assert ended[-3:] == ["model_request", "model_request", "run_cancelled"]
