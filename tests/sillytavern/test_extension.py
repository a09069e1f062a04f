"""The SillyTavern extension in real SillyTavern: its tools lent to the agent, its runs shown.

SillyTavern 1.19.0 runs with the extension installed by `tavern-agent
sillytavern install` and a community-style extension (``dice_extension``)
that registers function tools through ``getContext().registerFunctionTool``.
An agent run answering a request through the endpoint (a scripted model over
HTTP) calls them: the action runs in the SillyTavern page, its result is in
the run's journal, and the extension's panel shows the run's calls. The same
with SillyTavern 1.12.6, whose tools are announced and called through events.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from tests.endpoint.helpers import MESSAGES, REPLY, Served, serve_endpoint
from tests.ext_helpers import CHROMIUM, CHROMIUM_ARGS
from tests.runtime.openai_server import OpenAIServer
from tests.sillytavern.helpers import LEGACY_DIR, ROOT, SillyTavern, sillytavern

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.sillytavern]

DICE = Path(__file__).parent / "dice_extension"
DICE_1_12 = Path(__file__).parent / "dice_extension_1_12"
SCREENSHOT = ROOT / "docs" / "sillytavern-panel.png"
TOOLS = ["roll_dice", "boom", "fading", "secret_roll", "offline_oracle"]
PROFILE = {
    "id": "st-writer",
    "name": "Writer with SillyTavern's tools",
    "tools": {
        "allow": [
            "builtin:workspace.write_file",
            "builtin:workspace.commit",
            "builtin:workspace.finish",
            *(f"extension/sillytavern:{name}" for name in TOOLS),
        ]
    },
}
TURNS = [
    [("roll_dice", {"sides": 20}), ("boom", {})],
    [("fading", {}), ("workspace_write_file", {"file_path": "output/main.md", "content": REPLY})],
    [("workspace_commit", {"reason": "the reply"})],
    [("workspace_finish", {})],
]


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            await b.close()


def host_of(served: Served) -> tuple[str, str]:
    """The extension host's URL and token, from serve's banner."""
    text = "".join(served.banner)
    url = re.search(r"extension host: (\S+)", text)
    token = re.search(r"^token: (\S+)", text, re.M)
    assert url and token, text
    return url.group(1), token.group(1)


def install(st: SillyTavern, community: Path) -> None:
    """The extension, by `tavern-agent sillytavern install`, and a community extension."""
    command = [sys.executable, "-m", "tavern_agent", "sillytavern", "install"]
    command += ["--st-dir", str(st.st_dir), "--data-root", str(st.data_root)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    assert (st.extensions / "tavern-agent" / "manifest.json").is_file(), done.stdout
    shutil.copytree(community, st.extensions / "dice-test")


async def open_panel(page: Page, st: SillyTavern) -> None:
    """SillyTavern's UI with the Extensions drawer and tavern-agent's panel open."""
    await page.goto(st.url + "/")
    await page.locator(".tavern-agent-settings").wait_for(state="attached", timeout=60_000)
    first_start = page.locator(".popup-button-ok:visible")  # the persona name, asked once
    await first_start.click()
    await page.click("#extensions-settings-button .drawer-toggle")
    await page.click(".tavern-agent-settings .inline-drawer-toggle")


async def connect(page: Page, served: Served) -> None:
    """Enter serve's URL, token and endpoint in the panel and connect."""
    host, token = host_of(served)
    await page.fill("#tavern_agent_url", host)
    await page.fill("#tavern_agent_token", token)
    await page.fill("#tavern_agent_endpoint", served.url.removesuffix("/v1"))
    await page.click("#tavern_agent_connect")
    state = page.locator("#tavern_agent_state")
    await expect(state).to_have_attribute("data-state", "connected")


def write_profile(data: Path, *names: str) -> None:
    profile = dict(PROFILE, tools={"allow": PROFILE["tools"]["allow"][:3] + [
        f"extension/sillytavern:{name}" for name in names
    ]})  # fmt: skip
    (data / "profiles").mkdir(parents=True)
    (data / "profiles" / "st-writer.json").write_text(json.dumps(profile))


