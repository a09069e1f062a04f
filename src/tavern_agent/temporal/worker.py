"""A worker process: polls a task queue for run workflows and their steps."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client
from temporalio.runtime import (
    LogForwardingConfig,
    LoggingConfig,
    Runtime,
    TelemetryConfig,
    TelemetryFilter,
)
from temporalio.worker import Worker

from tavern_agent.assembly import Assembly
from tavern_agent.mcp.approval import Approver
from tavern_agent.temporal.activities import RunActivities
from tavern_agent.temporal.workflow import DEFAULT_TASK_QUEUE, RunWorkflow, TaskWorkflow

# A workflow's next task waits this long for the worker that ran its last one
# (which holds its history cached) before any worker may take it: short, so that
# runs move on quickly when that worker is gone.
STICKY_WAIT = timedelta(seconds=2)


def workflow_task_slots(concurrency: int) -> int:
    """How many workflow tasks a worker taking ``concurrency`` steps at once holds.

    A run's workflow task stays open while its local activity takes the run's steps,
    so each task a worker holds is a run it has taken. The SDK's default (100) let
    one worker take runs by the dozen that waited there for a step slot while
    another worker stood idle; twice the steps leaves room for the short tasks of
    delegated tasks' workflows (and the SDK's minimum of 2) while the rest of the
    runs wait at the server for whichever worker frees a slot first.
    """
    return 2 * concurrency


_SDK_LOG = logging.getLogger("tavern_agent.temporal.sdk")
_runtime_level: str | None = None
# The SDK's warning for a workflow task that took more than 5 s. A run's local
# activity keeps its workflow task open while it takes the run's steps (a model
# may answer for minutes; the worker reports the task alive meanwhile), so that
# is how the work goes here, not a fault.
LONG_TASK_WARNING = "[TMPRL1104]"


class _DropLongTaskWarnings(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return LONG_TASK_WARNING not in record.getMessage()


_SDK_LOG.addFilter(_DropLongTaskWarnings())


def _sdk_logs_to_python(level: str) -> None:
    """Send the SDK's own log lines (its retries) to Python logging, from ``level`` up.

    Left alone, the SDK's native core prints them on stdout, into the JSON a
    ``run --json`` answers with. Python logging shows them on stderr.
    """
    global _runtime_level
    if _runtime_level == level:
        return
    logs = LoggingConfig(
        filter=TelemetryFilter(core_level=level, other_level="ERROR"),
        forwarding=LogForwardingConfig(logger=_SDK_LOG),
    )
    Runtime.set_default(
        Runtime(telemetry=TelemetryConfig(logging=logs)), error_if_already_set=False
    )
    _runtime_level = level


async def connect(
    address: str, namespace: str = "default", *, sdk_log_level: str = "WARN"
) -> Client:
    """A client of the Temporal server at ``address`` (HOST:PORT).

    ``sdk_log_level``: the least severe SDK log line shown (on stderr); a
    submitter that says itself when the server is away passes ``ERROR``.
    """
    _sdk_logs_to_python(sdk_log_level)
    return await Client.connect(address, namespace=namespace)


async def serve(
    address: str,
    data_dir: Path,
    *,
    task_queue: str = DEFAULT_TASK_QUEUE,
    concurrency: int = 8,
    approver: Approver | None = None,
    engine_cache: bool = True,
) -> None:
    """Run a worker until cancelled: up to ``concurrency`` steps at once.

    ``engine_cache`` keeps the engine of each run whose last step this worker
    took, so that its next step here does not fold the run's journal again.
    """
    client = await connect(address)
    # Ctrl-C and SIGTERM (how service managers stop a process) stop the worker: its
    # steps are cancelled at once and retried on other workers, instead of waiting
    # out the heartbeat timeout of a vanished worker. Both through the event loop:
    # asyncio.run's own Ctrl-C handling left a worker's step running now and then.
    serving = asyncio.current_task()
    if serving is not None:
        with contextlib.suppress(NotImplementedError):  # no signal handlers on Windows
            for stop in (signal.SIGINT, signal.SIGTERM):
                asyncio.get_running_loop().add_signal_handler(stop, serving.cancel)
    async with await Assembly.open(data_dir, approver=approver) as assembly:
        activities = RunActivities(assembly, cache=engine_cache)
        worker = Worker(
            client,
            task_queue=task_queue,
            workflows=[RunWorkflow, TaskWorkflow],
            activities=activities.activities,
            max_concurrent_activities=concurrency,
            max_concurrent_local_activities=concurrency,
            max_concurrent_workflow_tasks=workflow_task_slots(concurrency),
            sticky_queue_schedule_to_start_timeout=STICKY_WAIT,
        )
        # What is loaded by now (the SDK, its protobuf modules, the assembly) lives as long
        # as the worker: left out of the collector's full passes, which otherwise walk
        # these 75,000 objects again and again as runs come and go (about 1 ms per run).
        gc.freeze()
        running = asyncio.ensure_future(worker.run())
        try:
            await asyncio.shield(running)
        except asyncio.CancelledError:
            # Stopped: the SDK stops taking steps and is meant to cancel those under
            # way, but its cancel can lose a race with its own poll shutdown (seen on
            # busy machines); it then waits for each step to end by itself. So the
            # worker cancels its steps too.
            running.cancel()
            activities.cancel_steps()
            with contextlib.suppress(asyncio.CancelledError):
                await running
            raise
        finally:
            await activities.close()
