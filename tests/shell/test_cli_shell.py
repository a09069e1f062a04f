"""The issue's "Done when" commands through `tavern-agent call workspace_shell`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def call(data: Path, ws: Path, name: str, args: dict[str, object]) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-m", "tavern_agent", "--data-dir", str(data), "call", name,
         json.dumps(args), "--workspace", str(ws), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def shell_stdout(result: dict[str, object]) -> str:
    content = str(result["content"])
    return content.split("stdout:", 1)[1].split("\nstderr:", 1)[0].strip()


def test_done_when_commands(tmp_path: Path) -> None:
    data, ws = tmp_path / "data", tmp_path / "ws"
    (ws / "output").mkdir(parents=True)
    (ws / "output" / "main.md").write_text("# The Rusty Flagon\nA tavern.\n")

    r = call(data, ws, "workspace_shell", {"command": """echo '{"a":[1,2]}' | jq '.a|length'"""})
    assert shell_stdout(r) == "2" and r["structured"]["exit_code"] == 0  # type: ignore[index]

    py = "python3 -c \"print(open('/output/main.md').read().splitlines()[0].upper())\""
    assert shell_stdout(call(data, ws, "workspace_shell", {"command": py})) == "# THE RUSTY FLAGON"

    js = (
        "node -e \"const m = new Map([['b', 2], ['a', 1], ['c', 3]]); "
        "console.log([...m.entries()].sort((x, y) => x[1] - y[1]).map(e => e[0]).join(''))\""
    )
    assert shell_stdout(call(data, ws, "workspace_shell", {"command": js})) == "abc"

    note = {"file_path": "scratch/notes.md", "content": "x"}
    wrote = call(data, ws, "workspace_write_file", note)
    assert not wrote["isError"], wrote
    r = call(data, ws, "workspace_shell", {"command": "cd /scratch && ls"})
    assert shell_stdout(r) == "notes.md"

    r = call(data, ws, "workspace_shell", {"command": "exit 4"})
    assert r["isError"] and r["errorCode"] == "workspace.shell_exit"
