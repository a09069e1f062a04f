"""Delegated agents on Temporal, through the CLI: each task is a child workflow.

A run with two delegated children is recorded in this process (scripted
model), then replayed with ``run --replay`` on the local engine and on two
``tavern-agent worker`` processes; both give the same chat message and the
same task results, and the Temporal run's tasks show up as child workflows
whose steps are ``task_step`` activities.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tavern_agent.temporal.worker import connect
from tavern_agent.temporal.workflow import TASK_STEP_ACTIVITY
from tests.chat.helpers import write_chat
from tests.runtime.helpers import TEXTS
from tests.runtime.test_agents import drive, setup, two_children
from tests.runtime.test_durable_children import (
    calls_kind,
    child_in_shell,
    child_shell_result,
    record_a_digging_child,
)
from tests.temporal.conftest import Workers
from tests.temporal.helpers import (
    LONG_SHELL,
    cli_command,
    cli_env,
    cli_json,
    cli_text,
    kinds,
    payloads,
    replay,
    run_messages,
    running_step_worker,
    steps_by_worker,
    with_long_shell_calls,
)

pytestmark = [pytest.mark.slow, pytest.mark.temporal]


def replay_args(tmp: Path, name: str, profile: Path, recorded: Path) -> list[str]:
    chat = write_chat(tmp / f"{name}.jsonl", TEXTS)
    return ["run", str(chat), "--profile", str(profile), "--replay", str(recorded)]


def digging_child(tmp: Path) -> tuple[Path, Path, Path]:
    """``record_a_digging_child`` whose child's shell call outlasts the test."""
    recorded, profiles, profile = record_a_digging_child(tmp, 60)
    for response in (recorded / "model-responses").rglob("*.json"):
        text = response.read_text(encoding="utf-8")
        response.write_text(text.replace("sleep 60;", f"{LONG_SHELL};"), encoding="utf-8")
    digger = profiles / "digger.json"
    digger.write_text(json.dumps(with_long_shell_calls(json.loads(digger.read_text()))))
    return recorded, profiles, profile


def task_results(run_dir: Path) -> dict[str, dict[str, Any]]:
    keep = ("status", "summary", "findings", "artifacts", "summaryPath")
    return {
        p["agentId"]: {k: p["result"].get(k) for k in keep}
        for p in payloads(run_dir, "task_finished")
    }


async def child_workflows(address: str, run_id: str) -> dict[str, list[str]]:
    """Each child workflow of the run's workflow, with the activity types of its history."""
    client = await connect(address)
    history = await client.get_workflow_handle(run_id).fetch_history()
    children: dict[str, list[str]] = {}
    for event in history.events:
        if event.HasField("start_child_workflow_execution_initiated_event_attributes"):
            child_id = event.start_child_workflow_execution_initiated_event_attributes.workflow_id
            child = await client.get_workflow_handle(child_id).fetch_history()
            children[child_id] = [
                e.activity_task_scheduled_event_attributes.activity_type.name
                for e in child.events
                if e.HasField("activity_task_scheduled_event_attributes")
            ]
    return children


