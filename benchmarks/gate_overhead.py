"""Tool-layer overhead: our gate beside PydanticAI and the OpenAI Agents SDK, and snapshot builds.

Part 1 times one ``dice.roll`` call with the raw arguments text ``{"formula":"3d6+4"}``
through three tool layers, each doing parse + check + dispatch + result:

* tavern_agent: ``ToolRequestGate.handle(ToolCall)`` → ``AgentToolResult``;
* PydanticAI: ``ToolManager.handle_call(ToolCallPart)`` over a ``FunctionToolset``,
  then the ``ToolReturnPart`` the agent graph records;
* OpenAI Agents SDK: ``FunctionTool.on_invoke_tool(ToolContext, json_args)`` from
  ``agents.function_tool``, then ``ItemHelpers.tool_call_output_item``.

All three run the same dice code (``roll_dice``: ``parse_formula``, the draws, ``describe_roll``
from ``tavern_agent.tools.builtin.dice``) with a ``random.Random`` seeded alike, as
``async`` functions in one event loop, so only the tool layer differs. The call objects
(what a provider adapter would hand over) are built outside the timed region.

Part 2 times ``Assembly.snapshot`` for a catalog of 1,000 MCP tools for each model protocol:
cold builds (empty caches, as a process's first invocation) with their CPU time, then warm
ones; the goal row sets the slowest protocol's cold build beside its warm median.

Run: ``python benchmarks/gate_overhead.py [--quick]``. It prints numbers and goals and
never fails on timing.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import os
import platform
import random
import statistics
import tempfile
import time
import timeit
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from agents import RunContextWrapper, function_tool
from agents.items import ItemHelpers
from agents.tool_context import ToolContext
from openai.types.responses import ResponseFunctionToolCall
from pydantic_ai import RunContext
from pydantic_ai.messages import ToolCallPart, ToolReturnPart
from pydantic_ai.models.test import TestModel
from pydantic_ai.tool_manager import ToolManager
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai.usage import RunUsage

from tavern_agent.assembly import Assembly
from tavern_agent.core import schema_adapt
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.descriptors import Scene, ToolDescriptor
from tavern_agent.core.ids import ToolId
from tavern_agent.core.naming import ModelProtocol, normalize_segment
from tavern_agent.core.profile import Limits, Profile
from tavern_agent.tools.builtin.dice import roll_dice
from tavern_agent.tools.catalog import ExternalReceipt, InMemoryToolSource
from tavern_agent.tools.context import CallContext
from tavern_agent.tools.gate import ToolRequestGate
from tavern_agent.tools.snapshot import ToolSnapshot

RAW_ARGS = '{"formula":"3d6+4"}'
TOOL_NAME = "dice_roll"
SEED = 1234
GATE_GOAL_US = 20.0
SNAPSHOT_GOAL_MS = 20.0
EXTERNAL_TOOLS = 1_000
BASELINE = "dice body alone (no layer)"

# ---------------------------------------------------------------- the shared dice logic


def roll(formula_text: str, rng: random.Random) -> tuple[str, dict[str, Any]]:
    """The body of ``dice.roll`` (``roll_dice`` in tools/builtin/dice.py): text and record.

    The other frameworks' tools return the text, which is what the model reads; our
    gate also carries the record into its result, so it does no less work.
    """
    return roll_dice(formula_text, rng)


# ---------------------------------------------------------------- contenders


@dataclass
class Contender:
    """One tool layer: builds call objects untimed and runs one call (timed)."""

    name: str
    make_calls: Callable[[int, int], list[Any]]
    run: Callable[[Any], Awaitable[Any]]
    content_of: Callable[[Any], str]
    new_round: Callable[[], None] = lambda: None
    samples: list[int] = field(default_factory=list)


def _call_ids(start: int, n: int) -> list[str]:
    return [f"call_{i:08x}" for i in range(start, start + n)]


def tavern_contender() -> Contender:
    """``ToolRequestGate`` over a snapshot of the built-in catalog, built by the assembly."""
    assembly = Assembly(Path(tempfile.mkdtemp(prefix="gate-bench-")))
    ids = [d.tool_id for d in assembly.catalog.descriptors(Scene.CHAT)]
    # A high call budget so thousands of calls never hit the 80-call default.
    profile = Profile.allowing(ids).model_copy(
        update={"limits": Limits(max_calls_per_invocation=100_000)}
    )
    snapshot = assembly.snapshot(profile, Scene.CHAT, ModelProtocol.OPENAI_CHAT, "inv_bench")
    rng = random.Random(SEED)
    state: dict[str, ToolRequestGate] = {}

    def new_round() -> None:
        # One gate per "invocation"; a round stays far below its call budget.
        state["gate"] = assembly.gate(snapshot, run_id="bench", rng=rng)

    new_round()

    def make_calls(start: int, n: int) -> list[Any]:
        return [ToolCall(cid, TOOL_NAME, RAW_ARGS) for cid in _call_ids(start, n)]

    async def run(call: Any) -> Any:
        return await state["gate"].handle(call, round=1)

    def content_of(executed: Any) -> str:
        result = executed.result
        if result.is_error:
            raise RuntimeError(f"gate refused the call: {result.content}")
        return str(result.content)

    return Contender("tavern_agent ToolRequestGate", make_calls, run, content_of, new_round)


async def pydantic_ai_contender() -> Contender:
    """PydanticAI ``ToolManager.handle_call`` over a ``FunctionToolset``, then a ToolReturnPart."""

    async def dice_roll(ctx: RunContext[random.Random], formula: str) -> str:
        """Roll dice for chance outcomes in the story; returns each die and the total.

        Args:
            formula: Dice to roll: d20, 3d6+4, 2d8-1, or N for 1dN.
        """
        return roll(formula, ctx.deps)[0]

    # An async function, as ours is: PydanticAI runs a sync one in a worker thread.
    toolset = FunctionToolset[random.Random]([dice_roll])
    run_ctx = RunContext[random.Random](
        deps=random.Random(SEED), model=TestModel(), usage=RunUsage()
    )
    # No root capability: the cheapest ToolManager an agent run can have.
    manager = await ToolManager[random.Random](toolset).for_run_step(run_ctx)

    def make_calls(start: int, n: int) -> list[Any]:
        return [
            ToolCallPart(tool_name=TOOL_NAME, args=RAW_ARGS, tool_call_id=cid)
            for cid in _call_ids(start, n)
        ]

    async def run(call: Any) -> Any:
        output = await manager.handle_call(call)
        return ToolReturnPart(
            tool_name=call.tool_name, content=output, tool_call_id=call.tool_call_id
        )

    return Contender(
        "pydantic-ai ToolManager", make_calls, run, lambda part: str(part.model_response_str())
    )


def openai_agents_contender() -> Contender:
    """OpenAI Agents SDK ``FunctionTool.on_invoke_tool``, then the function_call_output item."""

    async def dice_roll(ctx: RunContextWrapper[random.Random], formula: str) -> str:
        """Roll dice for chance outcomes in the story; returns each die and the total.

        Args:
            formula: Dice to roll: d20, 3d6+4, 2d8-1, or N for 1dN.
        """
        return roll(formula, ctx.context)[0]

    # An async function, as ours is: the SDK runs a sync one through asyncio.to_thread.
    tool = function_tool(dice_roll)
    rng = random.Random(SEED)

    def make_calls(start: int, n: int) -> list[Any]:
        return [
            ResponseFunctionToolCall(
                arguments=RAW_ARGS, call_id=cid, name=TOOL_NAME, type="function_call"
            )
            for cid in _call_ids(start, n)
        ]

    async def run(call: Any) -> Any:
        # The runner builds one ToolContext per call, as here.
        ctx = ToolContext(
            context=rng,
            tool_name=call.name,
            tool_call_id=call.call_id,
            tool_arguments=call.arguments,
            tool_call=call,
        )
        output = await tool.on_invoke_tool(ctx, call.arguments)
        return ItemHelpers.tool_call_output_item(call, output)

    return Contender(
        "openai-agents FunctionTool", make_calls, run, lambda item: str(item["output"])
    )


def baseline_contender() -> Contender:
    """The dice body alone, awaited like a tool: what every layer's median includes."""
    rng = random.Random(SEED)
    formula = "3d6+4"

    def make_calls(start: int, n: int) -> list[Any]:
        return [None] * n

    async def run(call: Any) -> Any:
        return roll(formula, rng)[0]

    return Contender(BASELINE, make_calls, run, str)


