"""``serve --workers N``: the endpoint's runs spread over N worker processes.

The serving process keeps everything a request sees (the HTTP server, the
checks, the run limit, the run page, the extension host); each admitted
request's run is handed to the worker process with the fewest runs, which
starts and drives it exactly as a one-process ``serve`` does (see
:mod:`tavern_agent.endpoint.worker`) and sends back its progress lines and its
outcome. So a run's CPU never holds up another request's first bytes, and
concurrent runs use every core. All workers share the data root.

Parent and worker talk over a socket pair in frames (a 4-byte length, then a
pickle; both ends are this package, started by the parent). The parent sends
the worker's config first, then ``("start", run_id, chat, profile)`` and
``("cancel", run_id)``; the worker answers ``("ready",)``, ``("started", id)``
or ``("start_failed", id, why)``, ``("line", id, text)`` and ``("ended", id,
outcome)`` (``None`` for a cancelled run). A worker whose parent goes away
(end of stream) cancels its runs and exits; a worker that dies fails its runs,
and the next run that would go to it starts a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pickle
import socket
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Profile
from tavern_agent.endpoint.protocol import FrontendChat, Names
from tavern_agent.endpoint.runs import OnLine, RunOutcome

log = logging.getLogger(__name__)

STOP_SECONDS = 10.0  # a stopping worker's runs get this long to journal their cancel
WORKER_ENDED = "run.worker_ended"
_LENGTH = struct.Struct(">I")


@dataclass(frozen=True)
class WorkerConfig:
    """What a worker process needs to run requests as the serving process would."""

    data_dir: Path
    gateway: dict[str, Any]  # ``model_gateway``'s keyword arguments, from serve's flags
    protocol: ModelProtocol
    names: Names
    ext_modules: tuple[str, ...] = ()  # ``--ext`` modules: their tools are the workers' too


class RunStartFailed(ValueError):
    """The worker could not start the run; the message says why."""


def frame(message: Any) -> bytes:
    """One message as a frame."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(data)) + data


