"""Kill -9 at random points in 20 runs, then resume each: one committed message, valid journal.

Each run is a real child process; the harness watches its journal and sends
SIGKILL once it holds a randomly chosen number of events, so kills land
between or inside steps (a model request, a tool call, a commit, the finish).
The scripted model acts on its results (it redoes a write or commit whose
outcome it was told is unknown), as the "outcome unknown" result asks a model to.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tavern_agent.runtime.journal import read_events
from tavern_agent.runtime.loop import Engine
from tavern_agent.runtime.run import Run, find_run
from tests.runtime.helpers import Harness
from tests.runtime.kill_child import TEXT, gateway

ROOT = Path(__file__).resolve().parents[2]
RUNS = 20


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


@pytest.mark.slow
@pytest.mark.crash
def test_kill_9_at_random_points_then_resume(tmp_path: Path) -> None:
    rng = random.Random(20261202)
    harnesses = [Harness(tmp_path / f"h{i}") for i in range(RUNS)]
    targets = [rng.randint(1, 34) for _ in range(RUNS)]
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    runs = [[str(h.data.path), str(h.chat_path), f"run_k{i}"] for i, h in enumerate(harnesses)]
    (tmp_path / "runs.json").write_text(json.dumps(runs))
    zygote = subprocess.Popen(
        [sys.executable, "-m", "tests.runtime.kill_child", str(tmp_path / "runs.json")],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert zygote.stdout is not None
    pids = [int(zygote.stdout.readline()) for _ in range(RUNS)]
    journals: list[Path | None] = [None] * RUNS
    killed = [False] * RUNS
    deadline = time.monotonic() + 60
    while zygote.poll() is None:
        assert time.monotonic() < deadline, "children did not finish"
        for i, h in enumerate(harnesses):
            if killed[i]:
                continue
            if journals[i] is None:
                found = list(h.data.path.glob("chats/*/runs/*/events.jsonl"))
                journals[i] = found[0] if found else None
            path = journals[i]
            if path is not None and _lines(path) >= targets[i]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pids[i], signal.SIGKILL)
                killed[i] = True
        time.sleep(0.001)
    ended = [
        bool(j and read_events(j) and read_events(j)[-1]["type"] == "run_completed")
        for j in journals
    ]
    assert ended.count(False) >= RUNS // 2  # most runs were really killed mid-way

    for i, h in enumerate(harnesses):
        run_dir = find_run(h.data, f"run_k{i}")
        run = Run.open(h.assembly, run_dir)
        engine = Engine(run, gateway(), fsync=False)
        result = asyncio.run(engine.resume())
        engine.close()
        assert result.status == "completed", (i, targets[i], result)
        _check(h, run_dir, f"run_k{i}")


def _check(h: Harness, run_dir: Path, run_id: str) -> None:
    messages = h.chat_messages()
    committed = [m for m in messages if m.get("extra", {}).get("agent", {}).get("runId") == run_id]
    assert len(messages) == 4 and len(committed) == 1
    assert committed[0]["mes"] == TEXT
    events = read_events(run_dir / "events.jsonl")
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert len((run_dir / "events.jsonl").read_bytes().splitlines()) == len(events)
    kinds = Counter(e["type"] for e in events)
    assert kinds["run_started"] == 1 and kinds["run_completed"] == 1
    assert events[-1]["type"] == "run_completed"
    confirmed = [e for e in events if e["type"] == "commit_confirmed"]
    assert committed[0]["extra"]["agent"]["commits"] == len(confirmed)
    requested = Counter(
        e["payload"]["callId"] for e in events if e["type"] == "tool_call_requested"
    )
    stored = Counter(e["payload"]["callId"] for e in events if e["type"] == "tool_result_stored")
    assert set(requested) <= set(stored) and max(stored.values()) == 1
    assert max(requested.values()) == 1
