"""What the Temporal tests read back: journals, chat files, workflow histories, CLI answers."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from tavern_agent.chat.formats import parse_chat
from tavern_agent.temporal.worker import connect
from tavern_agent.temporal.workflow import RunWorkflow
from tests.runtime.helpers import kinds, payloads
from tests.temporal.conftest import child_env

__all__ = ["kinds", "payloads"]  # journal readers the Temporal tests import from here

# A shell call a test cuts off (by stopping or killing its worker, or cancelling its
# run) must still run when the cut comes, however slowly a busy machine takes the
# steps between: it runs as long as a call may, the longest limit a profile sets
# (a minute at a time: the sandbox's sleep stops at 60 s).
SHELL_LIMIT = 600
LONG_SHELL = f"for i in $(seq {SHELL_LIMIT // 60}); do sleep 60; done"


def with_long_shell_calls(profile: dict[str, Any], seconds: int = SHELL_LIMIT) -> dict[str, Any]:
    """``profile`` (a profile's JSON) with shell calls that may run ``seconds`` s (more than
    a minute: each is an activity the server schedules, not a local one)."""
    return profile | {"limits": {"shell": {"timeoutSeconds": seconds}}}


def run_messages(chat_file: Path, run_id: str) -> list[str]:
    """The chat messages a run wrote (one, however often it committed)."""
    chat = parse_chat(chat_file.read_bytes())
    return [m.mes for m in chat.messages if (m.extra.get("agent") or {}).get("runId") == run_id]


def cli_command(data: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "tavern_agent", "--data-dir", str(data), *args]


def cli_env() -> dict[str, str]:
    return child_env()


# How long a CLI process may take before a test gives up on it: only a hang takes it.
# A run here takes seconds on idle cores and minutes beside 50 others on busy ones.
CLI_LIMIT = 600


async def cli_json(
    data: Path, *args: str, timeout: float = CLI_LIMIT, exit_code: int = 0
) -> dict[str, Any]:
    """Run ``tavern-agent … --json`` as a process; its JSON answer (it must exit so)."""
    proc = await asyncio.create_subprocess_exec(
        *cli_command(data, *args, "--json"),
        env=cli_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode == exit_code, err.decode()
    answer: dict[str, Any] = json.loads(out)
    return answer


async def cli_text(data: Path, *args: str, timeout: float = CLI_LIMIT) -> str:
    """Run ``tavern-agent …`` as a process; its output (it must exit 0)."""
    proc = await asyncio.create_subprocess_exec(
        *cli_command(data, *args),
        env=cli_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode == 0, err.decode()
    return out.decode().strip()


LOCAL_ACTIVITY_MARKER = "core_local_activity"  # the SDK's marker of a local activity's result


def _activities(history: WorkflowHistory) -> list[tuple[str, bool, str]]:
    """The history's activities in order: (name, local, identity of the worker that ran it).

    A local activity is a marker recorded with the workflow task of the worker that
    ran it (the identity of that task's completion).
    """
    found: list[tuple[str, bool, str]] = []
    scheduled: dict[int, str] = {}
    task_worker = ""
    for event in history.events:
        if event.HasField("workflow_task_completed_event_attributes"):
            task_worker = event.workflow_task_completed_event_attributes.identity
        elif event.HasField("activity_task_scheduled_event_attributes"):
            scheduled[event.event_id] = (
                event.activity_task_scheduled_event_attributes.activity_type.name
            )
        elif event.HasField("activity_task_started_event_attributes"):
            started = event.activity_task_started_event_attributes
            found.append((scheduled[started.scheduled_event_id], False, started.identity))
        elif event.HasField("marker_recorded_event_attributes"):
            marker = event.marker_recorded_event_attributes
            if marker.marker_name == LOCAL_ACTIVITY_MARKER:
                data = json.loads(marker.details["data"].payloads[0].data)
                found.append((data["activity_type"], True, task_worker))
    return found


async def steps_by_worker(address: str, run_ids: list[str]) -> dict[int, set[str]]:
    """For each worker process id, the runs it took a step of (from the workflow histories:
    its activities, local or scheduled by the server).

    A worker's identity is ``pid@host``, the SDK's default.
    """
    client = await connect(address)
    runs: dict[int, set[str]] = {}
    for run_id in run_ids:
        history = await client.get_workflow_handle(run_id).fetch_history()
        for _, _, identity in _activities(history):
            runs.setdefault(int(identity.split("@")[0]), set()).add(run_id)
    return runs


async def activity_types(address: str, run_id: str, *, local: bool | None = None) -> list[str]:
    """The names of the activities the run's workflow ran, in order (``local``: only the
    local ones, or only those the server scheduled; None: both)."""
    client = await connect(address)
    history = await client.get_workflow_handle(run_id).fetch_history()
    return [
        name for name, is_local, _ in _activities(history) if local is None or is_local is local
    ]


async def workflow_runs(address: str, run_id: str) -> list[str | None]:
    """For each workflow run a run took (continue-as-new starts one more), newest first:
    the call its input named as the first activity (None: a model request)."""
    client = await connect(address)
    handle = client.get_workflow_handle(run_id)
    firsts: list[str | None] = []
    while True:
        history = await handle.fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        (params,) = [json.loads(p.data) for p in started.input.payloads]
        firsts.append(params.get("next_call"))
        if not started.continued_execution_run_id:  # the first run
            return firsts
        handle = client.get_workflow_handle(run_id, run_id=started.continued_execution_run_id)


async def running_step_worker(address: str, run_id: str) -> int | None:
    """The process id of the worker running the run's step now (None between steps)."""
    client = await connect(address)
    described = await client.get_workflow_handle(run_id).describe()
    for pending in described.raw_description.pending_activities:
        if pending.last_worker_identity:
            return int(pending.last_worker_identity.split("@")[0])
    return None


async def workflow_task_worker(address: str, run_id: str) -> int:
    """The process id of the worker that took the run's latest workflow task (which holds
    the run's local activities while they run)."""
    client = await connect(address)
    history = await client.get_workflow_handle(run_id).fetch_history()
    (*_, last) = [
        e.workflow_task_started_event_attributes.identity
        for e in history.events
        if e.HasField("workflow_task_started_event_attributes")
    ]
    return int(last.split("@")[0])


async def wait_for_pollers(
    address: str, task_queue: str, enough: Callable[[list[str]], bool]
) -> None:
    """Wait until the identities (``pid@host``) polling ``task_queue`` for steps are ``enough``."""
    client = await connect(address)
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
    )
    while True:
        described = await client.workflow_service.describe_task_queue(request)
        if enough([p.identity for p in described.pollers]):
            return
        await asyncio.sleep(0.1)


async def polling(address: str, task_queue: str, pid: int) -> None:
    """Wait until the worker process ``pid`` polls ``task_queue`` for steps."""
    await wait_for_pollers(
        address, task_queue, lambda ids: any(i.startswith(f"{pid}@") for i in ids)
    )


async def replay(address: str, run_id: str) -> None:
    """Replay a recorded history against today's workflow code (raises on nondeterminism)."""
    client = await connect(address)
    history = await client.get_workflow_handle(run_id).fetch_history()
    await Replayer(workflows=[RunWorkflow]).replay_workflow(history)