def journal(data: Path) -> list[dict[str, Any]]:
    [path] = data.glob("chats/*/runs/*/events.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_sillytavern_tools_run_in_the_page_for_an_agent_run(
    tmp_path: Path, browser: Browser
) -> None:
    data = tmp_path / "data"
    write_profile(data, *TOOLS)
    with (
        sillytavern(tmp_path / "st", tmp_path / "sillytavern.log") as st,
        OpenAIServer(TURNS) as upstream,
    ):
        install(st, DICE)
        with serve_endpoint(data, upstream.base_url, "--allow-origin", st.url) as served:
            page = await browser.new_page(viewport={"width": 1400, "height": 1000})
            await open_panel(page, st)
            await connect(page, served)
            # Stealth tools and those whose shouldRegister() says no stay out.
            lent = page.locator("#tavern_agent_tools")
            await expect(lent).to_have_text("Lent to the agent: boom, fading, roll_dice")

            # The next roll waits in the page until the test lets it go (not awaited here).
            await page.evaluate(
                "void (diceTest.held = new Promise((go) => { diceTest.release = go; }))"
            )
            body = {"model": "tavern-agent/st-writer", "messages": MESSAGES}
            headers = {"authorization": f"Bearer {served.key}"}
            async with httpx.AsyncClient(timeout=60) as client:
                answer = asyncio.ensure_future(
                    client.post(f"{served.url}/chat/completions", json=body, headers=headers)
                )
                # The roll runs in the page: SillyTavern's own ToolManager called its action.
                await expect(page.locator("#dice_test_log")).to_have_text("rolled d20: 4")
                await page.evaluate("SillyTavern.getContext().unregisterFunctionTool('fading')")
                await page.evaluate("diceTest.release()")
                response = await answer
            assert response.status_code == 200, response.text
            assert response.json()["choices"][0]["message"]["content"] == REPLY
            assert await page.evaluate("diceTest.rolls") == [{"sides": 20, "value": 4}]
            assert await page.evaluate("diceTest.fadingRan") is False

            events = journal(data)
            [started] = [e["payload"] for e in events if e["type"] == "invocation_started"]
            offered = set(started["tools"])
            assert {"roll_dice", "boom", "fading"} <= offered
            assert not offered & {"secret_roll", "offline_oracle"}
            results = {
                e["payload"]["result"]["callId"]: e["payload"]["result"]
                for e in events
                if e["type"] == "tool_result_stored"
            }
            rolled, boom, fading = results["call_0_0"], results["call_0_1"], results["call_1_0"]
            assert not rolled["isError"] and rolled["structured"] == {"sides": 20, "value": 4}
            assert boom["isError"] and boom["errorCode"] == "extension.tool_error"
            assert "the dice tower fell over" in boom["content"]
            assert fading["isError"] and fading["errorCode"] == "tool.unavailable"
            assert "no action was taken" in fading["content"]
            assert events[-1]["type"] == "run_completed"

            # The panel followed the run: its rounds, calls with outcomes, the commit.
            run_id = events[0]["runId"]
            view = page.locator("#tavern_agent_run")
            await expect(view).to_have_attribute("data-run", run_id)
            await expect(view.locator("li.end")).to_have_text("completed")
            calls = await view.locator("li.call").all_inner_texts()
            assert calls[0].startswith("✓ roll_dice")
            assert calls[1].startswith("✗ boom: extension.tool_error")
            assert calls[2].startswith("✗ fading: tool.unavailable")
            await expect(view.locator("li.commit").first).to_be_visible()
            link = await view.locator("a").get_attribute("href")
            assert link is not None and link.startswith(f"{served.url[:-3]}/runs/{run_id}?key=")

            panel = page.locator(".tavern-agent-settings")
            await page.evaluate("toastr.remove()")  # the first start's notices
            shot = tmp_path / "panel.png"
            await panel.screenshot(path=str(shot))
            assert shot.stat().st_size > 0
            if os.environ.get("TAVERN_AGENT_SCREENSHOTS"):  # refresh the README's picture
                shutil.copyfile(shot, SCREENSHOT)


async def test_sillytavern_1_12_tools_announced_by_events_run_for_an_agent_run(
    tmp_path: Path, browser: Browser
) -> None:
    """1.12.6 has no ToolManager: its tools are announced and called through events."""
    data = tmp_path / "data"
    write_profile(data, "roll_dice", "boom")
    turns = [
        [("roll_dice", {"sides": 6}), ("boom", {})],
        [("workspace_write_file", {"file_path": "output/main.md", "content": REPLY})],
        [("workspace_commit", {"reason": "the reply"})],
        [("workspace_finish", {})],
    ]
    with (
        sillytavern(tmp_path / "st", tmp_path / "sillytavern.log", LEGACY_DIR) as st,
        OpenAIServer(turns) as upstream,
    ):
        assert st.version == "1.12.6"
        install(st, DICE_1_12)
        with serve_endpoint(data, upstream.base_url, "--allow-origin", st.url) as served:
            page = await browser.new_page(viewport={"width": 1400, "height": 1000})
            await open_panel(page, st)
            await connect(page, served)
            lent = page.locator("#tavern_agent_tools")
            await expect(lent).to_have_text("Lent to the agent: boom, roll_dice")
            # An endpoint on another host never gets the token: the runs are not shown.
            requested: list[str] = []
            page.on("request", lambda request: requested.append(request.url))
            await page.fill("#tavern_agent_endpoint", "http://agent.example:8788/v1")
            note = page.locator("#tavern_agent_runs_note")
            await expect(note).to_contain_text("is not on serve's host")
            await page.fill("#tavern_agent_endpoint", served.url)
            await expect(note).to_have_text("")
            body = {"model": "tavern-agent/st-writer", "messages": MESSAGES}
            headers = {"authorization": f"Bearer {served.key}"}
            async with httpx.AsyncClient(timeout=60) as client:
                url = f"{served.url}/chat/completions"
                response = await client.post(url, json=body, headers=headers)
            assert response.status_code == 200, response.text
            assert await page.evaluate("diceTest.rolls") == [{"sides": 6}]
            await expect(page.locator("#dice_test_log")).to_have_text("rolled d6")

            events = journal(data)
            results = [e["payload"]["result"] for e in events if e["type"] == "tool_result_stored"]
            rolled, boom = results[0], results[1]
            assert not rolled["isError"] and "ran" in rolled["content"]
            assert boom["isError"] and boom["errorCode"] == "extension.tool_error"
            assert "the dice tower fell over" in boom["content"]
            view = page.locator("#tavern_agent_run")
            await expect(view.locator("li.end")).to_have_text("completed")
            calls = await view.locator("li.call").all_inner_texts()
            assert calls[0].startswith("✓ roll_dice") and calls[1].startswith("✗ boom")
            assert not [url for url in requested if "agent.example" in url]
