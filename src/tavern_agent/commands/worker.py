"""``tavern-agent worker``: run the activities of runs submitted to a Temporal server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from tavern_agent.mcp.approval import approver_for


@click.command("worker")
@click.option("--temporal", required=True, metavar="HOST:PORT", help="The Temporal server.")
@click.option("--task-queue", default=None, help="The task queue to poll (default tavern-agent).")
@click.option(
    "--concurrency", type=int, default=8, show_default=True, help="Activities run at once."
)
@click.option(
    "--engine-cache/--no-engine-cache",
    default=True,
    show_default=True,
    help="Keep each run's state between the activities this worker runs (else fold its journal "
    "at every activity).",
)
@click.pass_context
def worker_command(
    ctx: click.Context, temporal: str, task_queue: str | None, concurrency: int, engine_cache: bool
) -> None:
    """Run the model requests and tool calls of runs submitted with ``run --engine temporal``
    (their delegated agents' too).

    Every worker must see the same data root (--data-dir, a shared volume):
    a run's folder, journal and chat are read and written there by whichever
    worker runs its next activity. Runs until stopped.
    """
    try:
        from tavern_agent.temporal.worker import serve
        from tavern_agent.temporal.workflow import DEFAULT_TASK_QUEUE
    except ImportError:
        raise click.ClickException(
            "the worker needs the temporal extra: pip install 'tavern-agent[temporal]'"
        ) from None
    data_dir: Path = ctx.obj["data_dir"]
    try:
        asyncio.run(
            serve(
                temporal,
                data_dir,
                task_queue=task_queue or DEFAULT_TASK_QUEUE,
                concurrency=concurrency,
                approver=approver_for("decline"),
                engine_cache=engine_cache,
            )
        )
    except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C, or SIGTERM
        pass
    except RuntimeError as exc:  # the server cannot be reached
        raise click.ClickException(str(exc)) from None
