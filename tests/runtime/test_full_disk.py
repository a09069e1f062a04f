"""A full disk at any point of a run: a clear outcome, nothing torn, and the run resumes.

The data root is a small tmpfs, mounted by the test (which needs root), filled
to leave less and less room: the run's own writes then fail at different
points (creating the run, a model response, a tool's file, the journal, the
checkpoint, the end). Every outcome must be ``run.storage_failed`` (or a
refusal to create the run, naming the file) rather than an exception; no
temporary file may be left; the chat stays whole; and once the filler is
deleted, ``resume`` completes the run with exactly one committed message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tavern_agent.assembly import Assembly
from tavern_agent.chat.formats import parse_chat
from tavern_agent.fsutil import is_tmp_name
from tavern_agent.runtime.loop import Engine, RunResult
from tavern_agent.runtime.run import Run, RunSpec
from tavern_agent.workspace.layout import DataRoot
from tests.chat.helpers import write_chat
from tests.runtime.helpers import TEXTS, profile
from tests.runtime.kill_child import TEXT, gateway
from tests.runtime.writer_server import WriterServer

PAGE = 4096


def _can_mount() -> str | None:
    """Why a tmpfs cannot be mounted here, or None."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    probe = Path("/tmp") / f"tavern-agent-tmpfs-probe-{os.getpid()}"
    probe.mkdir(exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)])
        if done.returncode != 0:
            return "mount -t tmpfs failed (no CAP_SYS_ADMIN in this container?)"
        subprocess.run(["umount", str(probe)], check=True)
        return None
    finally:
        probe.rmdir()


NO_MOUNT = _can_mount()
pytestmark = pytest.mark.skipif(NO_MOUNT is not None, reason=NO_MOUNT or "")


@contextmanager
def tmpfs(path: Path, size: str = "4m") -> Iterator[Path]:
    path.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(mount: Path, leave: int) -> Path:
    """A filler file that leaves about ``leave`` bytes free."""
    filler = mount / "filler"
    with filler.open("wb") as handle:
        size = max(free_bytes(mount) - leave, 0)
        with contextlib.suppress(OSError):  # full already: that is the point
            handle.write(b"\0" * size)
    return filler


def leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if is_tmp_name(p.name) or p.name.startswith(".run_")]


def drive(engine: Engine, resume: bool = False) -> RunResult:
    try:
        return asyncio.run(engine.resume() if resume else engine.start())
    finally:
        engine.close()


def committed(chat: Path, run_id: str) -> list[str]:
    messages = parse_chat(chat.read_bytes()).messages
    return [m.mes for m in messages if (m.extra.get("agent") or {}).get("runId") == run_id]