def test_delegated_tasks_run_as_child_workflows_with_the_local_outcome(
    temporal_server: str, tmp_path: Path
) -> None:
    h, root = setup(tmp_path / "recorded")
    recorded, result, _, _ = drive(h, root, two_children())
    assert result.status == "completed"
    profile = tmp_path / "writer.json"
    profile.write_text(json.dumps(root.to_json()))
    local_data, data = tmp_path / "local" / "data", tmp_path / "remote" / "data"
    for where in (local_data, data):
        shutil.copytree(h.data.path / "profiles", where / "profiles")
    workers = Workers(temporal_server, data, "delegation")
    workers.start()
    workers.start()
    on_temporal = ["--engine", "temporal", "--temporal", temporal_server]

    async def both() -> tuple[dict[str, Any], dict[str, Any], dict[str, list[str]]]:
        local = await cli_json(
            local_data, *replay_args(tmp_path, "local", profile, recorded.run_dir)
        )
        remote_args = replay_args(tmp_path, "remote", profile, recorded.run_dir)
        remote = await cli_json(data, *remote_args, *on_temporal, "--task-queue", "delegation")
        await replay(temporal_server, remote["runId"])
        return local, remote, await child_workflows(temporal_server, remote["runId"])

    try:
        local, remote, children = asyncio.run(both())
    finally:
        workers.stop_all()
    assert remote["status"] == local["status"] == "completed"
    assert remote["commits"] == local["commits"] == 2
    assert remote["committedMessage"] == local["committedMessage"]
    assert remote["committedMessage"] == "The bridge is out. / The pace is fine."
    remote_dir, local_dir = Path(remote["runDir"]), Path(local["runDir"])
    assert task_results(remote_dir) == task_results(local_dir)
    assert task_results(remote_dir)["scout"]["findings"] == ["ford to the north"]
    # one child workflow per task, named after the run and the task, stepping the task
    tasks = [p["taskId"] for p in payloads(remote_dir, "task_started")]
    assert sorted(children) == sorted(f"{remote['runId']}/{t}" for t in tasks)
    # a task's activity is one of its model requests or one of its calls
    for task in payloads(remote_dir, "task_started"):
        activities = children[f"{remote['runId']}/{task['taskId']}"]
        requests = [
            p
            for p in payloads(remote_dir, "model_request")
            if p["invocationId"] == task["invocationId"]
        ]
        calls = [
            p
            for p in payloads(remote_dir, "tool_call_requested")
            if p["invocationId"] == task["invocationId"]
        ]
        assert set(activities) == {TASK_STEP_ACTIVITY}
        assert len(activities) == len(requests) + len(calls) >= 2
    # The same events as the local run. The parent's await ends its step instead of
    # blocking when a task still runs (it nearly always does: the scout takes three
    # rounds), which adds one task_await_waiting. The other task takes one round; its
    # steps race the parent's next workflow task through the server, and when it ends
    # first the parent's next request carries its results: one task_results_injected.
    remote_kinds, local_kinds = Counter(kinds(remote_dir)), Counter(kinds(local_dir))
    assert not local_kinds - remote_kinds
    raced = Counter({"task_await_waiting": 1, "task_results_injected": 1})
    assert not (remote_kinds - local_kinds) - raced
    (awaited,) = [
        p["result"]
        for p in payloads(remote_dir, "tool_result_stored")
        if p["result"]["toolId"] == "builtin:agent.await"
    ]
    assert awaited["structured"]["timedOut"] is False
    assert {t["status"] for t in awaited["structured"]["tasks"]} == {"completed"}


def test_a_killed_worker_s_child_step_goes_on_elsewhere_without_running_twice(
    temporal_server: str, tmp_path: Path
) -> None:
    recorded, profiles, profile = digging_child(tmp_path)
    data = tmp_path / "data"
    shutil.copytree(profiles, data / "profiles")
    workers = Workers(temporal_server, data, "kill-child")
    procs = [workers.start(), workers.start()]
    args = replay_args(tmp_path, "chat", profile, recorded)
    submit = ["--engine", "temporal", "--temporal", temporal_server, "--task-queue", "kill-child"]

    async def scenario() -> tuple[dict[str, Any], int]:
        running = asyncio.ensure_future(cli_json(data, *args, *submit))
        run_dir, task_id = await child_in_shell(data)
        pid = await running_step_worker(temporal_server, f"{run_dir.name}/{task_id}")
        (victim,) = [p for p in procs if p.pid == pid]
        workers.kill(victim)
        return await running, pid

    try:
        outcome, killed = asyncio.run(scenario())
    finally:
        workers.stop_all()
    assert (outcome["status"], outcome["commits"]) == ("completed", 2)
    run_dir = Path(outcome["runDir"])
    assert run_messages(tmp_path / "chat.jsonl", outcome["runId"]) == ["They find the old ford."]
    # the shell call cut off by the kill is not run again: its outcome is unknown
    assert child_shell_result(run_dir)["errorCode"] == "tool.outcome_unknown"
    # no call started twice: delegate, await, shell, task_return, write, commit, finish
    started = Counter((p["invocationId"], p["callId"]) for p in payloads(run_dir, calls_kind))
    assert len(started) == 7 and set(started.values()) == {1}
    finished = payloads(run_dir, "task_finished")
    assert [(f["status"], f["result"]["summary"]) for f in finished] == [("completed", "Dug.")]
    by_worker = asyncio.run(steps_by_worker(temporal_server, [outcome["runId"]]))
    assert set(by_worker) - {killed}  # the other worker took the run's later steps


