"""How a process that submitted a run to Temporal (``run --engine temporal``) ends.

It follows its run through a server that may go away (``--temporal-patience``,
exit 3 when it stays away), and it never runs the interpreter's teardown: the
SDK's client keeps native threads that can abort the process while the
interpreter finalizes (temporalio/sdk-python#300).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import NoReturn

import click

from tavern_agent.temporal.engine import PATIENCE_SECONDS, ServerLost, TemporalEngine

patience_option = click.option(
    "--temporal-patience",
    type=click.FloatRange(min=0),
    default=PATIENCE_SECONDS,
    show_default=True,
    metavar="SECONDS",
    help="How long a followed Temporal run may go without its server before run gives up "
    "(exit 3; the run goes on).",
)


def submitter(address: str, task_queue: str | None, patience: float) -> TemporalEngine:
    """The engine that submits and follows a run, saying on stderr when the server is away."""
    return TemporalEngine(
        address,
        task_queue=task_queue,
        patience_seconds=patience,
        notice=lambda text: click.echo(text, err=True),
    )


@contextlib.contextmanager
def submitter_exits(temporal: bool) -> Iterator[None]:
    """For a Temporal submitter (``temporal``): its failures end it without teardown.

    A server that stayed away exits 3 with one line; a usage or other error
    (a server gone while connecting) prints as the CLI prints it, then exits.
    """
    try:
        yield
    except ServerLost as exc:
        click.echo(f"tavern-agent: {exc}", err=True)
        exit_after_temporal(3)
    except click.ClickException as exc:
        if not temporal:
            raise
        click.echo(f"tavern-agent: error: {exc.format_message()}", err=True)
        exit_after_temporal(2 if isinstance(exc, click.UsageError) else exc.exit_code)


def exit_after_temporal(code: int) -> NoReturn:
    """Exit without interpreter teardown once a Temporal client was used.

    The answer is printed by then, so skipping the teardown loses nothing.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