def test_a_full_disk_at_any_point_ends_clearly_and_the_run_resumes(tmp_path: Path) -> None:
    # How much one run writes to the data root, to place the fill levels across it.
    with tmpfs(tmp_path / "measure") as mount:
        chat = write_chat(tmp_path / "measure-chat.jsonl", TEXTS)
        before = free_bytes(mount)
        run = Run.start(Assembly(DataRoot(mount / "data")), RunSpec(profile(), chat_file=chat))
        assert drive(Engine(run, gateway())).status == "completed"
        needed = before - free_bytes(mount)
    levels = sorted({(needed * k // 20) // PAGE * PAGE for k in range(20)})
    seen: dict[str, int] = {}
    for level, leave in enumerate(levels):
        chat = write_chat(tmp_path / f"chat-{level}.jsonl", TEXTS)
        with tmpfs(tmp_path / f"disk-{level}") as mount:
            data = DataRoot(mount / "data")
            filler = fill(mount, leave)
            try:
                run = Run.start(Assembly(data), RunSpec(profile(), chat_file=chat))
            except OSError as exc:  # the CLI prints this as one line naming the file
                assert exc.filename and str(mount) in str(exc.filename)
                assert not list(mount.glob("data/chats/*/runs/*"))  # no half-made run
                seen["start refused"] = seen.get("start refused", 0) + 1
                run = None
            else:
                result = drive(Engine(run, gateway()))
                if result.status != "completed":
                    assert result.error_code == "run.storage_failed", result
                    seen[result.status] = seen.get(result.status, 0) + 1
            assert leftovers(mount) == [] and leftovers(tmp_path) == []
            assert len(parse_chat(chat.read_bytes()).messages) in (len(TEXTS), len(TEXTS) + 1)

            filler.unlink()
            if run is None:
                run = Run.start(Assembly(data), RunSpec(profile(), chat_file=chat))
                result = drive(Engine(run, gateway()))
            else:
                again = Run.open(Assembly(data), run.run_dir)
                result = drive(Engine(again, gateway()), resume=True)
            assert result.status == "completed", (leave, result)
            assert committed(chat, run.id) == [TEXT]
            assert len(parse_chat(chat.read_bytes()).messages) == len(TEXTS) + 1
            assert leftovers(mount) == []
    # The levels hit the run before it exists, in its middle, and after its commit.
    assert seen.get("start refused") and seen.get("failed") and seen.get("partial_success"), seen


def cli(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tavern_agent", "--data-dir", str(data), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_the_cli_on_a_full_disk_prints_results_and_outcomes_not_tracebacks(
    tmp_path: Path,
) -> None:
    chat = write_chat(tmp_path / "chat.jsonl", TEXTS)
    before = chat.read_bytes()
    with tmpfs(tmp_path / "disk", size="1m") as mount:
        data = mount / "data"
        wrote = cli(data, "call", "workspace_write_file", WRITE_ARGS)
        assert wrote.returncode == 0, wrote.stderr
        fill(mount, 0)

        full = cli(data, "call", "workspace_write_file", WRITE_ARGS.replace("a.md", "b.md"))
        assert full.returncode == 0 and "Traceback" not in full.stderr
        assert full.stdout.startswith("[workspace.storage_failed]\nStorage failed (No space")
        commit = cli(data, "call", "--chat", str(chat), "workspace_commit", "{}")
        run = cli(data, "run", str(chat), "--replay", str(EXAMPLES / "recorded-run"), "--json")
        for proc in (commit, run):
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 1 and len(lines) == 1, proc.stderr
            assert "No space left on device" in lines[0] and str(mount) in lines[0]
        assert "run.storage_failed: cannot create the run" in run.stderr
        assert leftovers(mount) == [] and chat.read_bytes() == before


WRITE_ARGS = '{"file_path": "scratch/a.md", "content": "hello"}'
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_journal_keeps_only_whole_lines_when_the_disk_fills(tmp_path: Path) -> None:
    from tavern_agent.runtime.journal import Journal, read_events

    with tmpfs(tmp_path / "disk", size="64k") as mount:
        journal = Journal(mount / "events.jsonl", "run_x")
        with pytest.raises(OSError) as full:
            for n in range(10_000):  # ~1 KiB each: the disk fills mid-line
                journal.append("note", {"n": n, "text": "x" * 1000})
        assert full.value.filename == str(mount / "events.jsonl")
        data = (mount / "events.jsonl").read_bytes()
        assert data.endswith(b"\n") and len(read_events(mount / "events.jsonl")) == journal.seq
        fill(mount, 0)  # even with no room at all, a failed append leaves the journal whole
        with pytest.raises(OSError):
            journal.append("note", {"n": -1, "text": "y" * 9000})  # more than a page
        assert (mount / "events.jsonl").read_bytes() == data
        journal.close()


def test_the_cli_run_on_a_filling_disk_ends_as_storage_failed_and_resumes(tmp_path: Path) -> None:
    reply = "The ford is cold; Seraphina leads you across."
    with WriterServer(reply) as model:
        args = ["--model", "m", "--base-url", model.base_url, "--json"]
        with tmpfs(tmp_path / "measure") as mount:
            before = free_bytes(mount)
            chat = write_chat(tmp_path / "measure-chat.jsonl", TEXTS)
            assert cli(mount / "data", "run", str(chat), *args).returncode == 0
            needed = before - free_bytes(mount)
        outcomes = []
        for level, part in enumerate((10, 65, 80, 95)):
            chat = write_chat(tmp_path / f"chat-{level}.jsonl", TEXTS)
            with tmpfs(tmp_path / f"disk-{level}") as mount:
                data = mount / "data"
                filler = fill(mount, needed * part // 100 // PAGE * PAGE)
                proc = cli(data, "run", str(chat), *args)
                assert "Traceback" not in proc.stderr and proc.returncode in (0, 1), proc.stderr
                if proc.stdout:
                    outcome = json.loads(proc.stdout)
                    assert outcome["errorCode"] == "run.storage_failed", outcome
                    outcomes.append(outcome["status"])
                else:  # the run could not be created: one line, no run folder
                    assert proc.stderr.startswith("tavern-agent: error: run.storage_failed: ")
                    assert len(proc.stderr.strip().splitlines()) == 1
                    outcomes.append("not created")
                assert leftovers(mount) == [] and leftovers(tmp_path) == []
                filler.unlink()
                if proc.stdout:
                    proc = cli(data, "run", "--resume", json.loads(proc.stdout)["runId"], *args)
                else:
                    proc = cli(data, "run", str(chat), *args)
                outcome = json.loads(proc.stdout)
                assert proc.returncode == 0 and outcome["status"] == "completed", proc.stderr
                assert committed(chat, outcome["runId"]) == [reply]
                assert len(parse_chat(chat.read_bytes()).messages) == len(TEXTS) + 1
    assert "not created" in outcomes and "failed" in outcomes, outcomes
