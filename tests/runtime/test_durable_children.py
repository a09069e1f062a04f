"""Delegated children driven step by step, as a durable engine's workflows drive them.

The host below does in one process what the run workflow does on Temporal:
it takes the parent's steps, starts a child's steps once its task is live,
and, when a step ends at an ``agent_await`` that waits, steps the awaited
tasks until the await's condition holds (or declares the timeout passed).
Each step may run on a fresh engine that folds the journal, as on another
worker, so the journal alone must carry the children.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tavern_agent.run_layout import JOURNAL_FILE
from tavern_agent.runtime.journal import read_events
from tavern_agent.runtime.loop import Engine, RunResult
from tavern_agent.runtime.run import Run, all_runs
from tavern_agent.runtime.scripted import AgentScript, ScriptedAgents, call, calls
from tavern_agent.runtime.turns import Awaiting
from tavern_agent.workspace.layout import DataRoot
from tests.chat.helpers import write_chat
from tests.runtime.helpers import (
    TEXTS,
    Harness,
    events,
    payloads,
    write,
)
from tests.runtime.test_agents import (
    await_,
    delegate_then_write,
    drive,
    of_type,
    returns,
    setup,
    stored,
    two_children,
)
from tests.test_cli import run as run_cli

Opener = Callable[[], Engine]


def openers(h: Harness, run: Run, gateway: ScriptedAgents, *, fresh: bool) -> Opener:
    """Engines for the steps: a new one per step (``fresh``), or one kept between steps."""
    kept: list[Engine] = []

    def open_engine() -> Engine:
        if fresh:
            return Engine(Run.open(h.assembly, run.run_dir), gateway, background_children=False)
        if not kept:
            kept.append(Engine(run, gateway, fsync=False, background_children=False))
        return kept[0]

    return open_engine


async def host(
    open_engine: Opener, *, fresh: bool, stall: bool = False, steps: Counter[str] | None = None
) -> RunResult:
    """The run workflow's loop in one process; ``stall``: children take no step (their
    model never answers), so every wait times out."""
    ended: dict[str, str | None] = {}  # task id -> its status once ended, None while live

    async def step_task(task_id: str) -> None:
        if steps is not None:
            steps[task_id] += 1
        engine = open_engine()
        try:
            ended[task_id] = await engine.step_task(task_id)
        finally:
            if fresh:
                engine.close()

    while True:
        engine = open_engine()
        try:
            step = await engine.step_once()
            for task in engine.agents.live():
                ended.setdefault(task.id, None)
        finally:
            if fresh:
                engine.close()
        if isinstance(step, RunResult):
            if not fresh:
                engine.close()
            return step
        if isinstance(step, Awaiting):
            while not stall:
                done = [t for t in step.task_ids if ended[t] is not None]
                if done and (step.mode != "allCompleted" or len(done) == len(step.task_ids)):
                    break
                for task_id in step.task_ids:
                    if ended[task_id] is None:
                        await step_task(task_id)
            continue
        for task_id in [t for t, status in ended.items() if status is None and not stall]:
            await step_task(task_id)  # children go on while the parent does


def durable(h: Harness, root: Any, scripts: dict[str, AgentScript], **kw: Any) -> tuple[Run, Any]:
    run = h.start(root)
    gateway = ScriptedAgents(scripts)
    fresh = kw.pop("fresh")
    result = asyncio.run(host(openers(h, run, gateway, fresh=fresh), fresh=fresh, **kw))
    return run, result


def test_children_stepped_on_fresh_engines_give_the_local_outcome(tmp_path: Path) -> None:
    local_h, root = setup(tmp_path / "local")
    local, local_result, _, _ = drive(local_h, root, two_children())
    for fresh in (True, False):
        h, root = setup(tmp_path / f"durable-{fresh}")
        run, result = durable(h, root, two_children(), fresh=fresh)
        assert (
            (result.status, result.commits)
            == ("completed", 2)
            == (
                local_result.status,
                local_result.commits,
            )
        )
        assert h.chat_messages()[-1]["mes"] == "The bridge is out. / The pace is fine."
        finished = {f["agentId"]: f["result"]["summary"] for f in of_type(run, "task_finished")}
        assert finished == {"scout": "The bridge is out.", "critic": "The pace is fine."}
        # the await ended the parent's step once, then answered with both results
        waiting = of_type(run, "task_await_waiting")
        assert len(waiting) == 1 and waiting[0]["mode"] == "allCompleted"
        awaited = stored(run, "agent_await")
        assert len(awaited) == 1 and awaited[0]["structured"]["timedOut"] is False
        assert "summaries/scout-result.md" in awaited[0]["content"]
        # the same events as the local run, plus the wait; only their order differs
        counted = Counter(e["type"] for e in events(run))
        assert counted - Counter({"task_await_waiting": 1}) == Counter(
            e["type"] for e in events(local)
        )

        # every call of every invocation has exactly one result
        def per_call(kind: str, run: Run = run) -> Counter[tuple[str, str]]:
            found = (e["payload"] for e in events(run) if e["type"] == kind)
            return Counter((p["invocationId"], p["callId"]) for p in found)

        results = per_call("tool_result_stored")
        assert set(results) == set(per_call("tool_call_requested"))
        assert set(results.values()) == {1}


def test_a_task_step_is_one_model_request_or_one_call(tmp_path: Path) -> None:
    """A child turn of two calls takes two steps, the turn's end after the second."""
    h, root = setup(tmp_path)
    scripts: dict[str, AgentScript] = {
        "writer": delegate_then_write("scout", "Roll and note.", "Noted."),
        "scout": [
            calls(("dice_roll", {"formula": "1d6"}), write("rolled", "scratch/roll.md")),
            returns("Rolled."),
        ],
    }
    steps: Counter[str] = Counter()
    run, result = durable(h, root, scripts, fresh=True, steps=steps)
    assert (result.status, result.commits) == ("completed", 2)
    (task_id,) = steps
    (child,) = [p["invocationId"] for p in of_type(run, "task_started")]
    requests = [p for p in of_type(run, "model_request") if p["invocationId"] == child]
    child_calls = [p for p in of_type(run, "tool_call_requested") if p["invocationId"] == child]
    assert (len(requests), len(child_calls)) == (2, 3)
    assert steps[task_id] == len(requests) + len(child_calls)
    assert (run.workspace.root / "scratch" / "roll.md").read_text() == "rolled"
    finished = of_type(run, "task_finished")
    assert [(f["status"], f["result"]["summary"]) for f in finished] == [("completed", "Rolled.")]


