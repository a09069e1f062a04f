"""Scheduling overhead of delegation: 50 children delegated in one turn and awaited.

A background chat run's root agent (delegation is a chat-scene tool) delegates
N tasks in one turn (``agent.delegate`` N times), awaits them all
(``agent.await`` allCompleted) and finishes. Each
child answers its one model request with ``task.return``. The model is the
scripted fake (:class:`ScriptedAgents`, pre-built turns, no I/O): the stored
``ReplayGateway`` answers by the run's round number and does not know the
children's per-invocation response files, so the scripted model stands in for a
replay; its own cost is a few microseconds per answer.

Per child = (wall time of the run with N children − the same run with the
delegating turn replaced by one dice roll) / N. That covers everything the
runtime does for a child: the delegate call (target check, snapshot, prompt and
run record, journal), starting the background task, the child's model request
bookkeeping (response file, journal), its ``task.return`` call (summary file,
result record) and the await. Also reported: the median ``agent.delegate`` call
alone (its journaled ``elapsedMs``) and the fsyncs per child (``os.fsync``
calls while the run ran, beyond the baseline run's). Medians of R repeats; the
journal with and without fsync take turns, and the goal row sets the fsync'd
cost per child (goal: under 2 ms) beside the unsynced one from the same run.
The CPU time per child (process time, system calls included) is printed beside
the wall time: on a shared machine it shows the runtime's own cost without the
waits for a core.
Run: ``python benchmarks/delegation.py [--children N] [--repeats R] [--dir PATH] [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from tavern_agent.assembly import Assembly
from tavern_agent.core.profile import Profile
from tavern_agent.runtime.journal import read_events
from tavern_agent.runtime.loop import Engine
from tavern_agent.runtime.run import Run, RunSpec
from tavern_agent.runtime.scripted import AgentScript, ScriptedAgents, Turn, call, calls

CHAT = (
    '{"user_name":"U","character_name":"S","chat_metadata":{"integrity":"bench"}}\n'
    '{"name":"U","is_user":true,"mes":"Ask the helpers."}\n'
)


def root_profile(children: int) -> Profile:
    return Profile.from_json(
        {
            "id": "lead",
            "name": "Lead",
            "tools": {
                "allow": [
                    "builtin:agent.delegate",
                    "builtin:agent.await",
                    "builtin:dice.roll",
                    "builtin:workspace.finish",
                ]
            },
            "run": {"presentation": "background"},
            "delegation": {
                "maxConcurrentInvocations": 64,
                "maxInvocationsPerRun": max(children, 1),
            },
        }
    )


def helper_profile() -> dict[str, Any]:
    return {
        "id": "helper",
        "name": "Helper",
        "description": "Answers one question.",
        "tools": {"allow": ["builtin:dice.roll"]},
        "delegation": {"callable": True},
    }


def scripts(children: int) -> dict[str, AgentScript]:
    task = {"objective": "Answer one question.", "title": "Question"}
    first: Turn = (
        calls(*(("agent_delegate", {"agentId": "helper", "task": task}),) * children)
        if children
        else call("dice_roll", {"formula": "d6"})
    )
    wait: Turn = (
        call("agent_await", {"mode": "allCompleted"})
        if children
        else call("dice_roll", {"formula": "d6"})
    )
    done = call("task_return", {"summary": "The answer is 42.", "status": "completed"})
    finish = call("workspace_finish", {"reason": "all tasks returned"})
    return {"lead": [first, wait, finish], "helper": [done]}


def one_run(base: Path, children: int, fsync: bool) -> tuple[float, float, list[float], int]:
    """One run with ``children`` delegated: its wall and CPU seconds, the delegate calls'
    journaled times, and the fsyncs made while it ran (run creation not counted)."""
    assembly = Assembly(base / "data")
    (assembly.data.path / "profiles").mkdir(parents=True, exist_ok=True)
    (assembly.data.path / "profiles" / "helper.json").write_text(json.dumps(helper_profile()))
    chat = base / "chat.jsonl"
    chat.write_text(CHAT, encoding="utf-8")
    spec = RunSpec(root_profile(children), chat_file=chat, seed=1)
    run = Run.start(assembly, spec)
    engine = Engine(run, ScriptedAgents(scripts(children)), fsync=fsync)
    fsyncs = 0
    real_fsync = os.fsync

    def counting(fd: int) -> None:
        nonlocal fsyncs
        fsyncs += 1
        real_fsync(fd)

    os.fsync = counting
    started, cpu = time.perf_counter(), time.process_time()
    try:
        result = asyncio.run(engine.start())
    finally:
        engine.close()
        os.fsync = real_fsync
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    if result.status != "completed":
        raise SystemExit(f"run {run.id} ended {result.status}: {result.message}")
    events = read_events(run.run_dir / "events.jsonl")
    finished = [e for e in events if e["type"] == "task_finished"]
    if len(finished) != children or any(e["payload"]["status"] != "completed" for e in finished):
        raise SystemExit(f"run {run.id}: not every child returned")
    delegate_ms = [
        float(e["payload"]["elapsedMs"])
        for e in events
        if e["type"] == "tool_call_completed" and e["payload"]["name"] == "agent_delegate"
    ]
    return elapsed, cpu, delegate_ms, fsyncs


def measure(where: Path, children: int, repeats: int) -> dict[bool, dict[str, float]]:
    """Per child, with and without fsync, taking turns (each beside its own baseline run)."""
    samples: dict[bool, dict[str, list[float]]] = {
        fsync: {"per_child": [], "cpu": [], "delegate": [], "total": [], "fsyncs": []}
        for fsync in (True, False)
    }
    for i in range(repeats):
        for fsync in (True, False):
            s = samples[fsync]
            with tempfile.TemporaryDirectory(dir=where) as tmp:
                with_children, cpu, calls_ms, fsyncs = one_run(Path(tmp) / f"n{i}", children, fsync)
                baseline, cpu_baseline, _, fsyncs_baseline = one_run(Path(tmp) / f"b{i}", 0, fsync)
            s["total"].append(with_children)
            s["per_child"].append((with_children - baseline) / children * 1000)
            s["cpu"].append((cpu - cpu_baseline) / children * 1000)
            s["delegate"].extend(calls_ms)
            s["fsyncs"].append((fsyncs - fsyncs_baseline) / children)
    return {
        fsync: {key: statistics.median(values) for key, values in s.items()}
        for fsync, s in samples.items()
    }


def load() -> str:
    """The load averages (1, 5, 15 minutes)."""
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--children", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--quick", action="store_true", help="median of 2: what make bench runs")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = 2
    print(f"{args.children} children delegated in one turn and awaited, under {args.dir}")
    print(f"  at the start: {load()}")
    results = measure(args.dir, args.children, args.repeats)
    print(f"  at the end:   {load()}")
    header = f"{'per child':>10} {'(CPU)':>8} {'fsyncs':>7} {'delegate call':>14} {'run total':>10}"
    print(f"  {'journal':<10} {header}")
    for fsync in (True, False):
        r = results[fsync]
        label = "fsync" if fsync else "no fsync"
        print(
            f"  {label:<10} {r['per_child']:>8.2f}ms {r['cpu']:>6.2f}ms {r['fsyncs']:>7.2f} "
            f"{r['delegate']:>12.2f}ms {r['total']:>9.3f}s"
        )
    synced, unsynced = results[True]["per_child"], results[False]["per_child"]
    print()
    print(f"  {'row':<40} {'measured':>9}   {'baseline, same run':<24} goal")
    what = "delegation per child, journal fsync'd"
    print(
        f"  {what:<40} {synced:>6.2f} ms   "
        f"{f'no fsync {unsynced:.2f} ms':<24} < 2 ms with fsync: "
        + ("met" if synced < 2 else "NOT met")
    )


if __name__ == "__main__":
    main()
