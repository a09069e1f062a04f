"""MCP overhead: ``echo`` through tavern-agent's full path against the raw SDK call.

Full path, built through ``Assembly`` as a run builds it: the invocation's
gate (budget, name, arguments, schema check), dispatch,
the manager's permission check (registration reloaded), the call, result
conversion and the long-result step. Raw: ``ClientSession.call_tool`` on the
very same session, so both talk to the same server-everything process over
stdio. 2,000 calls each (after a warm-up), strictly alternating (the order
flips every pair), so load from other processes on the machine falls on both
alike. Goal: median ratio <= 1.10.

Also printed: the median of the per-pair differences; this process's CPU time
per call of each (alternating blocks of 250), which a busy machine disturbs
less than wall time; and the full path's own work with the server taken out
(``call_tool`` answers at once with a stored reply), its cost with warm caches.

Run: ``.venv/bin/python benchmarks/mcp_overhead.py`` (needs ``npm ci --prefix tests/peers``).
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from tavern_agent.assembly import Assembly
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.ids import ToolId
from tavern_agent.core.profile import Limits, Profile, ToolSelection
from tavern_agent.mcp import McpManager, RegistrationStore
from tavern_agent.mcp.registrations import parse_registration

ROOT = Path(__file__).resolve().parent.parent
EVERYTHING = ROOT / "tests/peers/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
CALLS = 2_000
WARMUP = 100
OWN_CALLS = 5_000
CPU_BLOCKS, CPU_BLOCK = 4, 250


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * p), len(ordered) - 1)]


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        RegistrationStore(data / "data").save(
            parse_registration(
                {
                    "id": "everything",
                    "displayName": "everything",
                    "transport": {
                        "type": "stdio",
                        "command": "node",
                        "args": [str(EVERYTHING), "stdio"],
                    },
                    "toolPermissions": {"echo": "allow"},
                }
            )
        )
        async with await Assembly.open(data / "data", pages=False) as assembly:
            manager = assembly.catalog.mcp
            assert isinstance(manager, McpManager)
            await manager.discover("everything")
            profile = Profile(
                id="bench",
                name="bench",
                tools=ToolSelection(allow=("mcp/everything:echo",)),
                limits=Limits(max_calls_per_invocation=100_000),
            )
            snapshot = assembly.snapshot(profile, Scene.CHAT, snapshot_id="bench")
            gate = assembly.gate(snapshot, results_root=data / "ws")
            assert snapshot.name_of(ToolId.mcp("everything", "echo")) == "mcp__everything__echo"
            conn = manager.pool.current("everything")
            assert conn is not None and conn.session is not None
            session = conn.session
            raw_args = json.dumps({"message": "hello"})

            async def full(i: int) -> float:
                started = time.perf_counter()
                result = (
                    await gate.handle(ToolCall(f"c{i}", "mcp__everything__echo", raw_args))
                ).result
                elapsed = time.perf_counter() - started
                assert result.content == "Echo: hello", result.content
                return elapsed

            async def raw(i: int) -> float:
                started = time.perf_counter()
                result = await session.call_tool("echo", {"message": "hello"})
                elapsed = time.perf_counter() - started
                assert result.content[0].text == "Echo: hello"  # type: ignore[union-attr]
                return elapsed

            for i in range(WARMUP):
                await full(i)
                await raw(i)
            full_times: list[float] = []
            raw_times: list[float] = []
            for i in range(CALLS):
                if i % 2:
                    raw_times.append(await raw(i))
                    full_times.append(await full(i))
                else:
                    full_times.append(await full(i))
                    raw_times.append(await raw(i))

            # CPU per call of this process (kernel time included), in alternating
            # blocks: steadier than wall time when other processes share the cores.
            cpu = {"raw": 0.0, "full": 0.0}
            for block in range(CPU_BLOCKS):
                for name, fn in (("raw", raw), ("full", full)):
                    started = time.process_time()
                    for i in range(CPU_BLOCK):
                        await fn(block * CPU_BLOCK + i)
                    cpu[name] += time.process_time() - started
            raw_cpu_us, full_cpu_us = (cpu[k] / (CPU_BLOCKS * CPU_BLOCK) * 1e6 for k in cpu)

            # The full path's own work: the same calls with the server taken out.
            answer = await session.call_tool("echo", {"message": "hello"})

            async def answer_at_once(*args: object, **kwargs: object) -> object:
                return answer

            session.call_tool = answer_at_once  # type: ignore[method-assign]
            started = time.perf_counter()
            for i in range(OWN_CALLS):
                await gate.handle(ToolCall(f"o{i}", "mcp__everything__echo", raw_args))
            own_us = (time.perf_counter() - started) / OWN_CALLS * 1e6

    full_med = statistics.median(full_times) * 1e3
    raw_med = statistics.median(raw_times) * 1e3
    diff_us = statistics.median(f - r for f, r in zip(full_times, raw_times, strict=True)) * 1e6
    ratio = full_med / raw_med
    print(f"MCP overhead: echo over stdio, server-everything, {CALLS} calls each, alternating")
    print(f"  python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores")
    print(
        f"  raw ClientSession.call_tool: median {raw_med:.3f} ms, "
        f"p95 {_percentile(raw_times, 0.95) * 1e3:.3f} ms"
    )
    print(
        f"  tavern-agent full path:      median {full_med:.3f} ms, "
        f"p95 {_percentile(full_times, 0.95) * 1e3:.3f} ms"
    )
    print(f"  median per-pair difference:  {diff_us:.0f} us")
    print(f"  full path's own work:        {own_us:.1f} us per call (server taken out)")
    print(
        f"  CPU per call (this process):  raw {raw_cpu_us:.0f} us, full path {full_cpu_us:.0f} us "
        f"({full_cpu_us / raw_cpu_us:.3f}×, {full_cpu_us - raw_cpu_us:+.0f} us)"
    )
    met = "met" if ratio <= 1.10 else "NOT met"
    print(f"  ratio (median full / raw):   {ratio:.3f}  (goal <= 1.10: {met})")


if __name__ == "__main__":
    asyncio.run(main())