def test_an_await_that_times_out_on_a_durable_engine_reports_the_running_task(
    tmp_path: Path,
) -> None:
    h, root = setup(tmp_path)
    scripts: dict[str, AgentScript] = {
        "writer": delegate_then_write(
            "scout",
            "Scout forever.",
            "No news from the scout.",
            wait=call(*await_("allCompleted", timeoutMs=20)),
        ),
        "scout": [returns("Too late.")],
    }
    run, result = durable(h, root, scripts, fresh=True, stall=True)
    assert result.status == "completed"
    awaited = stored(run, "agent_await")[0]
    assert awaited["structured"]["timedOut"] is True
    assert [t["status"] for t in awaited["structured"]["tasks"]] == ["running"]
    assert awaited["content"].startswith("Timed out after 20 ms; 1 task(s) still running.")
    # the parent finished first: its end cancelled the live child
    finished = of_type(run, "task_finished")
    assert [(f["status"], f["reason"]) for f in finished] == [("cancelled", "run_ended")]


def test_a_durable_run_resumed_locally_goes_on_with_its_live_child(tmp_path: Path) -> None:
    """Left at a waiting await with a live child (its scheduler gone): ``resume`` in one
    process rebuilds the child from the journal, drives it, and the await gets its result."""
    h, root = setup(tmp_path)
    scripts: dict[str, AgentScript] = {
        "writer": delegate_then_write("scout", "Check the bridge.", "The ford holds."),
        "scout": [call(*write("Notes.", "scratch/scout.md")), returns("The ford holds.")],
    }
    run = h.start(root)
    model = ScriptedAgents(scripts)
    open_engine = openers(h, run, model, fresh=True)

    async def until_the_await_waits() -> str:
        for _ in range(2):  # the delegating round
            engine = open_engine()
            await engine.step_once()
            live = engine.agents.live()
            engine.close()
        (task,) = live
        for _ in range(2):  # the child's first round: it writes its notes
            engine = open_engine()
            assert await engine.step_task(task.id) is None
            engine.close()
        for _ in range(2):  # the awaiting round ends at the await
            engine = open_engine()
            step = await engine.step_once()
            engine.close()
        assert isinstance(step, Awaiting) and step.task_ids == (task.id,)
        return task.id

    task_id = asyncio.run(until_the_await_waits())
    assert (run.workspace.root / "scratch" / "scout.md").read_text() == "Notes."
    resumed = Engine(Run.open(h.assembly, run.run_dir), model, fsync=False)
    try:
        result = asyncio.run(resumed.resume())
    finally:
        resumed.close()
    assert (result.status, result.commits) == ("completed", 2)
    finished = of_type(run, "task_finished")
    assert [(f["taskId"], f["status"]) for f in finished] == [(task_id, "completed")]
    awaited = stored(run, "agent_await")
    assert len(awaited) == 1 and awaited[0]["structured"]["timedOut"] is False
    assert awaited[0]["structured"]["tasks"][0]["summary"] == "The ford holds."
    # the child's first round was not asked again
    scout_requests = [r for r in model.requests if r.snapshot.profile_id == "scout"]
    assert len(scout_requests) == 2


