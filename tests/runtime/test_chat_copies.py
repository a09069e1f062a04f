"""Copies of one chat file (same ``chat_metadata.integrity``) never share a chat folder."""

from __future__ import annotations

import json
from pathlib import Path

from tests.runtime.helpers import example_run_args
from tests.test_cli import run


def _run(tmp_path: Path, name: str, data: Path) -> dict[str, str]:
    proc = run(*example_run_args(tmp_path, name), "--json", data_dir=data)
    assert proc.returncode == 0, proc.stderr
    outcome: dict[str, str] = json.loads(proc.stdout)
    return outcome


def _chat_folder(data: Path, run_id: str) -> Path:
    (run_dir,) = data.glob(f"chats/*/runs/{run_id}")
    return run_dir.parent.parent


def test_two_copies_two_folders_and_a_moved_file_keeps_its_own(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = _run(tmp_path, "a", data)
    copy = _run(tmp_path, "b", data)
    a_folder, b_folder = _chat_folder(data, first["runId"]), _chat_folder(data, copy["runId"])
    assert a_folder != b_folder
    assert (a_folder / "persist").resolve() != (b_folder / "persist").resolve()

    moved = tmp_path / "moved"
    moved.mkdir()
    (tmp_path / "b.jsonl").rename(moved / "b.jsonl")
    args = example_run_args(tmp_path, "unused")
    args[1] = str(moved / "b.jsonl")
    again = run(*args, "--json", data_dir=data)
    assert again.returncode == 0, again.stderr
    assert _chat_folder(data, json.loads(again.stdout)["runId"]) == b_folder
    assert _chat_folder(data, _run(tmp_path, "a", data)["runId"]) == a_folder

    shown = run("runs", "show", copy["runId"], data_dir=data)
    assert f"chat file: {(tmp_path / 'b.jsonl').resolve()}" in shown.stdout, shown.stdout
