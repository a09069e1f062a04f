"""How far a chat search index build (or a floor copy) is, and the CLI's progress bar for it.

A build runs on a worker thread and counts what it did in a
:class:`BuildProgress`. A tool call that needs the index waits through
:func:`wait`. Inside :func:`shown` (``tavern-agent call`` and ``run`` use it)
a wait that lasts longer than :data:`DELAY_SECONDS` shows a ``rich`` progress
bar that follows the build until it is done; elsewhere a wait just waits.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

T = TypeVar("T")
DELAY_SECONDS = 1.0
_POLL_SECONDS = 0.1


def _running() -> threading.Event:
    event = threading.Event()
    event.set()
    return event


@dataclass(slots=True)
class BuildProgress:
    """What a build is doing (``step``) and how many of ``total`` floors it has done.

    ``tool`` names the tool call that waits for it in the progress bar. A
    search that scans the chat while the build runs holds it :meth:`paused`:
    the build stops at its next :meth:`checkpoint` (a few milliseconds of work
    apart) until the scan is done, so the two do not share the GIL and the cores
    while a model waits for the search.
    """

    step: str = "reading the chat"
    done: int = 0
    total: int = 0
    tool: str = "chat_search"
    _running: threading.Event = field(default_factory=_running, repr=False)
    _pausers: int = field(default=0, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def checkpoint(self) -> None:
        """Where the build waits while a scan holds it :meth:`paused`."""
        self._running.wait()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Hold the build at its next :meth:`checkpoint` until the block ends."""
        with self._lock:
            self._pausers += 1
            self._running.clear()
        try:
            yield
        finally:
            with self._lock:
                self._pausers -= 1
                if not self._pausers:
                    self._running.set()


_display: Console | None = None


@contextlib.contextmanager
def shown(console: Console | None = None) -> Iterator[None]:
    """Show a progress bar (on ``console``, default stderr) for builds waited on here."""
    global _display
    previous, _display = _display, console or Console(stderr=True)
    try:
        yield
    finally:
        _display = previous


def in_background(work: Callable[[], T]) -> Future[T]:
    """Run ``work`` on a new daemon thread (an unfinished build never delays the exit)."""
    future: Future[T] = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(work())
        except BaseException as exc:  # handed to whoever waits, like an executor would
            future.set_exception(exc)

    threading.Thread(target=run, name="chat-index", daemon=True).start()
    return future


def wait(future: Future[T], progress: BuildProgress) -> T:
    """The build's result; with a display installed, a bar once it takes over a second."""
    console = _display
    if console is None:
        return future.result()
    try:
        return future.result(timeout=DELAY_SECONDS)
    except TimeoutError:
        pass
    columns = (
        TextColumn(f"{progress.tool}: {{task.description}}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("floors"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(progress.step, total=progress.total or None)
        while True:
            try:
                return future.result(timeout=_POLL_SECONDS)
            except TimeoutError:
                bar.update(
                    task,
                    description=progress.step,
                    completed=progress.done,
                    total=progress.total or None,
                )
