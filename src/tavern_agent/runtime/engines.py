"""The engine port: where a run's steps execute, behind one small interface.

:class:`LocalEngine` runs the loop in this process (the default: one user, one
machine). :class:`~tavern_agent.temporal.engine.TemporalEngine` submits the run
as a workflow to a Temporal server, whose workers take its steps
(``tavern-agent worker``); this process follows the run's journal on the shared
data root. Both write the same run folder and the same journal, so ``runs show``
reads either.
"""

from __future__ import annotations

from typing import Protocol

from tavern_agent.providers.gateway import (
    ModelError,
    ModelGateway,
    ModelReply,
    ModelRequest,
)
from tavern_agent.runtime.journal import Listener
from tavern_agent.runtime.loop import Engine, RunResult
from tavern_agent.runtime.run import Run


class RunEngine(Protocol):
    """Executes a started run to its end, and cancels a run."""

    async def execute(self, run: Run, listeners: tuple[Listener, ...] = ()) -> RunResult:
        """Drive ``run`` (fresh from :meth:`Run.start`) until it ends."""
        ...

    async def cancel(self, run: Run) -> RunResult:
        """End ``run`` as cancelled, its open calls paired (an ended run stays as it is)."""
        ...


class NoModel:
    """The gateway of a cancellation, which never asks the model."""

    async def respond(self, request: ModelRequest) -> ModelReply:
        """Always raises ``ModelError``: a cancelled run asks no model."""
        raise ModelError("a cancelled run asks no model")

    async def aclose(self) -> None:
        """Nothing to free."""
        return None


class LocalEngine:
    """The loop in this process, with the given gateway."""

    def __init__(self, gateway: ModelGateway | None = None) -> None:
        self.gateway = gateway or NoModel()

    async def execute(self, run: Run, listeners: tuple[Listener, ...] = ()) -> RunResult:
        """Run ``run`` to its end in this process, its events going to ``listeners``."""
        engine = Engine(run, self.gateway, listeners=listeners)
        try:
            return await engine.start()
        finally:
            engine.close()

    async def cancel(self, run: Run) -> RunResult:
        """Cancel a run that is not running (a live local run is cancelled with Ctrl-C)."""
        engine = Engine(run, NoModel())
        try:
            ended = await engine.step_once(cancel=True)
        finally:
            engine.close()
        assert isinstance(ended, RunResult)
        return ended
