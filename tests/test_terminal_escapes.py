"""Control sequences in model text, files and names are shown, never executed.

``ESC[2J`` would clear the user's screen, OSC 8 forge a link, U+009B start a
CSI on 8-bit terminals, U+202E reverse the rest of a line. Every human-facing
print shows them as escapes; ``--json`` output keeps the exact text.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.runtime.openai_server import OpenAIServer

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
HOSTILE = "Calm \x1b[2J\x1b]8;;http://evil.example\x07click\x1b]8;;\x07 \x9b31m red \u202eevil\r ok"
RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\r")


def cli(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tavern_agent", "--data-dir", str(data), *args]
    env = os.environ | {"PYTHONIOENCODING": "utf-8"}
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)


def assert_shown_not_executed(text: str) -> None:
    for char in RAW:
        assert char not in text, repr(char)
    assert "\\x1b[2J" in text and "\\x9b31m" in text and "\\u202e" in text


def test_call_shows_file_content_with_escapes_and_json_keeps_it_exact(tmp_path: Path) -> None:
    args = json.dumps({"file_path": "scratch/x.md", "content": HOSTILE})
    assert cli(tmp_path, "call", "workspace_write_file", args).returncode == 0
    read = json.dumps({"file_path": "scratch/x.md"})
    shown = cli(tmp_path, "call", "workspace_read_file", read)
    assert shown.returncode == 0, shown.stderr
    assert_shown_not_executed(shown.stdout)
    exact = cli(tmp_path, "call", "workspace_read_file", read, "--json")
    assert HOSTILE.replace("\r", "") in json.loads(exact.stdout)["content"].replace("\r", "")


def test_run_progress_message_and_runs_show_make_escapes_visible(tmp_path: Path) -> None:
    chat = tmp_path / "chat.jsonl"
    shutil.copyfile(EXAMPLES / "chat.jsonl", chat)
    data = tmp_path / "data"
    turns = [
        [("workspace_write_file", {"file_path": "output/main.md", "content": HOSTILE})],
        [("workspace_read_file", {"file_path": "output/main.md"})],
        [("workspace_commit", {"reason": HOSTILE})],
        [("workspace_finish", {})],
    ]
    with OpenAIServer(turns) as server:
        base = ["run", str(chat), "--model", "m", "--base-url", server.base_url]
        proc = cli(data, *base)
    assert proc.returncode == 0, proc.stderr
    assert "Committed message" in proc.stdout
    assert_shown_not_executed(proc.stdout)
    run_id = json.loads(cli(data, "runs", "list", "--json").stdout)[0]["runId"]
    shown = cli(data, "runs", "show", run_id)
    assert shown.returncode == 0 and "\\x1b[2J\\x1b]8;;http://evil.example\\x07" in shown.stdout
    for char in RAW:
        assert char not in shown.stdout, repr(char)
    events = json.loads(cli(data, "runs", "show", run_id, "--json").stdout)
    read = [e["payload"]["result"] for e in events if e["type"] == "tool_result_stored"][1]
    assert HOSTILE in read["content"]  # the journal and --json keep the exact text
    assert json.loads(chat.read_text().splitlines()[-1])["mes"] == HOSTILE


def test_visible_keeps_lines_and_tabs_and_escapes_what_a_terminal_would_act_on() -> None:
    from tavern_agent.terminal import visible

    assert visible("a\tb\nc") == "a\tb\nc"
    assert visible("\x1b[31m\x00\x7f\u2066\ud800") == "\\x1b[31m\\x00\\x7f\\u2066\\ud800"
    assert visible("Ψ — ✓") == "Ψ — ✓"
