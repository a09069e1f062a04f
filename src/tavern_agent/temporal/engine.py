"""The Temporal engine: a run submitted as a workflow, followed through its journal.

The server's workers take the run's steps (``tavern-agent worker``); this
process follows the journal the workers write on the shared data root, so its
listeners see the same events as a local run's. Needs the ``temporal`` extra,
imported only when an engine is made.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tavern_agent import run_layout
from tavern_agent.runtime import events as ev
from tavern_agent.runtime.endings import RunResult
from tavern_agent.runtime.journal import JournalTail, Listener
from tavern_agent.runtime.run import Run

FOLLOW_EVERY = 0.1  # seconds between looks at a remote run's journal
# Without the server, the followed run's outcome is asked for again after 2, 4, 8 …
# (at most 30) seconds, until the journal ends the run or this many seconds passed.
RETRY_FIRST, RETRY_MOST = 2.0, 30.0
PATIENCE_SECONDS = 300.0
log = logging.getLogger(__name__)


class ServerLost(RuntimeError):
    """The Temporal server stayed away and the run's journal did not end it."""


class TemporalEngine:
    """Runs as workflows on the Temporal server at ``address`` (HOST:PORT)."""

    def __init__(
        self,
        address: str,
        *,
        task_queue: str | None = None,
        heartbeat_seconds: float = 10.0,
        activity_per_call: bool = True,
        local_activities: bool = True,
        patience_seconds: float = PATIENCE_SECONDS,
        notice: Callable[[str], None] = log.warning,
    ) -> None:
        """``activity_per_call``: each model request and each tool call is an activity
        (the default); else one activity per step (a model request, or a whole turn's
        calls), which saves round trips through the server. ``local_activities``: model
        requests and built-in calls run as local activities on the worker that runs the
        run's workflow (the default; shell calls allowed more than a minute and external
        tools stay activities the server schedules); else every one is scheduled.
        ``patience_seconds``: how long a followed run may go without the server;
        ``notice`` says each retry."""
        try:
            from tavern_agent.temporal.workflow import DEFAULT_TASK_QUEUE
        except ImportError:
            raise ValueError(
                "the Temporal engine needs the temporal extra: pip install 'tavern-agent[temporal]'"
            ) from None
        self.address = address
        self.task_queue = task_queue or DEFAULT_TASK_QUEUE
        self.heartbeat_seconds = heartbeat_seconds
        self.activity_per_call = activity_per_call
        self.local_activities = local_activities
        self.patience_seconds = patience_seconds
        self.notice = notice

    async def execute(self, run: Run, listeners: tuple[Listener, ...] = ()) -> RunResult:
        """Start the run's workflow and follow its journal to
        the end, passing each new event to ``listeners``."""
        from tavern_agent.temporal.workflow import LOOP, WORKFLOW_NAME, RunInput, StepOutcome

        client = await self._client()
        handle = await client.start_workflow(
            WORKFLOW_NAME,
            RunInput(
                str(run.run_dir),
                self.heartbeat_seconds,
                activity_per_call=self.activity_per_call,
                local_activities=self.local_activities,
                loop=LOOP,
            ),
            id=run.id,
            task_queue=self.task_queue,
            result_type=StepOutcome,
        )
        return await self._follow(run, handle.result(), listeners)

    async def _follow(
        self, run: Run, outcome: Awaitable[Any], listeners: tuple[Listener, ...]
    ) -> RunResult:
        """Pass the journal's new events on until the run ends.

        The workflow's result is the answer while the server can be reached.
        When it cannot, the journal on the data root goes on being followed:
        the run's last event is its outcome, and the server is asked again
        after a growing pause; :class:`ServerLost` when it stays away for
        :attr:`patience_seconds` and the journal has not ended the run.
        """
        result = asyncio.ensure_future(outcome)
        tail = JournalTail(run.run_dir / run_layout.JOURNAL_FILE)
        lost_since: float | None = None
        tries = 0
        while True:
            done = result.done()
            ended: ev.RunEnded | None = None
            for record in tail.new_records():
                for listener in listeners:
                    listener(record)
                if isinstance(record.event, ev.RunEnded):
                    ended = record.event
            if lost_since is not None and ended is not None:
                result.cancel()
                return RunResult.from_ended(run.id, ended)
            if done:
                failure = result.exception()
                why = _unreachable(failure)
                if why is None:
                    return result_of(run.id, result.result())
                now = time.monotonic()
                lost_since = lost_since if lost_since is not None else now
                if now - lost_since > self.patience_seconds:
                    raise ServerLost(
                        f"run {run.id}: the Temporal server at {self.address} is unreachable "
                        f"({why}) and the run has not ended; see how it goes on "
                        f"with: tavern-agent runs show {run.id}"
                    )
                pause = min(RETRY_FIRST * 2**tries, RETRY_MOST)
                tries += 1
                self.notice(
                    f"tavern-agent: the Temporal server at {self.address} is unreachable "
                    f"({why}); following the run's journal, asking again in "
                    f"{pause:.0f} s"
                )
                result = asyncio.ensure_future(self._result_later(run.id, pause))
                continue
            await asyncio.wait([result], timeout=FOLLOW_EVERY)

    async def _result_later(self, run_id: str, pause: float) -> Any:
        """The workflow's result, asked for again after ``pause`` seconds on a new client."""
        from tavern_agent.temporal.worker import connect
        from tavern_agent.temporal.workflow import StepOutcome

        await asyncio.sleep(pause)
        client = await connect(self.address, sdk_log_level="ERROR")
        return await client.get_workflow_handle(run_id, result_type=StepOutcome).result()

    async def cancel(self, run: Run) -> RunResult:
        """Cancel the run's workflow and return how it ended; raises
        ``ValueError`` when the run is not a Temporal run of this server."""
        from temporalio.service import RPCError

        from tavern_agent.temporal.workflow import StepOutcome

        client = await self._client()
        handle = client.get_workflow_handle(run.id, result_type=StepOutcome)
        try:
            await handle.cancel()
        except RPCError as exc:
            raise ValueError(f"run {run.id} is not a Temporal run here: {exc.message}") from None
        return result_of(run.id, await handle.result())

    async def _client(self) -> Any:
        from tavern_agent.temporal.worker import connect

        try:  # this process says itself when the server is away: no SDK retry lines
            return await connect(self.address, sdk_log_level="ERROR")
        except RuntimeError as exc:
            why = "connection refused" if "Connection refused" in str(exc) else str(exc)[:200]
            raise ValueError(
                f"cannot reach the Temporal server at {self.address} ({why}); start it, "
                "or name the right one with --temporal HOST:PORT"
            ) from None


def _unreachable(failure: BaseException | None) -> str | None:
    """Why the server could not be reached, if that is what ``failure`` says; else ``None``."""
    from temporalio.service import RPCError, RPCStatusCode

    if isinstance(failure, RPCError) and (
        failure.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED)
        or "connect" in failure.message
    ):
        return failure.message
    if isinstance(failure, RuntimeError) and "connect" in str(failure):  # Client.connect
        return "cannot connect"
    return None


def result_of(run_id: str, outcome: Any) -> RunResult:
    """A workflow's outcome (a ``StepOutcome``) as the run's result."""
    return RunResult(
        run_id,
        outcome.status or "failed",
        outcome.rounds,
        outcome.commits,
        outcome.error_code,
        outcome.message,
        outcome.floor,
        outcome.final_text,
    )
