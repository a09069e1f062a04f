"""Steps of one model request or ONE tool call (a durable engine's activity each) give
the journal of the loop that runs whole turns, on a kept engine and on fresh ones."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tavern_agent.assembly import Assembly, ChatSource
from tavern_agent.chat.st_data import Participants
from tavern_agent.config import resolve_profile
from tavern_agent.core.profile import Profile
from tavern_agent.inputs import load_card, load_world
from tavern_agent.providers.gateway import ModelGateway, ReplayGateway
from tavern_agent.runtime.loop import Engine, RunResult
from tavern_agent.runtime.run import Run, RunSpec
from tavern_agent.runtime.scripted import (
    AgentScript,
    Script,
    ScriptedAgents,
    ScriptedGateway,
    call,
    calls,
)
from tavern_agent.runtime.turns import NextCall, NextRound
from tests.runtime.helpers import (
    COMMIT,
    EXAMPLES,
    FINISH,
    WRITER_TOOLS,
    Harness,
    results,
    types,
    write,
)
from tests.runtime.test_agents import setup

Activity = tuple[str, str | None]  # ("model_request", None) or ("tool_call", call id)
READ = ("workspace_read_file", {"file_path": "output/main.md"})
PATCH = (
    "workspace_apply_patch",
    {"file_path": "output/main.md", "old_string": "first", "new_string": "first, lantern high"},
)
# A failing call before a finish (refused: a call of its turn failed), a read and a
# patch of one file in one turn (the patch needs the read's state), then a commit.
SCRIPT: Script = [
    calls(
        ("workspace_read_file", {"file_path": "notes/missing.md"}),
        write("Seraphina wades in first."),
        FINISH,
    ),
    calls(READ, PATCH, COMMIT),
    call(*FINISH),
]


def by_calls(
    open_run: Callable[[], Run], gateway: ModelGateway, *, fresh: bool
) -> tuple[RunResult, list[Activity]]:
    """Drive a run one model request or one call per step, as the workflow's activities do.

    ``fresh``: a new engine (the run opened, its journal folded) for every step, as
    when each activity lands on another worker; else one engine kept throughout.
    All steps share one event loop, as on a worker.
    """
    steps: list[Activity] = []

    async def drive() -> RunResult:
        engine: Engine | None = None
        call_id: str | None = None
        try:
            while True:
                if engine is None or fresh:
                    if engine is not None:
                        engine.close()
                    engine = Engine(open_run(), gateway, fsync=False)
                steps.append(("tool_call", call_id) if call_id else ("model_request", None))
                step = await engine.step_once(one_call=True, call_id=call_id)
                if isinstance(step, RunResult):
                    return step
                call_id = step.call_id if isinstance(step, NextCall) else None
        finally:
            if engine is not None:
                engine.close()

    return asyncio.run(drive()), steps


def outcomes(run: Run) -> list[tuple[bool, str | None, str]]:
    """Each stored result as the model sees it: error or not, its code, its text."""
    return [(bool(r.get("isError")), r.get("errorCode"), r["content"]) for r in results(run)]


def one_activity_each(run: Run, steps: list[Activity]) -> None:
    """One model step per journaled model request, one call step per call."""
    kinds = types(run)
    assert [s for s, _ in steps].count("model_request") == kinds.count("model_request")
    called = [c for s, c in steps if s == "tool_call"]
    assert len(called) == len(set(called)) == kinds.count("tool_call_requested")


def test_steps_of_one_call_give_the_journal_of_whole_turns(tmp_path: Path) -> None:
    looped = Harness(tmp_path / "loop")
    loop_run, loop_result = looped.drive(SCRIPT)
    assert (loop_result.status, loop_result.commits) == ("completed", 2)
    for fresh in (False, True):
        h = Harness(tmp_path / f"fresh-{fresh}")
        run = h.start()
        result, steps = by_calls(
            lambda h=h, run=run: Run.open(h.assembly, run.run_dir),
            ScriptedGateway(SCRIPT),
            fresh=fresh,
        )
        assert (result.status, result.commits, result.rounds) == ("completed", 2, 3)
        assert types(run) == types(loop_run)
        assert outcomes(run) == outcomes(loop_run)
        one_activity_each(run, steps)
        assert h.chat_messages()[3]["mes"] == looped.chat_messages()[3]["mes"]
    codes = [code for _, code, _ in outcomes(loop_run)]
    assert codes[0] == "workspace.path_not_visible" and codes[2] == "agent.finish_after_failed_call"
    assert codes[3:] == [None, None, None, None]  # the patch found the read of its turn


BRIEF = {"objective": "close the scene"}
HANDOFF_SCRIPTS: dict[str, AgentScript] = {
    # An accepted handoff, then a second one (refused) in the same turn: the accepted
    # one must outlive the step of the refused call.
    "writer": [
        calls(
            write("The ford is crossed."),
            ("agent_handoff", {"agentId": "closer", "handoff": BRIEF}),
            ("agent_handoff", {"agentId": "critic", "handoff": BRIEF}),
        )
    ],
    "closer": [
        calls(READ, ("workspace_apply_patch", {**PATCH[1], "old_string": "ford"})),
        calls(COMMIT, FINISH),
    ],
}


def test_a_handoff_outlives_the_steps_of_the_calls_after_it(tmp_path: Path) -> None:
    h_loop, root = setup(tmp_path / "loop")
    loop_run = h_loop.start(root)
    engine = h_loop.engine(loop_run, ScriptedAgents(HANDOFF_SCRIPTS))
    try:
        loop_result = asyncio.run(engine.start())
    finally:
        engine.close()
    assert (loop_result.status, loop_result.commits) == ("completed", 3)
    for fresh in (False, True):
        h, root = setup(tmp_path / f"fresh-{fresh}")
        run = h.start(root)
        result, steps = by_calls(
            lambda h=h, run=run: Run.open(h.assembly, run.run_dir),
            ScriptedAgents(HANDOFF_SCRIPTS),
            fresh=fresh,
        )
        assert (result.status, result.commits) == ("completed", 3)
        assert types(run) == types(loop_run)
        assert outcomes(run) == outcomes(loop_run)
        one_activity_each(run, steps)
    assert types(loop_run).count("invocation_started") == 2  # the writer, then the closer
    second = outcomes(loop_run)[2]  # refused; the first handoff stands
    assert second[1] == "agent.tool_after_finish" and "Only one agent_handoff" in second[2]


async def recorded_run(data: Path) -> Run:
    """A run of the shipped example (``examples/recorded-run``) on a copy of its chat."""
    data.mkdir(parents=True)
    async with await Assembly.open(data, pages=False) as assembly:
        chat = data.parent / "chat.jsonl"
        shutil.copyfile(EXAMPLES / "chat.jsonl", chat)
        card = load_card(EXAMPLES / "seraphina-card.json")
        world = load_world(EXAMPLES / "eldoria-world.json")
        source = ChatSource(
            chat, (world,), card, 7, participants=Participants(character_file="seraphina-card")
        )
        record = {"kind": "replay", "dir": str(EXAMPLES / "recorded-run")}
        prof = resolve_profile(str(EXAMPLES / "profile.json"), data)
        return Run.start(assembly, RunSpec(prof, chat_file=chat, seed=7, model=record, chat=source))


def test_the_recorded_run_by_calls_matches_the_loop(tmp_path: Path) -> None:
    recorded = EXAMPLES / "recorded-run"
    loop_run = asyncio.run(recorded_run(tmp_path / "loop" / "data"))
    engine = Engine(loop_run, ReplayGateway(recorded), fsync=False)
    try:
        loop_result = asyncio.run(engine.start())
    finally:
        engine.close()
    assert (loop_result.status, loop_result.commits) == ("completed", 3)
    for fresh in (False, True):
        data = tmp_path / f"fresh-{fresh}" / "data"
        run = asyncio.run(recorded_run(data))
        assembly = Assembly(run.data)
        result, steps = by_calls(
            lambda assembly=assembly, run=run: Run.open(assembly, run.run_dir),
            ReplayGateway(recorded),
            fresh=fresh,
        )
        assert (result.status, result.commits, result.rounds) == ("completed", 3, 8)
        assert types(run) == types(loop_run)
        assert outcomes(run) == outcomes(loop_run)
        one_activity_each(run, steps)
        assert len(steps) == 8 + 15  # 8 model requests, 15 calls


SHELL_SCRIPT: Script = [
    calls(
        ("workspace_shell", {"command": "sleep 30; echo done"}),
        write("Rowan wades in."),
    ),
]


def test_a_retried_call_step_never_runs_a_call_twice(tmp_path: Path) -> None:
    """A step cut off inside its call (its worker lost) leaves the call started: the
    retried step gives it the outcome-unknown result. A step retried after its call
    had a result (its turn's end included), or a model step while calls are open, runs
    nothing."""
    h = Harness(tmp_path)
    prof = Profile.from_json(
        {
            "id": "writer",
            "name": "Writer",
            "tools": {"allow": [*WRITER_TOOLS, "builtin:workspace.shell"]},
        }
    )
    run = h.start(prof)
    gateway = ScriptedGateway(SHELL_SCRIPT)

    async def step(call_id: str | None, *, cut_off: bool = False) -> object:
        engine = Engine(Run.open(h.assembly, run.run_dir), gateway, fsync=False)
        try:
            task = asyncio.ensure_future(
                engine.step_once(one_call=True, call_id=call_id, end_when_cancelled=False)
            )
            if cut_off:  # the worker is lost while the shell call runs
                while types(run)[-1] != "tool_call_started":
                    await asyncio.sleep(0.01)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                return None
            return await task
        finally:
            engine.close()

    async def scenario() -> list[object]:
        first = await step(None)
        assert isinstance(first, NextCall)
        shell = first.call_id
        await step(shell, cut_off=True)
        answers = [await step(shell), await step(None), await step(shell)]
        assert isinstance(answers[-1], NextCall)
        write_id = answers[-1].call_id
        # The turn's last call; its turn's end auto-publishes the body it wrote.
        assert await step(write_id) == NextRound()
        ended_turn = types(run)
        # Retried after it had ended (its answer lost): nothing runs, nothing is journaled.
        assert await step(write_id) == NextRound()
        assert types(run) == ended_turn
        return answers

    after_retry, model_step, again = asyncio.run(scenario())
    shell_id = results(run)[0]["callId"]
    assert isinstance(again, NextCall) and again.call_id != shell_id  # the write is next
    assert after_retry == model_step == again
    kinds = types(run)
    assert kinds.count("tool_call_started") == 2 and kinds.count("model_request") == 1
    assert kinds.count("commit_confirmed") == 1  # the turn's auto-publish, once
    assert [r.get("errorCode") for r in results(run)] == ["tool.outcome_unknown", None]