# ---------------------------------------------------------------- timing


async def check_same_output(contenders: Sequence[Contender]) -> str:
    """Run one call through each layer and confirm they all produced the same text."""
    texts = []
    for c in contenders:
        (call,) = c.make_calls(0, 1)
        texts.append(c.content_of(await c.run(call)))
    if len(set(texts)) != 1:
        raise RuntimeError(f"the contenders disagree: {texts}")
    return texts[0]


async def time_round(contender: Contender, calls: list[Any], record: bool) -> None:
    """Time each call of one round on its own with ``perf_counter_ns``."""
    contender.new_round()
    clock = time.perf_counter_ns
    run = contender.run
    out = contender.samples
    for call in calls:
        t0 = clock()
        await run(call)
        t1 = clock()
        if record:
            out.append(t1 - t0)


async def measure_calls(
    contenders: Sequence[Contender], iterations: int, warmup: int, round_size: int
) -> None:
    """Warm up, then interleave rounds of ``round_size`` calls, rotating the order each round."""
    next_id = 1
    for c in contenders:
        await time_round(c, c.make_calls(next_id, warmup), record=False)
        next_id += warmup
    rounds = max(iterations // round_size, 1)
    for r in range(rounds):
        order = [contenders[(r + k) % len(contenders)] for k in range(len(contenders))]
        for c in order:
            calls = c.make_calls(next_id, round_size)
            gc.collect()
            await time_round(c, calls, record=True)
        next_id += round_size


def timer_overhead_ns(samples: int = 20_000) -> int:
    """Median cost of two back-to-back ``perf_counter_ns`` reads (included in every sample)."""
    clock = time.perf_counter_ns
    gaps = []
    for _ in range(samples):
        t0 = clock()
        t1 = clock()
        gaps.append(t1 - t0)
    return int(statistics.median(gaps))


def percentile(sorted_values: Sequence[int], q: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    index = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return float(sorted_values[index])


# ---------------------------------------------------------------- snapshots

_VERBS = ("list", "get", "create", "update", "delete", "search", "sync", "export")
_NOUNS = ("issues", "files", "events", "notes", "users", "pages", "tasks", "records")
_LABELS = ("GitHub (work)", "Notion", "Café Calendar", "", "linear.app", "")


def _schema(k: int) -> dict[str, Any]:
    """A small, realistic parameter schema; ``k`` picks one of six shapes."""
    shape = k % 6
    if shape == 0:
        return {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Text to look for."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
            },
            "required": ["query"],
        }
    if shape == 1:
        return {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "id": {"type": "string", "description": "Record id."},
                "cursor": {"type": ["string", "null"], "description": "Page cursor."},
            },
            "required": ["id"],
            "additionalProperties": False,
        }
    if shape == 2:
        return {
            "type": "object",
            "properties": {
                "title": {"type": "string", "maxLength": 200},
                "body": {"type": "string"},
                "labels": {"type": "array", "items": {"type": "string"}, "maxItems": 10},
                "version": {"const": "v2"},
            },
            "required": ["title"],
            "additionalProperties": False,
        }
    if shape == 3:
        return {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path in the repository."},
                "ref": {"type": ["string", "null"]},
                "depth": {"type": "integer", "enum": [1, 2, 3]},
            },
            "required": ["path"],
        }
    if shape == 4:
        return {
            "type": "object",
            "properties": {
                "filter": {
                    "type": "object",
                    "properties": {
                        "status": {"type": "string", "enum": ["open", "closed", "all"]},
                        "since": {"type": "string", "format": "date-time"},
                    },
                    "additionalProperties": False,
                },
                "page": {"type": "integer", "minimum": 1},
            },
        }
    return {
        "type": "object",
        "properties": {
            "value": {"oneOf": [{"type": "string"}, {"type": "number"}]},
            "dry_run": {"type": "boolean", "default": False},
        },
        "required": ["value"],
        "additionalProperties": {"type": "string"},
    }


