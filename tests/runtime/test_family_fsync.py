"""A family of delegated children shares the journal's fsyncs (group commit).

The run's own journal is fsync'd here (the other tests run without fsync): every
``os.fsync`` of ``events.jsonl`` is recorded with the journal's length at that
moment and the children's notes that exist on disk then. Children that run
together share their barriers, and a child's call that must not be repeated
still runs only once its ``tool_call_started`` line is durable.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tavern_agent import run_layout
from tavern_agent.providers.gateway import ModelRequest
from tavern_agent.runtime.loop import Engine, RunResult
from tavern_agent.runtime.run import Run
from tavern_agent.runtime.scripted import AgentScript, ScriptedAgents, Turn, call, calls
from tests.runtime.helpers import COMMIT, FINISH, write
from tests.runtime.test_agents import await_, delegate, returns, setup

Sync = tuple[int, frozenset[str]]  # the journal's length, the notes on disk


def note(request: ModelRequest) -> Turn:
    """A child's first turn: a note of its own (a call that is not repeatable)."""
    return call(*write(f"Notes of {request.invocation_id}.", f"scratch/{request.invocation_id}.md"))


def family(children: int) -> dict[str, AgentScript]:
    return {
        "writer": [
            calls(*(delegate("scout", f"Job {n}.") for n in range(children))),
            call(*await_()),
            call(*write("Done.")),
            call(*COMMIT),
            call(*FINISH),
        ],
        "scout": [note, returns("ok")],
    }


def run_family(tmp: Path, children: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Run, list[Sync]]:
    """A run whose writer delegates ``children`` tasks at once, with its journal fsync'd."""
    h, root = setup(tmp, maxConcurrentInvocations=children, maxInvocationsPerRun=children)
    run = h.start(root)
    journal = run.run_dir / run_layout.JOURNAL_FILE
    notes = run.workspace.root / "scratch"
    syncs: list[Sync] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        if journal.exists() and (st.st_dev, st.st_ino) == (
            (j := journal.stat()).st_dev,
            j.st_ino,
        ):
            on_disk = frozenset(p.name for p in notes.iterdir()) if notes.exists() else frozenset()
            syncs.append((st.st_size, on_disk))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    engine = Engine(run, ScriptedAgents(family(children)), fsync=True)
    try:
        result: RunResult = asyncio.run(engine.start())
    finally:
        engine.close()
        monkeypatch.setattr(os, "fsync", real_fsync)
    assert result.status == "completed"
    return run, syncs


def lines(run: Run) -> list[tuple[int, dict[str, Any]]]:
    """Each journal line's end offset, with the line."""
    out: list[tuple[int, dict[str, Any]]] = []
    end = 0
    for raw in (run.run_dir / run_layout.JOURNAL_FILE).read_bytes().splitlines(keepends=True):
        end += len(raw)
        out.append((end, json.loads(raw)))
    return out


def test_twenty_children_cost_the_journal_no_more_fsyncs_than_two(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, two = run_family(tmp_path / "two", 2, monkeypatch)
    run, twenty = run_family(tmp_path / "twenty", 20, monkeypatch)
    # The parent's barriers, and one shared by the children's notes: not one per
    # child's note and turn end (60 more for twenty children).
    assert len(twenty) == len(two) < 20
    finished = [e for _, e in lines(run) if e["type"] == "task_finished"]
    assert [e["payload"]["status"] for e in finished] == ["completed"] * 20


def test_a_childs_note_is_written_only_after_its_start_is_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, syncs = run_family(tmp_path, 20, monkeypatch)
    started: dict[tuple[str, str], int] = {}
    notes: dict[tuple[str, str], str] = {}
    for end, e in lines(run):
        p = e["payload"]
        key = (p.get("invocationId"), p.get("callId"))
        if e["type"] == "tool_call_requested" and p["name"] == "workspace_write_file":
            path = json.loads(p["arguments"]["raw"])["file_path"]
            if path.startswith("scratch/"):
                notes[key] = Path(path).name
        elif e["type"] == "tool_call_started":
            started[key] = end
    assert len(notes) == 20
    for key, name in notes.items():
        # some fsync covered the started line while the note was not written yet
        assert any(size >= started[key] and name not in on_disk for size, on_disk in syncs), key
