"""One `tavern-agent run` that uses every tool source, killed and resumed.

A scripted model served over HTTP (SSE) drives a real `run` process that calls a
built-in tool, a tool of the npm MCP reference server `server-everything`, a
Python extension tool (`--ext tests.ext_module`) and a tool of a page open in
headless Chromium, connected to a real `tavern-agent serve` on the same data
root. The run is killed with SIGKILL after the MCP call and resumed.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import async_playwright

from tavern_agent.chat.formats import parse_chat
from tavern_agent.runtime.journal import read_events
from tests.chat.helpers import write_chat
from tests.ext_helpers import CHROMIUM, CHROMIUM_ARGS, serve
from tests.mcp_helpers import EVERYTHING
from tests.runtime.helpers import TEXTS
from tests.runtime.openai_server import OpenAIServer

pytestmark = [pytest.mark.slow, pytest.mark.mcp_peers, pytest.mark.browser]

REPO = Path(__file__).resolve().parents[1]
REPLY = "Seraphina wades in first, lantern high."
TURNS = [
    [("dice_roll", {"formula": "1d20+2"}), ("mcp__everything__echo", {"message": "ford"})],
    [("shout", {"text": "wade"}), ("echo", {"text": "lantern"})],
    [
        ("workspace_write_file", {"file_path": "output/main.md", "content": REPLY}),
        ("workspace_commit", {"reason": "the reply"}),
    ],
    [("workspace_finish", {})],
]
PROFILE = {
    "id": "all-sources",
    "name": "All sources",
    "tools": {
        "allow": [
            "builtin:dice.roll",
            "mcp/everything:echo",
            "extension/py-test:shout",
            "extension/page-test:echo",
            "builtin:workspace.write_file",
            "builtin:workspace.commit",
            "builtin:workspace.finish",
        ]
    },
}


def tavern(data: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "tavern_agent", "--data-dir", str(data), *args]


def cli(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        tavern(data, *args), capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    return done


def requested(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["payload"] for e in events if e["type"] == "tool_call_requested"]


def stored(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        e["payload"]["callId"]: e["payload"]["result"]
        for e in events
        if e["type"] == "tool_result_stored"
    }


async def test_a_run_calls_every_source_and_resumes_after_sigkill(tmp_path: Path) -> None:
    data = tmp_path / "data"
    chat = write_chat(tmp_path / "chat.jsonl", TEXTS)
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(PROFILE))
    cli(data, "mcp", "add", "everything", "--", "node", str(EVERYTHING), "stdio")
    cli(data, "mcp", "discover", "everything")
    cli(data, "mcp", "allow", "everything", "echo")

    with serve(data) as served, OpenAIServer(TURNS, pause_once_at=1) as model:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = await browser.new_page()
            await page.goto(served.page_url)
            answer = await page.evaluate(
                "([url, token]) => setup(url, token, ['echo'])", [served.ws_url, served.token]
            )
            assert answer == {"ids": ["extension/page-test:echo"]}

            run_args = ["--ext", "tests.ext_module", "run"]
            model_args = ["--model", "local", "--base-url", model.base_url]
            first = subprocess.Popen(
                tavern(data, *run_args, str(chat), "--profile", str(profile), *model_args),
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env={**os.environ, "OPENAI_API_KEY": "test"},
            )
            try:
                # Round 2 is requested only once round 1's results are stored.
                paused = await asyncio.to_thread(model.paused.wait, 90)
                assert paused, "the run never asked for round 2"
            finally:
                first.kill()
                first.wait(30)
                assert first.stderr is not None
                first.stderr.close()
            assert first.returncode == -9

            (listed,) = json.loads(cli(data, "runs", "list", "--json").stdout)
            run_dir = Path(listed["runDir"])
            before = read_events(run_dir / "events.jsonl")
            mcp_call = next(p for p in requested(before) if p["name"] == "mcp__everything__echo")
            assert stored(before)[mcp_call["callId"]]["content"] == "Echo: ford"
            assert "run_completed" not in {e["type"] for e in before}

            resumed = cli(data, *run_args, "--resume", listed["runId"], "--json")
            outcome = json.loads(resumed.stdout)
            await browser.close()

    assert outcome["status"] == "completed", outcome
    assert outcome["commits"] == 1 and outcome["committedMessage"] == REPLY
    events = read_events(run_dir / "events.jsonl")
    sources = {p["name"]: p["source"] for p in requested(events)}
    assert sources["dice_roll"] == "builtin"
    assert sources["mcp__everything__echo"] == "mcp server everything"
    assert sources["shout"] == "module tests.ext_module"
    assert sources["echo"].startswith(f"page {served.url}")
    results = stored(events)
    by_name = {p["name"]: results[p["callId"]] for p in requested(events)}
    assert by_name["shout"]["content"] == "WADE!"
    assert json.loads(by_name["echo"]["content"])["echoed"] == "lantern"
    assert not any(r["isError"] for r in results.values()), results
    # Exactly one commit reached the chat: the reply, once, after the three floors.
    messages = parse_chat(chat.read_bytes()).messages
    assert [m.mes for m in messages] == [*TEXTS, REPLY]
    assert sum(e["type"] == "commit_confirmed" for e in events) == 1
