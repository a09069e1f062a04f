"""A scripted model that only follows error texts can finish a long-file patch."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from tavern_agent.providers.gateway import ModelRequest
from tavern_agent.providers.transcript import ToolResultMessage
from tavern_agent.runtime.scripted import Turn, call, calls
from tests.runtime.helpers import COMMIT, FINISH, Harness, results, write

LONG = "scratch/long.md"
PATCH = (
    "workspace_apply_patch",
    {"file_path": LONG, "old_string": "line 2500\n", "new_string": "row 2500\n"},
)


def follow_the_last_error(request: ModelRequest) -> Turn:
    """Do what the last tool result says: the read call it names, as written."""
    last = [i for i in request.transcript.items if isinstance(i, ToolResultMessage)][-1]
    found = re.search(r"(workspace_read_file) (\{[^}]*\})", last.result.content)
    assert found is not None, last.result.content
    return call(found.group(1), json.loads(found.group(2)))


def test_long_file_patch_succeeds_on_the_second_try(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    run = harness.start()
    (run.workspace.root / "scratch").mkdir(parents=True, exist_ok=True)
    (run.workspace.root / LONG).write_text("".join(f"line {i}\n" for i in range(1, 3001)))
    script = [
        call("workspace_read_file", {"file_path": LONG}),  # lines 1-1200 only
        call(*PATCH),
        follow_the_last_error,
        call(*PATCH),
        calls(write("Patched."), COMMIT),
        calls(FINISH),
    ]
    engine = harness.engine(run, script)
    try:
        outcome = asyncio.run(engine.start())
    finally:
        engine.close()
    stored = results(run)
    assert stored[1]["errorCode"] == "workspace.patch_requires_full_read"
    assert stored[2]["isError"] is False and "lines 2495-2506 of 3000" in stored[2]["content"]
    assert stored[3]["isError"] is False
    assert "row 2500\n" in (run.workspace.root / LONG).read_text()
    assert outcome.status == "completed"
