"""Call timeouts for many calls from one watchdog, instead of a timer per call.

A per-call timer (``asyncio.timeout``) costs a timer-heap push and cancel on
every call, which is measurable next to a local MCP round trip of a few
hundred microseconds. Here a call costs two dict operations: the watchdog
task wakes every ``TICK`` seconds while calls are in flight and cancels the
tasks past their deadline, so a timeout fires up to ``TICK`` late.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from types import TracebackType

TICK = 0.1
IDLE_STOP = 5.0  # the watchdog ends after this long with nothing in flight


class Deadlines:
    """The deadlines of the calls in flight on one event loop."""

    def __init__(self) -> None:
        self._due: dict[asyncio.Task[object], float] = {}
        self._expired: set[asyncio.Task[object]] = set()
        self._watchdog: asyncio.Task[None] | None = None

    def within(self, seconds: float) -> _Within:
        """``with deadlines.within(s):`` (in a task) raises ``TimeoutError`` after ``s`` seconds.

        A plain ``with``: entering and leaving await nothing, so they cost no
        coroutine of their own on every call.
        """
        return _Within(self, seconds)

    def _enter(self, task: asyncio.Task[object], seconds: float) -> None:
        self._due[task] = time.monotonic() + seconds
        watchdog = self._watchdog
        if watchdog is None or watchdog.done() or watchdog.get_loop() is not task.get_loop():
            self._watchdog = task.get_loop().create_task(self._watch(), name="mcp-call-deadlines")

    def _exit(self, task: asyncio.Task[object]) -> bool:
        """Leave; whether this task was cancelled for its deadline."""
        self._due.pop(task, None)
        if task in self._expired:
            self._expired.discard(task)
            return True
        return False

    async def _watch(self) -> None:
        idle_since = time.monotonic()
        while True:
            await asyncio.sleep(TICK)
            now = time.monotonic()
            if not self._due:
                if now - idle_since > IDLE_STOP:
                    return
                continue
            idle_since = now
            for task, due in list(self._due.items()):
                if due <= now and task not in self._expired:
                    self._expired.add(task)
                    task.cancel()

    async def aclose(self) -> None:
        """Stop the watchdog task."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog


class _Within:
    __slots__ = ("_deadlines", "_seconds", "_task")

    def __init__(self, deadlines: Deadlines, seconds: float) -> None:
        self._deadlines = deadlines
        self._seconds = seconds
        self._task: asyncio.Task[object] | None = None

    def __enter__(self) -> None:
        task = asyncio.current_task()
        assert task is not None, "within() needs a task"
        self._task = task
        self._deadlines._enter(task, self._seconds)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        assert self._task is not None
        ours = self._deadlines._exit(self._task)
        if ours and exc_type is asyncio.CancelledError and self._task.uncancel() == 0:
            raise TimeoutError from exc_val