def external_descriptors(count: int, servers: int = 25) -> list[ToolDescriptor]:
    """``count`` MCP tool descriptors spread over ``servers`` servers, each with its own schema."""
    out = []
    for i in range(count):
        server = i % servers
        noun = _NOUNS[(i // servers) % len(_NOUNS)]
        verb = _VERBS[(i // (servers * len(_NOUNS))) % len(_VERBS)]
        tool_id = ToolId.parse(f"mcp/srv-{server}:{noun}.{verb}-{i}")
        out.append(
            ToolDescriptor(
                tool_id,
                f"{verb.capitalize()} {noun} on server {server}; returns JSON with the result.",
                _schema(i),
                label=_LABELS[server % len(_LABELS)],
            )
        )
    return out


async def _noop_handler(args: dict[str, Any], ctx: CallContext) -> ExternalReceipt:
    return ExternalReceipt("ok")


@dataclass(frozen=True)
class Cold:
    """The cold builds of one protocol: median wall and CPU milliseconds."""

    wall: float
    cpu: float


def measure_snapshots(
    reps: int, cold_reps: int
) -> tuple[int, dict[ModelProtocol, list[float]], dict[ModelProtocol, Cold]]:
    """Build the 1,000-tool snapshot ``reps`` times per protocol, after ``cold_reps`` cold
    builds of each (the protocols taking turns).

    A cold build starts without the caches a long-lived catalog keeps (the
    profile's parsed ToolIds, adapted Gemini schemas, normalised name segments),
    the way the first invocation of a process meets them. Its CPU time is kept
    beside the wall time: a busy machine stretches the wall time of a build this
    short by whole scheduler slices.
    """
    source = InMemoryToolSource()
    for d in external_descriptors(EXTERNAL_TOOLS):
        source.add(d, _noop_handler)
    assembly = Assembly(Path(tempfile.mkdtemp(prefix="snapshot-bench-")), mcp=source)
    profile = Profile.allowing(
        [d.tool_id for d in assembly.catalog.descriptors(Scene.CHAT)], "bench"
    )
    timings: dict[ModelProtocol, list[float]] = {p: [] for p in ModelProtocol}
    walls: dict[ModelProtocol, list[float]] = {p: [] for p in ModelProtocol}
    cpus: dict[ModelProtocol, list[float]] = {p: [] for p in ModelProtocol}
    tool_count = 0
    for _ in range(cold_reps):
        for protocol in ModelProtocol:
            schema_adapt._GEMINI_CACHE.clear()
            normalize_segment.cache_clear()
            fresh = Profile.model_validate(profile.model_dump())
            gc.collect()
            t0, c0 = time.perf_counter_ns(), time.process_time_ns()
            snap: ToolSnapshot = assembly.snapshot(fresh, Scene.CHAT, protocol, "cold")
            walls[protocol].append((time.perf_counter_ns() - t0) / 1e6)
            cpus[protocol].append((time.process_time_ns() - c0) / 1e6)
            tool_count = len(snap.bindings)
    for rep in range(reps):
        for protocol in ModelProtocol:
            gc.collect()
            t0 = time.perf_counter_ns()
            assembly.snapshot(profile, Scene.CHAT, protocol, f"inv_{rep}")
            timings[protocol].append((time.perf_counter_ns() - t0) / 1e6)
    cold = {p: Cold(statistics.median(walls[p]), statistics.median(cpus[p])) for p in ModelProtocol}
    return tool_count, timings, cold


# ---------------------------------------------------------------- report


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def reference_loop_ns() -> float:
    """Best-of-7 time of ``sum(range(100))``: a rough speed reference for this machine."""
    timer = timeit.Timer("sum(range(100))")
    return min(timer.repeat(repeat=7, number=100_000)) / 100_000 * 1e9


def machine_info() -> list[str]:
    """CPU, cores, Python and package versions."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return [
        f"CPU: {cpu}",
        f"cores: {os.cpu_count()} (usable by this process: {usable})",
        f"Python: {platform.python_version()} ({platform.python_implementation()}, "
        f"{platform.system()} {platform.release()})",
        "packages: "
        + ", ".join(
            f"{d} {_version(d)}"
            for d in ("tavern-agent", "pydantic", "pydantic-ai-slim", "openai-agents")
        ),
        f"speed reference: sum(range(100)) takes {reference_loop_ns():.0f} ns here",
        load(),
    ]


def load() -> str:
    """The load averages (1, 5, 15 minutes) now."""
    return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


@dataclass(frozen=True)
class Row:
    """Summary of one contender's samples, in µs."""

    name: str
    median: float
    p99: float
    mean: float
    calls: int


def summarize(contender: Contender) -> Row:
    values = sorted(contender.samples)
    return Row(
        contender.name,
        statistics.median(values) / 1000,
        percentile(values, 0.99) / 1000,
        statistics.fmean(values) / 1000,
        len(values),
    )


def print_call_table(rows: Sequence[Row], baseline: Row, overhead_ns: int) -> None:
    """Print median/p99/mean per layer and the median minus the bare dice body."""
    header = f"{'tool layer':<30} {'median µs':>10} {'p99 µs':>8} {'mean µs':>8}"
    print(f"{header} {'layer only µs':>14} {'calls':>7}")
    for r in (*rows, baseline):
        layer = f"{r.median - baseline.median:>14.1f}" if r is not baseline else f"{'-':>14}"
        print(f"{r.name:<30} {r.median:>10.1f} {r.p99:>8.1f} {r.mean:>8.1f} {layer} {r.calls:>7,}")
    print(
        "layer only = median minus the median of the bare dice body; "
        f"every sample includes ~{overhead_ns} ns of perf_counter_ns"
    )


def print_call_goals(ours: Row, others: Sequence[Row], baseline: Row) -> None:
    """The gate goals: ≤ 20 µs median, and faster than both other layers."""
    layer = ours.median - baseline.median
    print(
        f"goal: gate ≤ {GATE_GOAL_US:.0f} µs median, whole call: "
        f"{_verdict(ours.median <= GATE_GOAL_US)} ({ours.median:.1f} µs)"
    )
    print(
        f"goal: gate ≤ {GATE_GOAL_US:.0f} µs median, layer only: "
        f"{_verdict(layer <= GATE_GOAL_US)} ({layer:.1f} µs)"
    )
    ratios = ", ".join(f"{o.name} {o.median / ours.median:.2f}×" for o in others)
    faster = all(ours.median < o.median for o in others)
    print(f"goal: gate faster than both: {_verdict(faster)} (their median / ours: {ratios})")


def print_snapshot_table(
    timings: dict[ModelProtocol, list[float]], cold: dict[ModelProtocol, Cold]
) -> None:
    """Cold build (wall and CPU), then median, min and max per protocol, the sums, and the
    goal row: the slowest protocol's cold build beside its warm median."""
    goal = f"goal < {SNAPSHOT_GOAL_MS:.0f} ms"
    print(
        f"{'protocol':<18} {'cold ms':>8} {'cold CPU':>9} {'median ms':>10} {'min ms':>8} "
        f"{'max ms':>8}   {goal} (median / cold)"
    )
    total = cold_total = 0.0
    for protocol, values in timings.items():
        med = statistics.median(values)
        c = cold[protocol]
        total += med
        cold_total += c.wall
        print(
            f"{protocol.value:<18} {c.wall:>8.2f} {c.cpu:>9.2f} {med:>10.2f} {min(values):>8.2f} "
            f"{max(values):>8.2f}   {_verdict(med < SNAPSHOT_GOAL_MS)} / "
            f"{_verdict(c.wall < SNAPSHOT_GOAL_MS)}"
        )
    print(f"{'all four':<18} {cold_total:>8.2f} {'':>9} {total:>10.2f}")
    worst = max(cold, key=lambda p: cold[p].wall)
    warm = statistics.median(timings[worst])
    what = "snapshot of 1,000 tools, cold, every protocol"
    print()
    print(f"{'row':<46} {'measured':>9}   {'baseline, same run':<28} goal")
    print(
        f"{what:<46} {cold[worst].wall:>6.2f} ms   "
        f"{f'{worst.value} warm {warm:.2f} ms':<28} < {SNAPSHOT_GOAL_MS:.0f} ms: "
        f"{_verdict(cold[worst].wall < SNAPSHOT_GOAL_MS)} (slowest: {worst.value}, "
        f"CPU {cold[worst].cpu:.2f} ms)"
    )


async def main_async(args: argparse.Namespace) -> None:
    """Run both parts and print the report."""
    iterations, warmup, reps, cold_reps = (
        (2_000, 300, 5, 7)  # 7 cold builds: a median that one scheduler slice cannot move
        if args.quick
        else (args.iterations, args.warmup, args.snapshot_reps, args.cold_reps)
    )
    round_size = min(args.round_size, iterations)
    print("tavern_agent tool-layer benchmark" + (" (--quick)" if args.quick else ""))
    for line in machine_info():
        print("  " + line)
    print()

    layers = [tavern_contender(), await pydantic_ai_contender(), openai_agents_contender()]
    baseline = baseline_contender()
    sample = await check_same_output([*layers, baseline])
    rounds = max(iterations // round_size, 1)
    print(f"1. One dice.roll call, raw arguments {RAW_ARGS}: parse + check + dispatch + result")
    print(f"   same text from every layer for the same seed, e.g. {sample!r}")
    print(
        f"   {rounds * round_size:,} timed calls each, in {rounds} interleaved rounds of "
        f"{round_size} (order rotated), after {warmup:,} warm-up calls; one asyncio loop"
    )
    print()
    await measure_calls([*layers, baseline], iterations, warmup, round_size)
    rows = [summarize(c) for c in layers]
    base = summarize(baseline)
    print_call_table(rows, base, timer_overhead_ns())
    print_call_goals(rows[0], rows[1:], base)
    print()

    tool_count, timings, cold = measure_snapshots(reps, cold_reps)
    print(
        f"2. Assembly.snapshot of {EXTERNAL_TOOLS:,} MCP tools ({tool_count:,} bindings with the "
        f"built-ins): the median of {cold_reps} builds with empty caches (cold), then the "
        f"median of {reps} builds"
    )
    print(f"   {load()}")
    print()
    print_snapshot_table(timings, cold)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="few iterations, for a smoke run")
    parser.add_argument("--iterations", type=int, default=20_000, help="timed calls per layer")
    parser.add_argument("--warmup", type=int, default=2_000, help="untimed calls per layer")
    parser.add_argument("--round-size", type=int, default=500, help="calls per interleaved round")
    parser.add_argument("--snapshot-reps", type=int, default=15, help="timed builds per protocol")
    parser.add_argument("--cold-reps", type=int, default=5, help="cold builds per protocol")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Entry point."""
    asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    main()
