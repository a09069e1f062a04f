"""The run page of `serve`: a running run followed live, a finished one rendered, and its guard."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from tests.endpoint.helpers import MESSAGES, REPLY, Served, serve_endpoint
from tests.ext_helpers import CHROMIUM, CHROMIUM_ARGS
from tests.runtime.openai_server import OpenAIServer

pytestmark = [pytest.mark.slow, pytest.mark.browser]

PROFILE = {
    "id": "holder",
    "name": "Holder",
    "tools": {
        "allow": [
            "builtin:chat.read_messages",
            "builtin:workspace.write_file",
            "builtin:workspace.commit",
            "builtin:workspace.finish",
            "extension/hold-test:hold",
        ]
    },
}


def turns(release: Path) -> list[list[tuple[str, dict[str, Any]]]]:
    return [
        [
            ("chat_read_messages", {"floors": [{"floor": 0}]}),
            ("workspace_write_file", {"file_path": "output/main.md", "content": REPLY}),
            ("hold", {"path": str(release)}),
        ],
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


def base(served: Served) -> str:
    return served.url.removesuffix("/v1")


async def wait_for_run(client: httpx.AsyncClient, served: Served) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {served.key}"}
    for _ in range(300):
        runs = (await client.get(f"{base(served)}/runs.json", headers=headers)).json()
        if runs:
            return dict(runs[0])
        await asyncio.sleep(0.1)
    raise AssertionError("no run appeared")


async def timeline(page: Page) -> list[str]:
    items = page.locator("#timeline > li")
    return list(await items.evaluate_all("n => n.map(e => e.dataset.type)"))


async def test_the_run_page_follows_a_running_run_then_shows_it_finished(
    tmp_path: Path, browser: Browser
) -> None:
    data = tmp_path / "data"
    (data / "profiles").mkdir(parents=True)
    (data / "profiles" / "holder.json").write_text(json.dumps(PROFILE))
    release = tmp_path / "release"
    body = {"model": "tavern-agent/holder", "messages": MESSAGES}
    with (
        OpenAIServer(turns(release)) as upstream,
        serve_endpoint(data, upstream.base_url, ext="tests.endpoint.hold_tool") as served,
    ):
        token = next(m.group(1) for line in served.banner if (m := re.match(r"token: (\S+)", line)))
        async with httpx.AsyncClient(timeout=30) as client:
            headers = {"authorization": f"Bearer {served.key}"}
            answer = asyncio.ensure_future(
                client.post(f"{served.url}/chat/completions", json=body, headers=headers)
            )
            summary = await wait_for_run(client, served)
            assert f"run page: {base(served)}/runs " in "".join(served.banner)
            run_id = summary["runId"]

            context = await browser.new_context()
            page = await context.new_page()
            # The host's token opens the page as well as the key; the key leaves the address.
            await page.goto(f"{base(served)}/runs/{run_id}?key={token}")
            assert page.url == f"{base(served)}/runs/{run_id}"
            calls = page.locator("li.tool_call_requested")
            await expect(calls).to_have_count(3)  # the run is inside the held call
            await expect(page.locator("#status")).to_have_text("running")
            assert "tool_result_stored" in await timeline(page)
            await expect(calls.first.locator(".detail")).to_contain_text("chat_read_messages")
            assert "commit_confirmed" not in await timeline(page)

            release.touch()
            await expect(page.locator("#status")).to_have_text("completed", timeout=20_000)
            await expect(page.locator("li.commit_confirmed").first).to_be_visible()
            response = await answer
            assert response.status_code == 200
            assert response.json()["choices"][0]["message"]["content"] == REPLY

            # Opened after the end, the page renders the whole run at once.
            done = await context.new_page()
            await done.goto(f"{base(served)}/runs/{run_id}")  # the session cookie opens it
            await expect(done.locator("body[data-ended=true]")).to_have_count(1)
            kinds = await timeline(done)
            [journal] = data.glob("chats/*/runs/*/events.jsonl")
            assert kinds == [json.loads(line)["type"] for line in journal.read_text().splitlines()]
            assert kinds[-1] == "run_completed" and kinds.count("tool_call_requested") == 5
            assert await timeline(page) == kinds  # the followed page saw every event once
            written = done.locator("li.tool_call_requested").nth(1)
            await written.locator("summary").click()
            await expect(written.locator("pre")).to_contain_text(REPLY)  # the call's arguments
            held = done.locator("li.tool_result_stored").nth(2)
            await expect(held.locator("pre").first).to_have_text("released")
            text = await done.content() + await page.content()
            assert served.key not in text and token not in text

            listing = await context.new_page()
            await listing.goto(f"{base(served)}/runs")
            row = listing.locator("tr.completed")
            await expect(row).to_contain_text(run_id)
            await row.locator("a").click()
            await expect(listing.locator("h1")).to_have_text(run_id)


async def test_the_run_page_is_refused_without_a_key_or_from_another_origin(
    tmp_path: Path, browser: Browser
) -> None:
    data = tmp_path / "data"
    with (
        OpenAIServer([[("workspace_finish", {})]]) as upstream,
        serve_endpoint(data, upstream.base_url) as served,
    ):
        root = base(served)
        async with httpx.AsyncClient(timeout=30) as client:
            headers = {"authorization": f"Bearer {served.key}"}
            body = {"messages": MESSAGES}
            await client.post(f"{served.url}/chat/completions", json=body, headers=headers)
            [summary] = (await client.get(f"{root}/runs.json", headers=headers)).json()
            run = f"{root}/runs/{summary['runId']}"
            for path in ("/runs", "/runs.json", "/runs/assets/run.js"):
                assert (await client.get(root + path)).status_code == 401
            for url in (run, f"{run}/events", f"{run}?key=wrong", f"{run}?key=undefined"):
                assert (await client.get(url)).status_code == 401, url
            wrong = {"authorization": "Bearer wrong"}
            assert (await client.get(f"{run}/events", headers=wrong)).status_code == 401
            assert (await client.get(f"{run}/events", headers=headers)).status_code == 200
            foreign = headers | {"origin": "http://evil.example"}
            refused = await client.get(run, headers=foreign)
            assert refused.status_code == 403 and served.key not in refused.text

        page = await browser.new_page()
        await page.goto(f"{root}/runs")
        assert "needs the endpoint key" in await page.inner_text("body")
        # A page of another origin that knows the key still cannot read the run.
        other = await browser.new_page()
        await other.goto(f"{root.replace('127.0.0.1', 'localhost')}/runs?key={served.key}")
        read = await other.evaluate(
            """async ([url, key]) => {
                 try { const r = await fetch(url, {headers: {Authorization: "Bearer " + key}});
                       return String(r.status); }
                 catch (e) { return String(e); } }""",
            [f"{run}/events", served.key],
        )
        assert "Failed to fetch" in read