def test_runs_cancel_stops_the_children_and_pairs_their_calls_on_either_engine(
    temporal_server: str, tmp_path: Path
) -> None:
    recorded, profiles, profile = digging_child(tmp_path)
    data, local = tmp_path / "data", tmp_path / "local-data"
    for where in (data, local):
        shutil.copytree(profiles, where / "profiles")
    workers = Workers(temporal_server, data, "cancel-child")
    workers.start()
    submit = ["--engine", "temporal", "--temporal", temporal_server, "--task-queue", "cancel-child"]

    async def on_temporal_engine() -> tuple[Path, dict[str, Any], str]:
        args = replay_args(tmp_path, "remote", profile, recorded)
        running = asyncio.ensure_future(cli_json(data, *args, *submit, exit_code=1))
        run_dir, _ = await child_in_shell(data)
        said = await cli_text(data, "runs", "cancel", run_dir.name, "--temporal", temporal_server)
        outcome = await running
        await replay(temporal_server, run_dir.name)
        return run_dir, outcome, said

    async def on_local_engine() -> tuple[Path, str]:
        args = replay_args(tmp_path, "local", profile, recorded)
        proc = subprocess.Popen(cli_command(local, *args, "--json"), env=cli_env())
        run_dir, _ = await child_in_shell(local)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return run_dir, await cli_text(local, "runs", "cancel", run_dir.name)

    try:
        remote, outcome, said = asyncio.run(on_temporal_engine())
        local_dir, local_said = asyncio.run(on_local_engine())
    finally:
        workers.stop_all()
    assert said == f"{remote.name}: cancelled" and local_said == f"{local_dir.name}: cancelled"
    assert (outcome["status"], outcome["errorCode"]) == ("cancelled", "run.cancelled")
    for run_dir in (remote, local_dir):
        assert child_shell_result(run_dir)["errorCode"] == "tool.outcome_unknown"
        finished = payloads(run_dir, "task_finished")
        assert [(f["status"], f["reason"]) for f in finished] == [("cancelled", "run_ended")]
        assert kinds(run_dir)[-1] == "run_cancelled"

        # Every call has exactly one result. The parent's await started (outcome unknown)
        # or, on Temporal, may still have waited for the step lock that the child's shell
        # call held (then it never started: cancelled).
        def per_call(kind: str, run_dir: Path = run_dir) -> Counter[tuple[str, str]]:
            return Counter((p["invocationId"], p["callId"]) for p in payloads(run_dir, kind))

        results = per_call("tool_result_stored")
        assert set(results.values()) == {1} and set(per_call("tool_call_requested")) <= set(results)
        (awaited,) = [
            p
            for p in payloads(run_dir, "tool_result_stored")
            if p["invocationId"] == payloads(run_dir, "task_started")[0]["parentInvocationId"]
            and p["callId"] not in {t["callId"] for t in payloads(run_dir, "task_started")}
        ]
        started = (awaited["invocationId"], awaited["callId"]) in per_call(calls_kind)
        code = "tool.outcome_unknown" if started else "run.cancelled"
        assert awaited["result"]["errorCode"] == code
