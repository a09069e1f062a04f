"""A SillyTavern function tool called through the bridge, against calling it in the page.

Real SillyTavern (npm, tests/peers/sillytavern) in Debian's headless Chromium
with the tavern-agent extension connected to a ``tavern-agent serve``
process. A community-style tool ``bench_echo`` is registered through
``SillyTavern.getContext().registerFunctionTool``. Measured, per call:

* the tool's ``action`` awaited directly in the page (timed in the page, per call
  in batches of 5,000: the page's clock is too coarse for one call);
* ``ToolManager.invokeFunctionTool`` in the page (how SillyTavern runs a call);
* the bridge as an endpoint run uses it: :class:`RemoteExtensionTools` in this
  process → serve's runtime channel → serve's extension host → the page's
  extension → ``ToolManager.invokeFunctionTool`` → the receipt back.

Goal: the bridge adds ≤ 3 ms per call over the direct action (median).
500 calls each after a 50-call warm-up. Run:
``.venv/bin/python benchmarks/sillytavern_tools.py`` (after ``make test``'s setup).
"""

from __future__ import annotations

import asyncio
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from playwright.async_api import async_playwright

from tavern_agent.assembly import Assembly
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.ids import ToolId
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Profile
from tavern_agent.extensions import RemoteExtensionTools
from tavern_agent.tools.context import CallContext

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the SillyTavern launcher the tests use
from tests.sillytavern.helpers import ST_DIR, sillytavern  # noqa: E402

CALLS = 500
WARMUP = 50
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-quic", "--no-first-run", "--disable-sync",
]  # fmt: skip
TOOL = ToolId.extension("sillytavern", "bench_echo")
REGISTER = """() => {
  globalThis.benchEcho = async ({text}) => ({echoed: text});
  SillyTavern.getContext().registerFunctionTool({
    name: "bench_echo", description: "Echo the text.",
    parameters: {type: "object", properties: {text: {type: "string"}}, required: ["text"]},
    action: (args) => globalThis.benchEcho(args),
  });
}"""
# The page's clock is coarse (100 µs without cross-origin isolation): in the page, calls
# are timed in batches of BATCH, and each of the BATCHES samples is a batch's time per
# call.
BATCH = 5000
BATCHES = 20
IN_PAGE = """async ([calls, warmup, batch, viaManager]) => {
  const manager = SillyTavern.getContext().ToolManager;
  const once = viaManager
    ? () => manager.invokeFunctionTool("bench_echo", {text: "hi"})
    : () => globalThis.benchEcho({text: "hi"});
  for (let i = 0; i < warmup; i++) await once();
  const samples = [];
  for (let b = 0; b < calls; b++) {
    const start = performance.now();
    for (let i = 0; i < batch; i++) await once();
    samples.push((performance.now() - start) * 1000 / batch);
  }
  return samples;
}"""


def line(label: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[int(len(ordered) * 0.9)]
    return f"| {label} | {statistics.median(samples):,.2f} µs | {p90:,.2f} µs |"


def start_serve(data: Path, origin: str) -> tuple[subprocess.Popen[str], str, str]:
    """``tavern-agent serve`` (the extension host only); its URL and token from its banner."""
    command = [sys.executable, "-m", "tavern_agent", "--data-dir", str(data), "serve"]
    command += ["--port", "0", "--allow-origin", origin]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    url = token = None
    for text in process.stdout:
        if found := re.match(r"extension host: (\S+)", text):
            url = found.group(1)
        if found := re.match(r"token: (\S+)", text):
            token = found.group(1)
            break
    assert url and token, "serve did not start"
    return process, url, token


async def measure(root: Path) -> list[str]:
    with sillytavern(root / "st", root / "sillytavern.log") as st:
        install = [sys.executable, "-m", "tavern_agent", "sillytavern", "install"]
        install += ["--st-dir", str(ST_DIR), "--data-root", str(st.data_root)]
        subprocess.run(install, check=True, capture_output=True)
        serve, host, token = start_serve(root / "data", st.url)
        try:
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(
                    executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS
                )
                page = await browser.new_page()
                await page.goto(st.url + "/")
                await page.locator(".tavern-agent-settings").wait_for(state="attached")
                await page.evaluate(REGISTER)
                await page.evaluate(
                    """([url, token]) => {
                      const s = SillyTavern.getContext().extensionSettings["tavern-agent"];
                      s.url = url; s.token = token;
                      document.getElementById("tavern_agent_connect").click();
                    }""",
                    [host, token],
                )
                remote = await RemoteExtensionTools.connect(host, token)
                for _ in range(600):
                    if TOOL in remote.tools:
                        break
                    await asyncio.sleep(0.05)
                batches = [BATCHES, WARMUP, BATCH]
                direct: list[float] = await page.evaluate(IN_PAGE, [*batches, False])
                manager: list[float] = await page.evaluate(IN_PAGE, [*batches, True])
                bridge = await bridged(remote)
                await remote.aclose()
                await browser.close()
        finally:
            serve.terminate()
            serve.wait(15)
    added = statistics.median(bridge) - statistics.median(direct)
    return [
        line("action awaited directly in the page", direct),
        line("ToolManager.invokeFunctionTool in the page", manager),
        line("bridge: runtime channel → serve → page → receipt", bridge),
        f"\nadded by the bridge (median bridge − median direct): {added / 1000:,.2f} ms "
        f"(goal ≤ 3 ms)",
    ]


async def bridged(remote: RemoteExtensionTools) -> list[float]:
    assembly = Assembly(Path("/nonexistent-data-root"), extensions=remote)
    profile = Profile.allowing([TOOL])
    snapshot = assembly.snapshot(profile, Scene.CHAT, ModelProtocol.OPENAI_CHAT, "inv_bench")
    ctx = CallContext("run_bench", "inv_bench", "call_1", 1, Scene.CHAT, snapshot)
    args: dict[str, Any] = {"text": "hi"}
    for _ in range(WARMUP):
        await remote.invoke(TOOL, args, ctx)
    samples = []
    for _ in range(CALLS):
        start = time.perf_counter_ns()
        receipt = await remote.invoke(TOOL, args, ctx)
        samples.append((time.perf_counter_ns() - start) / 1e3)
    assert not receipt.is_error and receipt.structured == {"echoed": "hi"}, receipt
    return samples


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows = await measure(Path(tmp))
    print(f"SillyTavern tool calls, {CALLS} calls each ({platform.python_version()})\n")
    print("| path | median | p90 |\n|---|---|---|")
    for row in rows:
        print(row)


if __name__ == "__main__":
    asyncio.run(main())
