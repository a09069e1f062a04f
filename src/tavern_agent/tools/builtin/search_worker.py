"""A second process for ``workspace.search_files``, so a large search uses two cores.

RE2's Python binding holds the GIL while it scans, and reading files costs
about as much as scanning them; a second thread only adds GIL hand-offs. A
second *process* reads and scans in parallel: the search hands it runs of
files (a folder and file names) while it keeps up, at most three at a time,
and does the others itself, so neither side waits for the other until the end.

The worker opens files through the same :class:`Workspace` code (folder by
folder from the root, no link followed, nothing outside the root), with the
same root policy; it gets only folders on disk (``chat/floors/`` lives in the
parent's memory). It runs the same RE2 pattern, so the linear-time guarantee
holds there too. It is a plain ``python -m`` child talking length-prefixed
pickles over its stdin and stdout (``multiprocessing``'s ``spawn`` would
re-run the parent's main script, and ``fork`` would copy the parent's
threads' locks). It is started by the first search of more than one run of
files and used once it is up; a worker that fails is replaced, and its runs
are searched in the parent. It exits when the parent closes its stdin or dies.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Any, TypeVar

import re2

import tavern_agent
from tavern_agent.tools.builtin.search_scan import OPTIONS, scan_run
from tavern_agent.workspace.floors import is_floor_path
from tavern_agent.workspace.roots import RootPolicy
from tavern_agent.workspace.store import Workspace

T = TypeVar("T")
IN_FLIGHT = 3  # runs queued for the worker: it never idles while the parent is busy
Spec = tuple[str, RootPolicy, str | None, frozenset[str] | None]
_READY = -1  # the job id of the worker's first frame: it has started


class WorkerFailed(RuntimeError):
    """The worker process failed a job or exited."""


def spec_of(ws: Workspace) -> Spec:
    """What the worker needs to open the same files: root, policy, skills library."""
    skills = None if ws.skills_dir is None else str(ws.skills_dir)
    return (str(ws.root), ws.policy, skills, ws.visible_skills)


def _send(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
    stream.write(len(data).to_bytes(8, "little") + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    """The next message, ``None`` at the end of the stream."""
    head = stream.read(8)
    if len(head) < 8:
        return None
    size = int.from_bytes(head, "little")
    data = stream.read(size)
    return None if len(data) < size else pickle.loads(data)


class Helper:
    """The worker process and the runs handed to it that are not done yet."""

    def __init__(self) -> None:
        package_root = str(Path(tavern_agent.__file__).resolve().parents[1])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        self._process = subprocess.Popen(
            [sys.executable, "-m", __name__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        self._ready = threading.Event()
        self._pending: dict[int, Future[Any]] = {}
        self._next = 0
        self._lock = threading.Lock()  # searches run on several tool threads at once
        self.broken = False
        self.jobs = 0  # runs handed to the worker so far
        threading.Thread(target=self._read, name="search-worker", daemon=True).start()

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until the worker has started (it takes no job before); whether it has."""
        return self._ready.wait(timeout)

    def submit(
        self, ws: Workspace, folder: str, names: list[str], pattern: bytes
    ) -> Future[Any] | None:
        """A job for the worker when it is up and keeping up, else ``None`` (search it here)."""
        if self.broken or not self._ready.is_set() or is_floor_path(folder):
            return None
        with self._lock:
            if len(self._pending) >= IN_FLIGHT:
                return None
            self._next += 1
            future: Future[Any] = Future()
            self._pending[self._next] = future
            try:
                assert self._process.stdin is not None
                _send(self._process.stdin, (self._next, spec_of(ws), folder, names, pattern))
            except (OSError, ValueError):
                del self._pending[self._next]
                self.broken = True
                return None
            self.jobs += 1
            return future

    def _read(self) -> None:
        assert self._process.stdout is not None
        while (message := _receive(self._process.stdout)) is not None:
            job, ok, value = message
            if job == _READY:
                self._ready.set()
                continue
            with self._lock:
                future = self._pending.pop(job, None)
            if future is not None:
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(WorkerFailed(value))
        self.broken = True  # the worker exited: fail whatever it still had
        with self._lock:
            left, self._pending = self._pending, {}
        for future in left.values():
            future.set_exception(WorkerFailed("the search worker exited"))

    def close(self) -> None:
        """Kill the worker process and mark the helper broken, so no new run is handed to it."""
        self.broken = True
        with contextlib.suppress(OSError):
            if self._process.stdin is not None:
                self._process.stdin.close()
        self._process.kill()
        self._process.wait()


_HELPER: Helper | None = None
_GUARD = threading.Lock()


def helper(*, start: bool = False) -> Helper | None:
    """The running worker (started when ``start``); ``None`` on a single core."""
    global _HELPER
    if (os.cpu_count() or 1) < 2:
        return None
    with _GUARD:
        if _HELPER is not None and _HELPER.broken:
            _HELPER.close()
            _HELPER = None
        if _HELPER is None and start:
            try:
                _HELPER = Helper()
            except OSError:
                return None
        return _HELPER


@atexit.register
def _stop() -> None:
    """End the worker with the process (it would also end on its own at stdin's end)."""
    with _GUARD:
        if _HELPER is not None:
            _HELPER.close()


def result(future: Future[T], fallback: Callable[[], T]) -> T:
    """The worker's answer, or ``fallback()`` (the parent does it) if the worker failed."""
    try:
        return future.result()
    except WorkerFailed:
        if _HELPER is not None:
            _HELPER.broken = True
        return fallback()


# ------------------------------------------------------------ in the worker process

_WORKSPACES: dict[Spec, Workspace] = {}
_PATTERNS: dict[bytes, Any] = {}


def _scan(spec: Spec, folder: str, names: list[str], pattern: bytes) -> Any:
    ws = _WORKSPACES.get(spec)
    if ws is None:
        root, policy, skills, visible = spec
        skills_dir = None if skills is None else Path(skills)
        ws = Workspace(Path(root), policy, skills_dir=skills_dir, visible_skills=visible)
        _WORKSPACES.clear()  # one run's workspace at a time is the usual case
        _WORKSPACES[spec] = ws
    compiled = _PATTERNS.get(pattern)
    if compiled is None:
        compiled = re2.compile(pattern, OPTIONS)
        if len(_PATTERNS) > 64:
            _PATTERNS.clear()
        _PATTERNS[pattern] = compiled
    return scan_run(ws, folder, names, compiled)


def serve(requests: IO[bytes], replies: IO[bytes]) -> None:
    """The worker's loop: a job in, its result (or the error's text) out, until stdin ends."""
    _send(replies, (_READY, True, os.getpid()))
    while (message := _receive(requests)) is not None:
        job, spec, folder, names, pattern = message
        try:
            reply = (job, True, _scan(spec, folder, names, pattern))
        except Exception as exc:  # the parent searches this run itself
            reply = (job, False, f"{type(exc).__name__}: {exc}")
        _send(replies, reply)


if __name__ == "__main__":
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print must not break the reply stream
    serve(sys.stdin.buffer, replies)