DIGGER = {
    "id": "digger",
    "name": "Digger",
    "description": "Digs with the shell.",
    "tools": {"allow": ["builtin:workspace.shell", "builtin:workspace.write_file"]},
    "delegation": {"callable": True},
}


def record_a_digging_child(tmp: Path, seconds: int) -> tuple[Path, Path, Path]:
    """A recorded run whose child's first call is a shell call of ``seconds`` seconds.

    Recorded with a one-second shell call; the recording is then edited to ask for
    ``seconds``, so that a test can act while the call runs. Returns the recording,
    the profiles folder and the root profile file.
    """
    h, root = setup(tmp / "recorded")
    (h.data.path / "profiles" / "digger.json").write_text(json.dumps(DIGGER))
    scripts: dict[str, AgentScript] = {
        "writer": delegate_then_write("digger", "Dig under the bridge.", "They find the old ford."),
        "digger": [call("workspace_shell", {"command": "sleep 1; echo dug"}), returns("Dug.")],
    }
    recorded, result, _, _ = drive(h, root, scripts)
    assert (result.status, result.commits) == ("completed", 2)
    for response in (recorded.run_dir / "model-responses").rglob("*.json"):
        text = response.read_text(encoding="utf-8")
        response.write_text(text.replace("sleep 1;", f"sleep {seconds};"), encoding="utf-8")
    profile = tmp / "writer.json"
    profile.write_text(json.dumps(root.to_json()))
    return recorded.run_dir, h.data.path / "profiles", profile


calls_kind = "tool_call_started"


async def child_in_shell(data: Path) -> tuple[Path, str]:
    """Wait until a run's delegated child is inside its shell call: the run, its task.
    (On Temporal its parent's await may not have started yet: it waits for the run's
    step lock, which the child's shell call holds.) At most ten minutes, which only a
    hang takes: beside dozens of processes on two cores, starting two workers and the
    run's first steps took more than a minute."""

    async def poll() -> tuple[Path, str]:
        while True:
            for run_dir in all_runs(DataRoot(data)):
                if "workspace_shell" in running_calls(run_dir).values():
                    return run_dir, payloads(run_dir, "task_started")[0]["taskId"]
            await asyncio.sleep(0.05)

    return await asyncio.wait_for(poll(), 600)


def running_calls(run_dir: Path) -> dict[tuple[str, str], str]:
    """The calls started without a result yet: (invocation id, call id) -> tool name.

    The journal is read once: it grows while the run goes on, and a call requested and
    started between two reads would be started without a name.
    """
    journal = read_events(run_dir / JOURNAL_FILE)

    def calls(kind: str) -> list[tuple[str, str]]:
        return [
            (e["payload"]["invocationId"], e["payload"]["callId"])
            for e in journal
            if e["type"] == kind
        ]

    names = {
        (e["payload"]["invocationId"], e["payload"]["callId"]): e["payload"]["name"]
        for e in journal
        if e["type"] == "tool_call_requested"
    }
    started, done = set(calls(calls_kind)), set(calls("tool_result_stored"))
    return {call: names[call] for call in started - done}


def child_shell_result(run_dir: Path) -> dict[str, Any]:
    """The stored result of the child's shell call (its only one)."""
    ((child, call_id),) = [
        (p["invocationId"], p["callId"])
        for p in payloads(run_dir, "tool_call_requested")
        if p["name"] == "workspace_shell"
    ]
    assert child == payloads(run_dir, "task_started")[0]["invocationId"]
    (shell,) = [
        p["result"]
        for p in payloads(run_dir, "tool_result_stored")
        if (p["invocationId"], p["callId"]) == (child, call_id)
    ]
    return shell


def test_run_resume_goes_on_with_a_child_cut_off_in_its_shell_call(tmp_path: Path) -> None:
    """``run`` killed while its child runs a shell call; ``run --resume`` finishes the run:
    the child's cut-off call gets the outcome-unknown result and the child goes on."""
    recorded, profiles, profile = record_a_digging_child(tmp_path, 60)
    data = tmp_path / "data"
    shutil.copytree(profiles, data / "profiles")
    chat = write_chat(tmp_path / "chat.jsonl", TEXTS)
    args = ["run", str(chat), "--profile", str(profile), "--replay", str(recorded), "--json"]
    command = [sys.executable, "-m", "tavern_agent", "--data-dir", str(data), *args]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    try:
        run_dir, _ = asyncio.run(asyncio.wait_for(child_in_shell(data), 60))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    resumed = run_cli("run", "--resume", run_dir.name, "--json", data_dir=data)
    assert resumed.returncode == 0, resumed.stderr
    outcome = json.loads(resumed.stdout)
    assert (outcome["status"], outcome["commits"]) == ("completed", 2)
    assert outcome["committedMessage"] == "They find the old ford."
    assert child_shell_result(run_dir)["errorCode"] == "tool.outcome_unknown"
    finished = payloads(run_dir, "task_finished")
    assert [(p["status"], p["result"]["summary"]) for p in finished] == [("completed", "Dug.")]
