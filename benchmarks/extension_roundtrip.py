"""Extension round trips: a trivial page tool in Chromium and a trivial Python tool.

Browser: an in-process :class:`ExtensionHost` on 127.0.0.1, a page in Debian's
headless Chromium (driven by Playwright) that registered ``echo``; measured
are (a) the host's own call (call event out, receipt back), (b) the same
through the runtime channel from a :class:`RemoteExtensionTools` client (one
more WebSocket hop, as ``tavern-agent call`` uses against ``serve``), and
(c) the full gate path over (a). Goal: (a) median < 2 ms on loopback.

Python: the registry's ``invoke`` (argument model, context, JSON check)
against calling the same function directly; the difference is the overhead.
Goal: < 30 µs. The full gate path is shown for scale.

500 calls each after a 50-call warm-up. Run: ``.venv/bin/python benchmarks/extension_roundtrip.py``.
"""

from __future__ import annotations

import asyncio
import platform
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from playwright.async_api import async_playwright

from tavern_agent.assembly import Assembly
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.ids import ToolId
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Profile
from tavern_agent.extensions import ExtensionHost, ExtensionRegistry, RemoteExtensionTools
from tavern_agent.extensions.protocol import CallMeta
from tavern_agent.tools.catalog import ExtensionTools
from tavern_agent.tools.context import CallContext
from tavern_agent.tools.gate import ToolRequestGate

ROOT = Path(__file__).resolve().parent.parent
CALLS = 500
WARMUP = 50
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-quic", "--no-first-run", "--disable-sync",
]  # fmt: skip
PAGE = """<!doctype html><script src="/ext/tavern-agent.js"></script><script>
window.setup = async (url, token) => {
  const agent = await tavernAgent.connect(url, token);
  await agent.tools.register(
    {extensionId: "bench", name: "echo", description: "Echo.",
     inputSchema: {type: "object", properties: {text: {type: "string"}},
                   additionalProperties: false}, contexts: ["chat"]},
    (args) => ({echoed: args.text}));
};
</script>"""


async def timed(fn: Callable[[], Awaitable[Any]]) -> list[float]:
    for _ in range(WARMUP):
        await fn()
    samples = []
    for _ in range(CALLS):
        start = time.perf_counter_ns()
        await fn()
        samples.append((time.perf_counter_ns() - start) / 1e3)
    return samples


def line(label: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[int(len(ordered) * 0.9)]
    return f"| {label} | {statistics.median(samples):,.1f} µs | {p90:,.1f} µs |"


def gate_for(extensions: ExtensionTools) -> ToolRequestGate:
    assembly = Assembly(Path("/nonexistent-data-root"), extensions=extensions)
    profile = Profile.allowing([d.tool_id for d in extensions.catalog(Scene.CHAT)])
    snap = assembly.snapshot(profile, Scene.CHAT, ModelProtocol.OPENAI_CHAT, "inv_bench")
    return assembly.gate(snap, run_id="run_bench")


def fresh(gate: ToolRequestGate, call: ToolCall) -> Callable[[], Awaitable[Any]]:
    """One gate call with the budget reset, so every sample runs the whole path."""

    async def run() -> Any:
        gate.calls_used = 0
        gate.per_tool.clear()
        executed = await gate.handle(call, round=1)
        assert not executed.result.is_error, executed.result.content
        return executed

    return run


def context(gate: ToolRequestGate) -> CallContext:
    return CallContext("run_bench", "inv_bench", "call_1", 1, Scene.CHAT, gate.snapshot)


async def browser_rows(pages: Path) -> list[str]:
    (pages / "bench.html").write_text(PAGE)
    async with ExtensionHost(pages_dir=pages) as host, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = await browser.new_page()
        await page.goto(f"{host.url}/pages/bench.html")
        ws = host.url.replace("http://", "ws://") + "/ext/ws"
        await page.evaluate("([u, t]) => setup(u, t)", [ws, host.token])
        tool = ToolId.extension("bench", "echo")
        meta = CallMeta("run_bench", "inv_bench", "call_1", {"kind": "chat"}, "echo")
        never = asyncio.Event()
        args = {"text": "hi"}
        host_samples = await timed(lambda: host.call(tool, args, meta, never))
        remote = await RemoteExtensionTools.connect(host.url, host.token)
        gate = gate_for(host)
        ctx = context(gate)
        remote_samples = await timed(lambda: remote.invoke(tool, args, ctx))
        await remote.aclose()
        call = ToolCall("call_1", "echo", '{"text": "hi"}')
        gate_samples = await timed(fresh(gate, call))
        await browser.close()
    return [
        line("page echo: host call → Chromium → receipt", host_samples),
        line("page echo: via runtime channel (+1 WebSocket hop)", remote_samples),
        line("page echo: full gate path over the host", gate_samples),
    ]


async def python_rows() -> list[str]:
    reg = ExtensionRegistry()

    def echo(text: str) -> dict[str, str]:
        return {"echoed": text}

    reg.register(echo, extension_id="bench", name="echo", description="Echo.")
    tool = ToolId.extension("bench", "echo")
    gate = gate_for(reg)
    ctx = context(gate)
    args = {"text": "hi"}

    async def direct() -> Any:
        return echo(**args)

    direct_samples = await timed(direct)
    invoke_samples = await timed(lambda: reg.invoke(tool, args, ctx))
    call = ToolCall("call_1", "echo", '{"text": "hi"}')
    gate_samples = await timed(fresh(gate, call))
    overhead = statistics.median(invoke_samples) - statistics.median(direct_samples)
    return [
        line("python echo: direct call (awaited)", direct_samples),
        line("python echo: registry invoke", invoke_samples),
        line("python echo: full gate path", gate_samples),
        f"\nPython registry overhead (median invoke − median direct): {overhead:,.1f} µs",
    ]


async def main() -> None:
    random.seed(0)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        rows = await browser_rows(Path(tmp))
    print(f"extension round trips, {CALLS} calls each ({platform.python_version()})\n")
    print("| path | median | p90 |\n|---|---|---|")
    for row in [*rows, *await python_rows()]:
        print(row)


if __name__ == "__main__":
    asyncio.run(main())
