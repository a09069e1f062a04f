"""A submitter (``run --engine temporal``) outlives its Temporal server.

While the server is away the submitter follows the run's journal on the data
root and asks the server again with a printed, growing pause. It ends with the
run's real outcome (pure JSON on stdout with ``--json``), or, after
``--temporal-patience``, with exit 3 and one line naming the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.chat.helpers import write_chat
from tests.runtime.openai_server import OpenAIServer
from tests.temporal.conftest import ROOT, _temporal_cli, _wait_for_port, free_port

pytestmark = [pytest.mark.slow, pytest.mark.temporal]
REPLY = "The ford is shallow past the willow."
TURNS = [
    [("workspace_write_file", {"file_path": "output/main.md", "content": REPLY})],
    [("workspace_commit", {"reason": "the reply"})],
    [("workspace_finish", {})],
]
ENV = os.environ | {"PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}


@contextmanager
def server_on(port: int, db: Path) -> Iterator[subprocess.Popen[bytes]]:
    cmd = [_temporal_cli(), "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
    cmd += ["--port", str(port), "--db-filename", str(db), "--log-level", "error"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port, proc)
        yield proc
    finally:
        proc.terminate()
        proc.wait(15)


def tavern(data: Path, *args: str, **kw: object) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "tavern_agent", "--data-dir", str(data), *args]
    return subprocess.Popen(command, env=ENV, text=True, **kw)  # type: ignore[call-overload, no-any-return]


def submit(tmp: Path, address: str, base_url: str, *more: str) -> subprocess.Popen[str]:
    chat = write_chat(tmp / "chat.jsonl", ["We reach the ford.", "Seraphina waits."])
    args = ["run", str(chat), "--profile", str(ROOT / "examples" / "profile.json")]
    args += ["--model", "local", "--base-url", base_url, "--api-key-env", "NO_KEY_NEEDED"]
    args += ["--engine", "temporal", "--temporal", address, "--json"]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    return tavern(tmp / "data", *args, *more, **pipes)


@pytest.mark.parametrize("comes_back", [True, False], ids=["server-returns", "server-gone"])
def test_the_submitter_follows_the_journal_while_the_server_is_away(
    tmp_path: Path, comes_back: bool
) -> None:
    port, db = free_port(), tmp_path / "temporal.db"
    address = f"127.0.0.1:{port}"
    # The first model request is held until released, then dropped: the step is retried.
    with OpenAIServer(TURNS, pause_once_at=0) as upstream, server_on(port, db) as first:
        worker = tavern(tmp_path / "data", "worker", "--temporal", address)
        try:
            patience = [] if comes_back else ["--temporal-patience", "3"]
            submitter = submit(tmp_path, address, upstream.base_url, *patience)
            assert upstream.paused.wait(120), "the run never asked the model"
            first.terminate()
            first.wait(15)
            if comes_back:
                time.sleep(15)  # longer than the SDK's own retries of about 10 s
                assert submitter.poll() is None, submitter.communicate()
                with server_on(port, db):
                    upstream.release.set()
                    out, err = submitter.communicate(timeout=240)
            else:
                out, err = submitter.communicate(timeout=120)
        finally:
            upstream.release.set()
            worker.terminate()
            worker.wait(30)
    notices = [line for line in err.splitlines() if "unreachable" in line]
    assert notices and all("asking again in" in n for n in notices[:-1]), err
    assert "Traceback" not in err and "Fatal Python error" not in err
    if comes_back:
        assert submitter.returncode == 0, err
        outcome = json.loads(out)  # nothing but the JSON answer on stdout
        assert outcome["status"] == "completed" and outcome["committedMessage"] == REPLY
    else:
        assert submitter.returncode == 3 and out == ""
        last = err.strip().splitlines()[-1]
        assert last.startswith("tavern-agent: run run_") and "runs show run_" in last, err


def test_no_server_at_all_is_one_line_to_act_on(tmp_path: Path) -> None:
    submitter = submit(tmp_path, f"127.0.0.1:{free_port()}", "http://127.0.0.1:9/v1")
    out, err = submitter.communicate(timeout=120)
    assert submitter.returncode == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert "cannot reach the Temporal server" in line and "connection refused" in line
    assert "--temporal HOST:PORT" in line and len(line) < 200
