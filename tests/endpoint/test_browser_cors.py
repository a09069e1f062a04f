"""A Chromium page of another origin streams a reply with fetch, through the CORS allow list."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, async_playwright

from tests.endpoint.helpers import MESSAGES, REPLY, TURNS, serve_endpoint
from tests.ext_helpers import CHROMIUM, CHROMIUM_ARGS
from tests.runtime.loopback import LoopbackServer
from tests.runtime.openai_server import OpenAIServer

pytestmark = [pytest.mark.slow, pytest.mark.browser]

# Streams a completion with fetch and reads the whole body, as a browser frontend does.
ASK = """async ([url, key, messages]) => {
  try {
    const response = await fetch(url, {
      method: "POST",
      headers: {"Authorization": "Bearer " + key, "Content-Type": "application/json"},
      body: JSON.stringify({model: "tavern-agent/default-writer", messages, stream: true}),
    });
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let text = "";
    for (;;) {
      const {done, value} = await reader.read();
      if (done) break;
      text += decoder.decode(value, {stream: true});
    }
    return {status: response.status, run: response.headers.get("x-tavern-agent-run"), text};
  } catch (error) {
    return {error: String(error)};
  }
}"""


class BlankPage(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_GET(self) -> None:
        body = b"<!doctype html><title>frontend</title>"
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            await b.close()


def events(text: str) -> list[Any]:
    return [
        json.loads(line[6:]) if line[6:] != "[DONE]" else "[DONE]"
        for line in text.splitlines()
        if line.startswith("data: ")
    ]


async def test_a_page_on_the_allow_list_streams_and_another_origin_is_refused(
    tmp_path: Path, browser: Browser
) -> None:
    with LoopbackServer(BlankPage) as site, OpenAIServer(TURNS) as upstream:
        allowed = site.origin  # http://127.0.0.1:<port>
        other = allowed.replace("127.0.0.1", "localhost")  # same page, another origin
        with serve_endpoint(tmp_path / "data", upstream.base_url, "--allow-origin", allowed) as s:
            url = f"{s.url}/chat/completions"
            page = await browser.new_page()
            await page.goto(allowed + "/")
            answer = await page.evaluate(ASK, [url, s.key, MESSAGES])
            assert answer.get("status") == 200, answer
            assert answer["run"]  # the exposed header is readable from the page
            stream = events(answer["text"])
            assert stream[-1] == "[DONE]"
            deltas = [e["choices"][0]["delta"] for e in stream[:-1]]
            progress = [d["reasoning_content"] for d in deltas if "reasoning_content" in d]
            content = "".join(d.get("content") or "" for d in deltas)
            assert len(progress) == 4 and content == REPLY

            runs_before = len(list(s.data_dir.glob("chats/*/runs/*/run.json")))
            foreign = await browser.new_page()
            await foreign.goto(other + "/")
            refused = await foreign.evaluate(ASK, [url, s.key, MESSAGES])
            assert "error" in refused and "Failed to fetch" in refused["error"]
            assert len(list(s.data_dir.glob("chats/*/runs/*/run.json"))) == runs_before
