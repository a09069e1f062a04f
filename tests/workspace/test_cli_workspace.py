"""The file tools through `tavern-agent call`, as a user tries them by hand."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tavern_agent.cli import cli

from .test_paths import FORBIDDEN


def call(data: Path, ws: Path, name: str, args: dict[str, object] | str) -> dict[str, object]:
    raw = args if isinstance(args, str) else json.dumps(args)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tavern_agent",
            "--data-dir",
            str(data),
            "call",
            name,
            raw,
            "--workspace",
            str(ws),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def call_in_process(data: Path, ws: Path, name: str, args: dict[str, object]) -> dict[str, object]:
    """The same `call` command, run in this process (fast enough for many paths)."""
    argv = [
        "--data-dir",
        str(data),
        "call",
        name,
        json.dumps(args),
        "--workspace",
        str(ws),
        "--json",
    ]
    outcome = CliRunner().invoke(cli, argv, catch_exceptions=False)
    assert outcome.exit_code == 0, outcome.output
    result: dict[str, object] = json.loads(outcome.stdout)
    return result


def tree_hash(folder: Path) -> str:
    """A hash of every name, link target and file content below ``folder``."""
    h = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(folder)):
        dirs.sort()
        for name in sorted(files + dirs):
            p = Path(root) / name
            h.update(str(p.relative_to(folder)).encode("utf-8", "surrogateescape"))
            if p.is_symlink():
                h.update(os.readlink(p).encode())
            elif p.is_file():
                h.update(p.read_bytes())
    return h.hexdigest()


def test_round_trip_by_hand(tmp_path: Path) -> None:
    data, ws = tmp_path / "data", tmp_path / "ws"
    made = call(
        data,
        ws,
        "workspace_write_file",
        {"file_path": "output/main.md", "content": "Hi, dragon.\n"},
    )
    assert made["content"] == "Created output/main.md: now 12 chars, 1 lines."
    read = call(data, ws, "workspace_read_file", {"file_path": "output/main.md"})
    assert read["content"] == "output/main.md: lines 1-1 of 1 (12 chars)\n1\tHi, dragon."
    patched = call(
        data,
        ws,
        "workspace_apply_patch",
        {"file_path": "output/main.md", "old_string": "dragon", "new_string": "wyrm"},
    )
    assert patched["isError"] is False, patched
    again = call(data, ws, "workspace_read_file", {"file_path": "output/main.md"})
    assert "Hi, wyrm." in str(again["content"])


def test_replace_without_read_and_stale(tmp_path: Path) -> None:
    data, ws = tmp_path / "data", tmp_path / "ws"
    (ws / "output").mkdir(parents=True)
    (ws / "output/main.md").write_text("from the user")
    unread = call(data, ws, "workspace_write_file", {"file_path": "output/main.md", "content": "x"})
    assert unread["errorCode"] == "workspace.write_requires_read"
    call(data, ws, "workspace_read_file", {"file_path": "output/main.md"})
    (ws / "output/main.md").write_text("edited on disk after the read")
    stale = call(data, ws, "workspace_write_file", {"file_path": "output/main.md", "content": "x"})
    assert stale["errorCode"] == "workspace.write_stale_file"
    assert (ws / "output/main.md").read_text() == "edited on disk after the read"


def _at_once(
    data: Path, ws: Path, name: str, args: list[dict[str, object]]
) -> list[dict[str, Any]]:
    """One `call` process per argument set, all started before any is waited for."""
    base = [sys.executable, "-m", "tavern_agent", "--data-dir", str(data), "call", name]
    procs = [
        subprocess.Popen(
            [*base, json.dumps(a), "--workspace", str(ws), "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for a in args
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    return results


@pytest.mark.slow  # ten processes
@pytest.mark.parametrize("tool", ["workspace_write_file", "workspace_apply_patch"])
def test_one_winner_per_read_among_ten_processes(tmp_path: Path, tool: str) -> None:
    data, ws = tmp_path / "data", tmp_path / "ws"
    (ws / "output").mkdir(parents=True)
    (ws / "output/main.md").write_text("The tavern is quiet.\n")
    call(data, ws, "workspace_read_file", {"file_path": "output/main.md"})
    texts = [f"The tavern is loud, says writer {n}.\n" for n in range(10)]
    if tool == "workspace_write_file":
        args: list[dict[str, object]] = [
            {"file_path": "output/main.md", "content": t} for t in texts
        ]
        stale = "workspace.write_stale_file"
    else:
        args = [
            {"file_path": "output/main.md", "old_string": "quiet.", "new_string": t[14:-1]}
            for t in texts
        ]
        stale = "workspace.patch_stale_file"
    results = _at_once(data, ws, tool, args)
    won = [n for n, r in enumerate(results) if r["isError"] is False]
    assert len(won) == 1, results
    assert (ws / "output/main.md").read_text() == texts[won[0]]
    assert sorted(r.get("errorCode") for r in results if r["isError"]) == [stale] * 9
    # A call started after them goes on from the winner's write, as one invocation would.
    late = call(data, ws, "workspace_write_file", {"file_path": "output/main.md", "content": "x"})
    assert late["isError"] is False, late


@pytest.mark.parametrize(
    "tool", ["workspace_write_file", "workspace_read_file", "workspace_apply_patch"]
)
def test_forbidden_paths_touch_nothing_outside(tmp_path: Path, tool: str) -> None:
    data, ws = tmp_path / "data", tmp_path / "box" / "ws"
    (tmp_path / "box" / "neighbour").mkdir(parents=True)
    (tmp_path / "box" / "neighbour" / "x").write_text("keep")
    ws.mkdir()
    before = tree_hash(tmp_path / "box")
    for bad in FORBIDDEN:
        args = {"file_path": bad, "old_string": "keep", "new_string": "pwned"}
        if tool == "workspace_read_file":
            args = {"file_path": bad}
        elif tool == "workspace_write_file":
            args = {"file_path": bad, "content": "pwned"}
        result = call_in_process(data, ws, tool, args)
        assert result["errorCode"] == "workspace.invalid_path", (bad, result)
    # Only the workspace's own internal state may have appeared inside ws/.
    (ws / ".lock").unlink(missing_ok=True)
    for internal in ("checkpoints/cli-reads.json",):
        (ws / internal).unlink(missing_ok=True)
    if (ws / "checkpoints").exists():
        (ws / "checkpoints").rmdir()
    assert tree_hash(tmp_path / "box") == before
