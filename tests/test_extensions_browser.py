"""Web extension tools in a real browser: `tavern-agent serve`, headless Chromium, the gate."""

from __future__ import annotations

import asyncio
import http.server
import json
import stat
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, async_playwright
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.typing import Origin, Subprotocol

from tavern_agent.assembly import Assembly
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.ids import ToolId
from tavern_agent.core.profile import Profile
from tavern_agent.core.results import AgentToolResult
from tavern_agent.extensions import ExtensionRegistry, RemoteExtensionTools
from tavern_agent.extensions.remote import CombinedExtensionTools
from tavern_agent.tools.gate import ToolRequestGate

from .conftest import make_gate
from .ext_helpers import CHROMIUM, CHROMIUM_ARGS, PAGES, Served, free_port, serve

pytestmark = [pytest.mark.slow, pytest.mark.browser]

ECHO = ToolId.extension("page-test", "echo")
SILENT = ToolId.extension("page-test", "silent")
CALL_TIMEOUT = 2.0


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with serve(tmp_path, call_timeout=CALL_TIMEOUT) as s:
        yield s


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            await b.close()


@pytest.fixture
async def remote(served: Served) -> AsyncIterator[RemoteExtensionTools]:
    r = await RemoteExtensionTools.connect(served.url, served.token)
    try:
        yield r
    finally:
        await r.aclose()


async def open_page(browser: Browser, served: Served, *tools: str) -> tuple[Page, dict[str, Any]]:
    page = await browser.new_page()
    await page.goto(served.page_url)
    answer = await page.evaluate(
        "([url, token, tools]) => setup(url, token, tools)", [served.ws_url, served.token, tools]
    )
    return page, answer


async def until(check: Callable[[], Any], what: str) -> None:
    """Wait for a condition the host reports asynchronously (bounded, not timed)."""
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never happened: {what}")


def gate_for(extensions: Any) -> ToolRequestGate:
    assembly = Assembly(Path("/nonexistent-data-root"), extensions=extensions)
    profile = Profile.allowing([d.tool_id for d in extensions.catalog(Scene.CHAT)])
    return make_gate(assembly, profile)


async def call(
    gate: ToolRequestGate, name: str, raw: str, cancelled: asyncio.Event | None = None
) -> AgentToolResult:
    executed = await gate.handle(ToolCall(f"call_{name}", name, raw), round=1, cancelled=cancelled)
    return executed.result


async def test_page_tools_are_called_through_the_gate(
    served: Served, browser: Browser, remote: RemoteExtensionTools
) -> None:
    page, answer = await open_page(browser, served, "echo", "silent", "fails")
    assert answer == {"ids": [str(ECHO), str(SILENT), "extension/page-test:fails"]}
    # Each registration updates the catalog on its own: wait for the last one.
    await until(lambda: len(remote.tools) == 3, "the catalog reaches the runtime")
    gate = gate_for(remote)
    assert gate.snapshot.model_names == ["echo", "fails", "silent"]

    result = await call(gate, "echo", '{"text": "hello"}')
    assert not result.is_error, result.content
    assert result.structured == {
        "echoed": "hello", "runId": "run_test", "callId": "call_echo", "target": "chat"
    }  # fmt: skip
    assert json.loads(result.content)["echoed"] == "hello"

    bad = await call(gate, "echo", '{"text": 1}')
    assert bad.error_code is ErrorCode.TOOL_INVALID_ARGUMENTS

    failed = await call(gate, "fails", "{}")
    assert failed.error_code is ErrorCode.EXTENSION_TOOL_ERROR
    assert failed.content == (
        "fails failed: the page says no. Try other arguments, or go on without it."
    )
    assert failed.structured["details"]["error"]["message"] == "the page says no"

    # A tool that never answers times out; its signal aborts; the late receipt is ignored.
    timed_out = await call(gate, "silent", "{}")
    assert timed_out.error_code is ErrorCode.EXTENSION_TOOL_TIMEOUT
    assert "may have run" in timed_out.content and "Check the current state" in timed_out.content
    # The abort reaches the page on its own message; wait for it before looking.
    await page.wait_for_function("() => aborted.length > 0")
    assert await page.evaluate("aborted") == [["call_silent", "timeout"]]
    again = await call(gate, "echo", '{"text": "still here"}')
    assert again.structured["echoed"] == "still here"  # the connection survived the late reply