async def read_frame(reader: asyncio.StreamReader) -> Any:
    """The next message; ``asyncio.IncompleteReadError`` at the end of the stream."""
    (size,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    return pickle.loads(await reader.readexactly(size))


@dataclass
class _Pending:
    """A run handed to a worker, from ``start`` to ``ended``."""

    on_line: OnLine | None
    started: asyncio.Future[None]
    ended: asyncio.Future[RunOutcome | None]


@dataclass
class Worker:
    """One worker process, seen from the serving process."""

    process: asyncio.subprocess.Process
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    ready: asyncio.Future[None]
    runs: dict[str, _Pending] = field(default_factory=dict)
    listener: asyncio.Task[None] | None = None

    @classmethod
    async def spawn(cls, config: WorkerConfig) -> Worker:
        """Start a worker process and send it its config (it answers ``ready`` later)."""
        ours, theirs = socket.socketpair()
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tavern_agent.endpoint.worker",
                str(theirs.fileno()),
                pass_fds=(theirs.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        reader, writer = await asyncio.open_connection(sock=ours)
        worker = cls(process, reader, writer, asyncio.get_running_loop().create_future())
        writer.write(frame(config))
        worker.listener = asyncio.create_task(worker._listen())
        return worker

    @property
    def alive(self) -> bool:
        """Whether the process still answers."""
        return self.listener is not None and not self.listener.done()

    async def _listen(self) -> None:
        try:
            while True:
                self._take(await read_frame(self.reader))
        except (asyncio.IncompleteReadError, ConnectionError, pickle.UnpicklingError) as exc:
            log.debug("endpoint worker %s: stream ended: %s", self.process.pid, exc)
        finally:
            self._fail_all()

    def _take(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "ready":
            if not self.ready.done():
                self.ready.set_result(None)
            return
        pending = self.runs.get(message[1])
        if pending is None:
            return
        if kind == "line" and pending.on_line is not None:
            pending.on_line(message[2])
        elif kind == "started" and not pending.started.done():
            pending.started.set_result(None)
        elif kind == "start_failed":
            if not pending.started.done():
                pending.started.set_exception(RunStartFailed(message[2]))
            self._finish(message[1], None)
        elif kind == "ended":
            self._finish(message[1], message[2])

    def _finish(self, run_id: str, outcome: RunOutcome | None) -> None:
        pending = self.runs.pop(run_id, None)
        if pending is not None and not pending.ended.done():
            pending.ended.set_result(outcome)

    def _fail_all(self) -> None:
        code = self.process.returncode
        why = "the worker process ended" + ("" if code is None else f" (exit code {code})")
        if not self.ready.done():
            self.ready.set_exception(RunStartFailed(why))
            self.ready.exception()  # seen here: the runs that wait for it say it themselves
        for run_id, pending in list(self.runs.items()):
            if not pending.started.done():
                pending.started.set_exception(RunStartFailed(why))
            outcome = RunOutcome(run_id, "failed", WORKER_ENDED, why)
            self._finish(run_id, outcome)

    def send(self, *message: Any) -> None:
        """Send one message (dropped when the worker is gone: its runs fail on their own)."""
        if self.alive:
            self.writer.write(frame(message))

    async def run(
        self, chat: FrontendChat, profile: Profile, on_line: OnLine | None, run_id: str
    ) -> asyncio.Task[RunOutcome]:
        """Hand the run to this worker once it has started it (see ``RunService.begin``)."""
        loop = asyncio.get_running_loop()
        pending = _Pending(on_line, loop.create_future(), loop.create_future())
        self.runs[run_id] = pending
        try:
            await self.ready
        except BaseException:
            self.runs.pop(run_id, None)
            raise
        self.send("start", run_id, chat, profile)
        try:
            await pending.started
        except asyncio.CancelledError:
            self.send("cancel", run_id)  # the worker answers "ended" and forgets it
            raise
        return asyncio.create_task(self._outcome(run_id, pending))

    async def _outcome(self, run_id: str, pending: _Pending) -> RunOutcome:
        try:
            outcome = await asyncio.shield(pending.ended)
        except asyncio.CancelledError:
            # As in one process: the cancelled task ends once the run has journaled it.
            self.send("cancel", run_id)
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(pending.ended), STOP_SECONDS)
            raise
        if outcome is None:  # the worker was stopped on its own (SIGTERM)
            why = "the worker process was stopped"
            return RunOutcome(run_id, "cancelled", "run.cancelled", why)
        return outcome

    async def stop(self) -> None:
        """End the worker: its runs are cancelled; it is killed if it does not exit in time."""
        self.writer.close()  # the worker reads the end of its stream as "stop"
        try:
            await asyncio.wait_for(self.process.wait(), STOP_SECONDS)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()
        if self.listener is not None:
            await asyncio.gather(self.listener, return_exceptions=True)


@dataclass
class WorkerPool:
    """The serving process's workers; a :class:`~tavern_agent.endpoint.runs.RunService`.

    The first worker starts with the pool; another only when every started one
    has a run (so a server that never runs two at once runs one process more).
    """

    config: WorkerConfig
    size: int
    workers: list[Worker | None] = field(default_factory=list)  # None: not started yet
    _choosing: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def data_dir(self) -> Path:
        """The data folder the runs live in."""
        return self.config.data_dir

    @property
    def names(self) -> Names:
        """``serve --user-name`` / ``--character-name``."""
        return self.config.names

    async def start(self) -> None:
        """Start the first worker (it gets ready while the server starts listening)."""
        self.workers = [await Worker.spawn(self.config)] + [None] * (self.size - 1)

    async def _least_busy(self) -> Worker:
        """The started worker with the fewest runs (the first on a tie); a new one when
        all have runs and one may start; a dead one is replaced."""
        async with self._choosing:  # one start at a time, never two for one place
            started = [i for i, w in enumerate(self.workers) if w is not None]
            index = min(started, key=lambda i: _load(self.workers[i]))
            worker = self.workers[index]
            if worker is not None and worker.alive:
                if not worker.runs or None not in self.workers:
                    return worker
                index = self.workers.index(None)
            started_now = self.workers[index] = await Worker.spawn(self.config)
            return started_now

    async def begin(
        self, chat: FrontendChat, profile: Profile, on_line: OnLine | None, run_id: str
    ) -> asyncio.Task[RunOutcome]:
        """Start the run on the least busy worker (see ``RunService.begin``)."""
        try:
            worker = await self._least_busy()
        except OSError as exc:
            raise RunStartFailed(f"cannot start a worker process: {exc}") from None
        return await worker.run(chat, profile, on_line, run_id)

    async def aclose(self) -> None:
        """Stop every worker."""
        workers = [w for w in self.workers if w is not None]
        self.workers = []
        await asyncio.gather(*(w.stop() for w in workers), return_exceptions=True)


def _load(worker: Worker | None) -> int:
    assert worker is not None
    return len(worker.runs) if worker.alive else -1  # a dead one is replaced first


def default_workers() -> int:
    """``serve --workers``'s default: the cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
