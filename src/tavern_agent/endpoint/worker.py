"""A worker process of ``serve --workers N``: runs the requests its parent hands it.

Started by :class:`tavern_agent.endpoint.workers.Worker` as ``python -m
tavern_agent.endpoint.worker FD`` with one end of a socket pair; never by hand.
It opens the data root's assembly and the upstream gateway as a one-process
``serve`` does, and drives each run with the same
:class:`~tavern_agent.endpoint.runs.AgentService`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import signal
import socket
import sys
from typing import Any

from tavern_agent.assembly import Assembly
from tavern_agent.endpoint.runs import AgentService, RunOutcome
from tavern_agent.endpoint.workers import WorkerConfig, frame, read_frame
from tavern_agent.providers.choice import model_gateway

log = logging.getLogger(__name__)


class Runs:
    """The runs this worker drives, by id, and the stream back to the parent."""

    def __init__(self, service: AgentService, writer: asyncio.StreamWriter) -> None:
        self.service = service
        self.writer = writer
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self._out: list[bytes] = []

    def send(self, *message: Any) -> None:
        """One message to the parent, sent with the others of this turn of the event loop:
        each send wakes the parent, and on a busy machine each wake-up costs."""
        if not self._out:
            asyncio.get_running_loop().call_soon(self.flush)
        self._out.append(frame(message))

    def flush(self) -> None:
        """Send what :meth:`send` has gathered."""
        out, self._out = self._out, []
        if not out:
            return
        if not self.writer.is_closing():  # dropped once the parent has gone
            self.writer.write(b"".join(out))

    def take(self, message: tuple[Any, ...]) -> None:
        """Act on one message of the parent: start or cancel a run."""
        kind, run_id = message[0], message[1]
        if kind == "start":
            task = asyncio.create_task(self._run(run_id, message[2], message[3]))
            self.tasks[run_id] = task
            task.add_done_callback(lambda _: self.tasks.pop(run_id, None))
        elif kind == "cancel" and run_id in self.tasks:
            self.tasks[run_id].cancel()

    async def _run(self, run_id: str, chat: Any, profile: Any) -> None:
        def line(text: str) -> None:
            self.send("line", run_id, text)

        try:
            try:
                task = await self.service.begin(chat, profile, line, run_id)
            except (OSError, ValueError) as exc:
                self.send("start_failed", run_id, str(exc))
                return
            self.send("started", run_id)
            try:
                outcome = await asyncio.shield(task)
            except asyncio.CancelledError:
                task.cancel()  # the loop journals run_cancelled and pairs pending calls
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
                raise
            self.send("ended", run_id, outcome)
        except asyncio.CancelledError:
            self.send("ended", run_id, None)
        except Exception as exc:  # the parent must hear of every run's end
            log.exception("endpoint worker: run %s failed", run_id)
            why = f"internal error in the worker process: {exc}"
            self.send("ended", run_id, RunOutcome(run_id, "failed", "internal", why))

    async def cancel_all(self) -> None:
        """Cancel every run and wait until each has journaled it."""
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def serve_runs(sock: socket.socket) -> None:
    """Run what the parent hands over ``sock`` until it closes its end."""
    reader, writer = await asyncio.open_connection(sock=sock)
    config: WorkerConfig = await read_frame(reader)
    for name in config.ext_modules:  # the parent imported them already: they import
        importlib.import_module(name)
    gateway, record = model_gateway(**config.gateway)
    try:
        async with await Assembly.open(config.data_dir) as assembly:
            service = AgentService(assembly, gateway, record, config.protocol, names=config.names)
            runs = Runs(service, writer)
            runs.send("ready")
            reading = asyncio.create_task(_read(reader, runs))
            # SIGTERM (this worker alone): end its runs as the parent would, then exit.
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, reading.cancel)
            try:
                with contextlib.suppress(asyncio.CancelledError):
                    await reading
            finally:
                await runs.cancel_all()
                runs.flush()  # their ends, before the stream closes
    finally:
        await gateway.aclose()
        writer.close()


async def _read(reader: asyncio.StreamReader, runs: Runs) -> None:
    """Take the parent's messages until it closes its end (to stop us) or goes away."""
    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
        while True:
            runs.take(await read_frame(reader))


def main() -> None:
    """Entry point: ``python -m tavern_agent.endpoint.worker FD``."""
    # Ctrl-C reaches the whole process group: the parent decides when runs stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=int(sys.argv[1]))
    asyncio.run(serve_runs(sock))


if __name__ == "__main__":
    main()
