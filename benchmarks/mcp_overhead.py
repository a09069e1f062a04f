"""MCP overhead: ``echo`` through tavern-agent's full path against the raw SDK call.

Full path, built through ``Assembly`` as a run builds it: the invocation's
gate (budget, name, arguments, schema check), dispatch,
the manager's permission check (registration reloaded), the call, result
conversion and the long-result step. Raw: ``ClientSession.call_tool`` on the
very same session, so both talk to the same server-everything process over
stdio. 500 calls each (after a warm-up), in alternating blocks, in one run.
Goal: median ratio <= 1.10.

Run: ``.venv/bin/python benchmarks/mcp_overhead.py`` (needs ``npm ci --prefix tests/peers``).
"""

from __future__ import annotations

import asyncio
import json
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
CALLS = 500
BLOCK = 50
WARMUP = 50


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
            for block in range(CALLS // BLOCK):
                order = (raw, full) if block % 2 else (full, raw)
                for fn in order:
                    times = full_times if fn is full else raw_times
                    for i in range(BLOCK):
                        times.append(await fn(block * BLOCK + i))

    full_med = statistics.median(full_times) * 1e3
    raw_med = statistics.median(raw_times) * 1e3
    print(f"MCP overhead: echo over stdio, server-everything, {CALLS} calls each")
    print(f"  python {platform.python_version()}, {platform.machine()}")
    print(
        f"  raw ClientSession.call_tool: median {raw_med:.3f} ms, "
        f"p95 {_percentile(raw_times, 0.95) * 1e3:.3f} ms"
    )
    print(
        f"  tavern-agent full path:      median {full_med:.3f} ms, "
        f"p95 {_percentile(full_times, 0.95) * 1e3:.3f} ms"
    )
    print(f"  ratio (median full / raw):   {full_med / raw_med:.3f}  (goal <= 1.10)")


if __name__ == "__main__":
    asyncio.run(main())