async def test_a_tool_its_page_withdrew_answers_unavailable_no_action_taken(
    served: Served, browser: Browser, remote: RemoteExtensionTools
) -> None:
    await open_page(browser, served, "withdrawn")
    await until(lambda: len(remote.tools) == 1, "the tool reaches the runtime")
    result = await call(gate_for(remote), "withdrawn", "{}")
    assert result.error_code is ErrorCode.TOOL_UNAVAILABLE
    assert result.content == "withdrawn is unavailable (removed or disabled); no action was taken."


async def test_cancel_aborts_the_signal_and_reload_disconnects(
    served: Served, browser: Browser, remote: RemoteExtensionTools
) -> None:
    page, _ = await open_page(browser, served, "echo", "silent")
    await until(lambda: SILENT in remote.tools, "tools registered")
    gate = gate_for(remote)

    cancelled = asyncio.Event()
    running = asyncio.ensure_future(call(gate, "silent", "{}", cancelled))
    await until_page(page, "started.length === 1")
    cancelled.set()
    result = await running
    assert result.error_code is ErrorCode.EXTENSION_TOOL_CANCELLED
    await page.wait_for_function("() => aborted.length > 0")
    assert await page.evaluate("aborted") == [["call_silent", "cancelled"]]

    # The page goes away mid-call: the outcome is unknown; its tools are gone.
    running = asyncio.ensure_future(call(gate, "silent", "{}"))
    await until_page(page, "started.length === 2")
    await page.reload()
    result = await running
    assert result.error_code is ErrorCode.EXTENSION_TOOL_DISCONNECTED
    assert "may have run" in result.content
    await until(lambda: not remote.tools, "the reloaded page's tools vanish")
    gone = await call(gate, "echo", '{"text": "x"}')
    assert gone.error_code is ErrorCode.TOOL_UNAVAILABLE
    assert "no action was taken" in gone.content


async def until_page(page: Page, condition: str) -> None:
    await page.wait_for_function(f"() => window.started && {condition}")


async def test_second_page_with_same_tool_id_is_refused(
    served: Served, browser: Browser, remote: RemoteExtensionTools
) -> None:
    first, _ = await open_page(browser, served, "echo")
    _, answer = await open_page(browser, served, "silent", "echo")
    assert answer["error"] == "extension.tool_already_registered"
    assert "extension/page-test:echo is registered already" in answer["message"]
    assert answer["ids"] == [str(SILENT)]
    await until(lambda: SILENT in remote.tools, "second page's other tool listed")
    assert remote.origin(ECHO) != remote.origin(SILENT)
    gate = gate_for(remote)
    result = await call(gate, "echo", '{"text": "first"}')
    assert result.structured["echoed"] == "first"

    # The owner switches it off: the old snapshot's call is refused, no action taken.
    await first.evaluate("agent.tools.setEnabled('extension/page-test:echo', false)")
    await until(lambda: not remote.tools[ECHO].enabled, "echo disabled")
    off = await call(gate, "echo", '{"text": "again"}')
    assert off.error_code is ErrorCode.TOOL_UNAVAILABLE
    assert (
        off.content
        == "echo is unavailable (it has been disabled); no action was taken. Go on without it."
    )


