"""``tavern-agent run`` / ``runs``, as real processes: the example replays offline."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.runtime.helpers import example_run_args
from tests.runtime.openai_server import OpenAIServer
from tests.test_cli import run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
REPLY = "the cold, moss-slick water climbs to your knees"


def example_args(tmp_path: Path) -> list[str]:
    return example_run_args(tmp_path)


def test_the_example_replays_offline_and_prints_the_committed_message(tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc = run(*example_args(tmp_path), data_dir=data)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for name in (
        "chat_search",
        "chat_read_messages",
        "worldinfo_read_activated",
        "dice_roll",
        "workspace_write_file",
        "workspace_search_files",
        "workspace_read_file",
        "workspace_apply_patch",
        "workspace_shell",
        "workspace_commit",
        "workspace_finish",
    ):
        assert f"✓ {name}" in out, name
    assert "round 8" in out and "completed" in out
    assert "Committed message (floor 4):" in out and REPLY in out
    chat_lines = (tmp_path / "chat.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(chat_lines) == 6 and REPLY in json.loads(chat_lines[-1])["mes"]

    listed = run("runs", "list", "--json", data_dir=data)
    rows = json.loads(listed.stdout)
    # the draft is auto-published at the end of the rounds that edited it, until the
    # one explicit commit
    assert [r["status"] for r in rows] == ["completed"] and rows[0]["commits"] == 3
    shown = run("runs", "show", "last", data_dir=data)
    assert shown.returncode == 0 and "commit_confirmed" in shown.stdout
    assert "workspace_apply_patch" in shown.stdout and "run_completed" in shown.stdout
    # The shell steps ran again in the replay: jq over the chat mount and over a file the
    # agent wrote, Python over the patched draft.
    assert "Seraphina: 4 floors" in shown.stdout
    assert "Seraphina > Rowan > Seraphina > Rowan" in shown.stdout
    assert "willow ford eel" in shown.stdout
    assert "35 words, 2 spoken lines" in shown.stdout
    events = json.loads(run("runs", "show", rows[0]["runId"], "--json", data_dir=data).stdout)
    assert events[0]["type"] == "run_started" and events[-1]["type"] == "run_completed"
    confirmed = [e["payload"] for e in events if e["type"] == "commit_confirmed"]
    assert [c.get("auto", False) for c in confirmed] == [True, True, False]
    assert {c["floor"] for c in confirmed} == {4}  # one message, revised


def test_run_json_output_and_resume_of_a_finished_run(tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc = run(*example_args(tmp_path), "--json", data_dir=data)
    assert proc.returncode == 0, proc.stderr
    outcome = json.loads(proc.stdout)
    assert outcome["status"] == "completed" and REPLY in outcome["committedMessage"]
    again = run("run", "--resume", outcome["runId"], "--json", data_dir=data)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["status"] == "completed"  # nothing is repeated
    lines = (tmp_path / "chat.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 6


def test_run_needs_a_model_or_a_replay(tmp_path: Path) -> None:
    chat = tmp_path / "c.jsonl"
    shutil.copyfile(EXAMPLES / "chat.jsonl", chat)
    proc = run("run", str(chat), data_dir=tmp_path / "data")
    assert proc.returncode == 2 and "--model" in proc.stderr


def test_ctrl_c_cancels_and_the_journal_records_it(tmp_path: Path) -> None:
    chat = tmp_path / "chat.jsonl"
    shutil.copyfile(EXAMPLES / "chat.jsonl", chat)
    data = tmp_path / "data"
    with OpenAIServer([], hang=True) as server:
        command = [sys.executable, "-m", "tavern_agent", "--data-dir", str(data), "run"]
        command += [str(chat), "--model", "local", "--base-url", server.base_url]
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 30
        while not server.bodies:  # the run is waiting for the model
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "cancelled" in out and "--resume" in out
    journal = next(data.glob("chats/*/runs/*/events.jsonl"))
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    assert events[-1]["type"] == "run_cancelled"
    assert events[-1]["payload"]["errorCode"] == "run.cancelled"


def test_ctrl_c_pressed_on_and_on_still_ends_with_the_note_and_130(tmp_path: Path) -> None:
    chat = tmp_path / "chat.jsonl"
    shutil.copyfile(EXAMPLES / "chat.jsonl", chat)
    data = tmp_path / "data"
    with OpenAIServer([], hang=True) as server:
        command = [sys.executable, "-m", "tavern_agent", "--data-dir", str(data), "run"]
        command += [str(chat), "--model", "local", "--base-url", server.base_url]
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while not server.bodies:  # the run is waiting for the model
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        for _ in range(9):  # through the cancel, its note and the exit
            time.sleep(0.01)
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "cancelled" in out and "--resume" in out
    journal = next(data.glob("chats/*/runs/*/events.jsonl"))
    assert json.loads(journal.read_text().splitlines()[-1])["type"] == "run_cancelled"


def test_a_second_ctrl_c_still_lets_the_cancel_be_journaled(tmp_path: Path) -> None:
    # An impatient user presses Ctrl-C twice while the run's progress output cannot drain
    # (a paused terminal, a pager): the run is stuck in a write to stdout when both arrive.
    chat = tmp_path / "chat.jsonl"
    shutil.copyfile(EXAMPLES / "chat.jsonl", chat)
    data = tmp_path / "data"
    rolls = [("dice_roll", {"formula": f"{n}d6"}) for n in range(1, 61)]
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)  # a small terminal buffer
    with OpenAIServer([rolls, [("workspace_finish", {})]]) as server:
        command = [sys.executable, "-m", "tavern_agent", "--data-dir", str(data), "run"]
        command += [str(chat), "--model", "local", "--base-url", server.base_url]
        proc = subprocess.Popen(command, stdout=write_end, stderr=subprocess.PIPE, text=True)
        os.close(write_end)
        sizes, deadline = [-1], time.monotonic() + 60
        while True:  # until the run stops writing: it waits for its stdout to drain
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.5)
            journal = next(data.glob("chats/*/runs/*/events.jsonl"), None)
            sizes.append(journal.stat().st_size if journal is not None else -1)
            if journal is not None and sizes[-1] == sizes[-2]:
                break
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        with os.fdopen(read_end, encoding="utf-8") as reader:
            out = reader.read()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "cancelled" in out and "Traceback" not in err
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    assert events[-1]["type"] == "run_cancelled"
    requested = [e["payload"]["callId"] for e in events if e["type"] == "tool_call_requested"]
    stored = [e["payload"]["callId"] for e in events if e["type"] == "tool_result_stored"]
    assert requested and stored == requested  # every call that began has its result


def test_a_commit_to_a_symlinked_chat_reaches_the_real_file(tmp_path: Path) -> None:
    # SillyTavern users link chats and whole data folders: the link stays, the target changes.
    args = example_args(tmp_path)
    real = tmp_path / "st" / "chats" / "real.jsonl"
    real.parent.mkdir(parents=True)
    (tmp_path / "chat.jsonl").rename(real)
    linked = tmp_path / "linked"
    linked.mkdir()
    link = linked / "link.jsonl"
    link.symlink_to(Path("..") / "st" / "chats" / "real.jsonl")
    data_target = tmp_path / "data-real"
    data_target.mkdir()
    (tmp_path / "data").symlink_to(data_target)
    args[1] = str(link)
    proc = run(*args, "--json", data_dir=tmp_path / "data")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "completed"
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert (tmp_path / "data").is_symlink()
    lines = real.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 6 and REPLY in json.loads(lines[-1])["mes"]
    assert not list(real.parent.glob(".*.tmp")) and not list(linked.glob(".*.tmp"))
    assert sorted(p.name for p in linked.iterdir()) == ["link.jsonl"]
