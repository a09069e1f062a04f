"""Runtime overhead of the run loop: a 100-round replayed run with 300 tool calls.

A scripted model records a 100-round chat run once (round 1 writes and
commits, rounds 2-99 each roll dice, read the reply file and grep it, round
100 rolls twice and finishes: 300 calls). That recording is then replayed
through :class:`ReplayGateway`, so the model costs only a file read. Per round
the script takes the wall time from one model request to the next and
subtracts the gateway's time; of what is left it separates the time inside
the calls (gate + tool body + commit, the journal's ``elapsedMs``) from the
runtime's own bookkeeping (journal events, raw-argument and result audit
files, response file, checkpoint).

Reported: the median and p90 per round excluding the model, the bookkeeping
part alone, and the total wall time, with the journal fsync'd (the default)
and without. Then, in the same run, the same loop (a fake model, one async
tool, R rounds × 3 calls) in tavern_agent, PydanticAI, the OpenAI Agents SDK
and LangGraph (``benchmarks/loop_peers.py``), with fsyncs counted. Goals: our
round without fsync at or below the fastest peer's, and at most one journal
fsync per round.
Run: ``python benchmarks/run_overhead.py [--rounds N] [--repeats R]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import loop_peers  # benchmarks/ is on sys.path when a script here runs

from tavern_agent.assembly import Assembly
from tavern_agent.core.profile import Profile
from tavern_agent.providers.gateway import ModelReply, ModelRequest, ReplayGateway
from tavern_agent.runtime.journal import read_events
from tavern_agent.runtime.loop import Engine
from tavern_agent.runtime.run import Run, RunSpec
from tavern_agent.runtime.scripted import ScriptedGateway, Turn, calls

TOOLS = [
    "builtin:chat.search",
    "builtin:workspace.read_file",
    "builtin:workspace.write_file",
    "builtin:workspace.search_files",
    "builtin:dice.roll",
    "builtin:workspace.commit",
    "builtin:workspace.finish",
]
HEADER = '{"user_name":"U","character_name":"S","chat_metadata":{"integrity":"bench"}}'


def script(rounds: int) -> list[Turn]:
    reply = ("The lantern swings as Seraphina wades into the ford. " * 8).strip() + "\n"
    turns = [
        calls(
            ("workspace_write_file", {"file_path": "output/main.md", "content": reply}),
            ("workspace_commit", {"reason": "first draft"}),
            ("dice_roll", {"formula": "1d20"}),
        )
    ]
    for _ in range(rounds - 2):
        turns.append(
            calls(
                ("dice_roll", {"formula": "2d6+1"}),
                ("workspace_read_file", {"file_path": "output/main.md"}),
                ("workspace_search_files", {"pattern": "(?i)lantern", "path": "output"}),
            )
        )
    turns.append(
        calls(
            ("dice_roll", {"formula": "1d4"}),
            ("dice_roll", {"formula": "1d6"}),
            ("workspace_finish", {}),
        )
    )
    return turns


def setup(root: Path, rounds: int) -> tuple[Assembly, RunSpec]:
    root.mkdir(parents=True, exist_ok=True)
    chat = root / "chat.jsonl"
    lines = [HEADER] + [
        f'{{"name":"{"U" if i % 2 == 0 else "S"}","is_user":{str(i % 2 == 0).lower()},'
        f'"mes":"floor {i}: the river, the bridge and the lantern"}}'
        for i in range(20)
    ]
    chat.write_text("\n".join(lines) + "\n")
    profile = Profile.from_json(
        {
            "id": "bench",
            "name": "bench",
            "tools": {"allow": TOOLS},
            "limits": {"maxRounds": rounds, "maxCallsPerInvocation": rounds * 3},
        }
    )
    return Assembly(root / "data"), RunSpec(profile, chat_file=chat, seed=1)


class TimedReplay(ReplayGateway):
    def __init__(self, run_dir: Path) -> None:
        super().__init__(run_dir)
        self.spent: list[float] = []

    async def respond(self, request: ModelRequest) -> ModelReply:
        started = time.perf_counter()
        reply = await super().respond(request)
        self.spent.append(time.perf_counter() - started)
        return reply


def record(rounds: int, root: Path) -> Path:
    data, spec = setup(root / "rec", rounds)
    run = Run.start(data, spec)
    engine = Engine(run, ScriptedGateway(script(rounds)), fsync=False)
    result = asyncio.run(engine.start())
    engine.close()
    assert result.status == "completed" and result.rounds == rounds, result
    return run.run_dir


def replay(recording: Path, rounds: int, root: Path, fsync: bool) -> dict[str, Any]:
    data, spec = setup(root, rounds)
    run = Run.start(data, spec)
    gateway = TimedReplay(recording)
    marks: list[float] = []
    engine = Engine(
        run,
        gateway,
        fsync=fsync,
        listeners=(lambda e: marks.append(time.perf_counter()) if e.kind in MARKS else None,),
    )
    started = time.perf_counter()
    result = asyncio.run(engine.start())
    total = time.perf_counter() - started
    engine.close()
    assert result.status == "completed", result
    events = read_events(run.run_dir / "events.jsonl")
    calls_ms: dict[int, float] = {}
    for e in events:
        if e["type"] in ("tool_call_completed", "tool_call_failed"):
            r = next(x for x in events if x["payload"].get("callId") == e["payload"]["callId"])
            calls_ms[r["payload"]["round"]] = calls_ms.get(r["payload"]["round"], 0.0)
            calls_ms[r["payload"]["round"]] += e["payload"]["elapsedMs"]
    errors = sum(1 for e in events if e["type"] == "tool_call_failed")
    per_round, own = [], []
    # marks: model_request events (one per round) and run_completed (the end)
    for i in range(rounds):
        wall = (marks[i + 1] - marks[i]) * 1000 - gateway.spent[i] * 1000
        per_round.append(wall)
        own.append(wall - calls_ms.get(i + 1, 0.0))
    return {
        "total": total,
        "round": per_round,
        "own": own,
        "calls": sum(1 for e in events if e["type"] == "tool_call_requested"),
        "errors": errors,
        "events": len(events),
    }


MARKS = {"model_request", "run_completed"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="Where the runs are written (default: TMPDIR).")
    parser.add_argument("--quick", action="store_true", help="one run each: what make bench runs")
    args = parser.parse_args()
    if args.quick:
        args.repeats = 1
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        recording = record(args.rounds, root)
        print(f"{args.rounds}-round replayed run in {tmp}; median of {args.repeats} runs each")
        print(f"{'journal':<10}{'per round':>12}{'p90':>10}{'bookkeeping':>14}{'total':>10}")
        for fsync in (True, False):
            results = [
                replay(recording, args.rounds, root / f"r{fsync}{i}", fsync)
                for i in range(args.repeats)
            ]
            med = statistics.median(statistics.median(r["round"]) for r in results)
            p90 = statistics.median(statistics.quantiles(r["round"], n=10)[-1] for r in results)
            own = statistics.median(statistics.median(r["own"]) for r in results)
            total = statistics.median(r["total"] for r in results)
            label = "fsync" if fsync else "no fsync"
            print(f"{label:<10}{med:>9.2f} ms{p90:>7.2f} ms{own:>11.2f} ms{total:>8.2f} s")
        r = results[0]
        print(f"calls per run: {r['calls']} (error results: {r['errors']}), events: {r['events']}")
        loop_peers.report(
            loop_peers.measure(args.rounds, args.repeats, root / "peers"), args.rounds
        )


if __name__ == "__main__":
    main()