async def test_refused_without_token_or_from_a_foreign_origin(
    served: Served, browser: Browser, tmp_path: Path
) -> None:
    page = await browser.new_page()
    await page.goto(served.page_url)
    wrong = await page.evaluate("([url]) => setup(url, 'not-the-token', ['echo'])", [served.ws_url])
    assert wrong == {"error": "extension.host_unavailable"}

    # The same page served from another origin, with the right token.
    with foreign_site(served) as foreign_url:
        page = await browser.new_page()
        await page.goto(foreign_url)
        answer = await page.evaluate(
            "([url, token]) => setup(url, token, ['echo'])", [served.ws_url, served.token]
        )
    assert answer == {"error": "extension.host_unavailable"}

    # Outside a browser: the handshake is refused before any message is read.
    proto = [Subprotocol("tavern-agent.v1")]
    with pytest.raises(InvalidStatus) as no_token:
        await connect(served.ws_url, subprotocols=proto, origin=None)
    assert no_token.value.response.status_code == 401
    good = [*proto, Subprotocol("token." + served.token)]
    with pytest.raises(InvalidStatus) as foreign:
        await connect(served.ws_url, subprotocols=good, origin=origin("http://evil.example"))
    assert foreign.value.response.status_code == 403
    runtime = served.url.replace("http://", "ws://") + "/ext/runtime"
    with pytest.raises(InvalidStatus) as page_as_runtime:
        await connect(runtime, subprotocols=good, origin=origin(served.url))
    assert page_as_runtime.value.response.status_code == 403

    # The token file is owner-only.
    mode = stat.S_IMODE((served.data_dir / "extensions" / "token").stat().st_mode)
    assert mode == 0o600
    assert (served.data_dir / "extensions" / "token").read_text().strip() == served.token


def origin(url: str) -> Origin:
    return Origin(url)


@contextmanager
def foreign_site(served: Served) -> Iterator[str]:
    """The test page on another origin (another port), loading the host's client script."""
    html = (
        (PAGES / "tools.html")
        .read_text()
        .replace('src="/ext/tavern-agent.js"', f'src="{served.url}/ext/tavern-agent.js"')
    )
    body = html.encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/tools.html"
    finally:
        server.shutdown()
        server.server_close()


async def test_malformed_or_oversized_message_closes_only_that_connection(
    served: Served, browser: Browser, remote: RemoteExtensionTools
) -> None:
    await open_page(browser, served, "echo")
    await until(lambda: ECHO in remote.tools, "echo listed")
    protocols = [Subprotocol("tavern-agent.v1"), Subprotocol("token." + served.token)]
    for bad in ("not json", "[1, 2]", json.dumps({"type": "register", "id": 1}), "x" * 2_000_000):
        async with connect(
            served.ws_url, subprotocols=protocols, origin=origin(served.url), max_size=None
        ) as ws:
            await ws.send(bad)
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
            assert closed.value.rcvd is not None
            assert closed.value.rcvd.code in (1008, 1009)
    result = await call(gate_for(remote), "echo", '{"text": "unharmed"}')
    assert result.structured["echoed"] == "unharmed"


def cli(served: Served, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tavern_agent", "--data-dir", str(served.data_dir), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_cli_lists_and_calls_page_and_python_tools(
    served: Served, browser: Browser, remote: RemoteExtensionTools
) -> None:
    await open_page(browser, served, "echo")
    await until(lambda: ECHO in remote.tools, "echo listed")
    listing = await asyncio.to_thread(
        cli, served, "--ext", "tests.ext_module", "tools", "list", "--profile", PROFILE
    )
    assert listing.returncode == 0, listing.stderr
    text = listing.stdout
    assert "echo  (extension/page-test:echo)" in text
    assert "registered by page http://127.0.0.1:" in text
    assert "shout  (extension/py-test:shout)" in text
    assert "registered by module tests.ext_module" in text

    proc = await asyncio.to_thread(
        cli, served, "call", "echo", '{"text": "via cli"}', "--json", "--profile", PROFILE
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["structured"]["echoed"] == "via cli"
    proc = await asyncio.to_thread(
        cli, served, "--ext", "tests.ext_module", "call", "shout", '{"text": "hi"}',
        "--profile", PROFILE,
    )  # fmt: skip
    assert proc.stdout.strip() == "HI!", proc.stderr


PROFILE = str(Path(__file__).parent / "ext_pages" / "profile.json")


def test_python_and_web_sources_combine() -> None:
    reg = ExtensionRegistry()
    reg.register(lambda: 1, extension_id="a", name="one", description="One.")
    combined = CombinedExtensionTools(reg)
    assert [str(d.tool_id) for d in combined.catalog(Scene.CHAT)] == ["extension/a:one"]
    assert combined.origin(ToolId.extension("a", "one")) == f"module {__name__}"
